//! A merchant's daily report (docs/spec.md §15): its orders created on one day of its own
//! timezone, their gross, refunds and net, and the provider's fees and payouts where it has
//! settled them — per store and in total, per currency.

use chrono::{DateTime, NaiveDate, TimeZone, Utc};

use super::{Authorized, Merchants};
use crate::application::AppError;
use crate::application::ports::ReportLine;
use crate::domain::merchant::Merchant;

/// The report of one day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyReport {
    pub merchant: Merchant,
    pub date: NaiveDate,
    /// The day's bounds in UTC: `[from, to)`.
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// A line per store (or none) and currency.
    pub stores: Vec<ReportLine>,
    /// A line per currency, every store together.
    pub total: Vec<ReportLine>,
}

/// The first instant of `date` in `zone` (a day that begins in a gap starts at its end).
fn start_of(zone: chrono_tz::Tz, date: NaiveDate) -> DateTime<Utc> {
    let midnight = date.and_time(chrono::NaiveTime::MIN);
    let local = zone.from_local_datetime(&midnight);
    match local.earliest() {
        Some(start) => start.with_timezone(&Utc),
        // No zone skips more than a few hours: the first hour that exists.
        None => (1..=4)
            .find_map(|h| zone.from_local_datetime(&(midnight + chrono::Duration::hours(h))).earliest())
            .map_or_else(|| midnight.and_utc(), |start| start.with_timezone(&Utc)),
    }
}

/// The lines of every store added up, one per currency.
fn totals(lines: &[ReportLine]) -> Vec<ReportLine> {
    let mut total: Vec<ReportLine> = Vec::new();
    for line in lines {
        match total.iter_mut().find(|t| t.currency == line.currency) {
            Some(t) => {
                t.orders += line.orders;
                t.gross += line.gross;
                t.refunds += line.refunds;
                t.fees = add(t.fees, line.fees);
                t.payouts = add(t.payouts, line.payouts);
            }
            None => total.push(ReportLine { store_id: None, ..line.clone() }),
        }
    }
    total
}

fn add(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

impl Merchants {
    /// The merchant's report of `date`, in its timezone, to anyone let in.
    ///
    /// # Errors
    /// `Internal` when the stored timezone is no zone; `Unavailable`.
    pub async fn daily_report(&self, auth: &Authorized, date: NaiveDate) -> Result<DailyReport, AppError> {
        let merchant = auth.merchant.clone();
        let id = merchant.id;
        let zone: chrono_tz::Tz = merchant
            .timezone
            .parse()
            .map_err(|_| AppError::internal(format!("merchant {id} has no zone: {}", merchant.timezone)))?;
        let from = start_of(zone, date);
        let to = start_of(zone, date.succ_opt().unwrap_or(date));
        let stores = self.reports.daily(id, from, to).await?;
        let total = totals(&stores);
        Ok(DailyReport { merchant, date, from, to, stores, total })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_is_the_merchants_day() {
        let date = NaiveDate::from_ymd_opt(2026, 12, 6).unwrap();
        assert_eq!(start_of(chrono_tz::Asia::Seoul, date).to_rfc3339(), "2026-12-05T15:00:00+00:00");
        assert_eq!(start_of(chrono_tz::UTC, date).to_rfc3339(), "2026-12-06T00:00:00+00:00");
        // São Paulo skipped midnight on 2018-11-04: the day began at 01:00 local.
        let gap = NaiveDate::from_ymd_opt(2018, 11, 4).unwrap();
        assert_eq!(start_of(chrono_tz::America::Sao_Paulo, gap).to_rfc3339(), "2018-11-04T03:00:00+00:00");
    }

    #[test]
    fn totals_add_every_store_per_currency() {
        let line = |store: bool, currency: &str, fees: Option<i64>| ReportLine {
            store_id: store.then(crate::domain::ids::StoreId::new),
            currency: currency.into(),
            orders: 2,
            gross: 1000,
            refunds: 100,
            fees,
            payouts: fees.map(|f| 1000 - f),
        };
        let total = totals(&[line(true, "KRW", Some(30)), line(false, "KRW", None), line(true, "USD", None)]);
        assert_eq!(total.len(), 2);
        assert_eq!(
            (total[0].orders, total[0].gross, total[0].refunds, total[0].fees),
            (4, 2000, 200, Some(30))
        );
        assert_eq!((total[1].currency.as_str(), total[1].fees, total[1].store_id), ("USD", None, None));
    }
}
