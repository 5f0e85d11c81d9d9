//! The provider's ledger, reconciled daily (docs/spec.md §10): one day of the provider's
//! transactions (its zone's day, `D 00:00:00 – D 23:59:59`) matched with our payments and
//! refunds ([`crate::domain::ledger::reconcile`], page by page); the findings stored, each
//! audited when first found, and a clean day recorded as a clean run. Running a day again
//! replaces its findings. A row the provider sends that cannot be read is a finding of its
//! own (`UNREADABLE`); a provider that pages in a circle ends the run, nothing stored. The
//! same run reads what the provider pays out for the day's transactions (its settlements,
//! docs/spec.md §13, [`crate::domain::payout`]): the payouts recorded, the findings with the
//! rest. The worker runs the previous day once `payment.toss.ledger_at` has passed in the
//! provider's zone, and the day whose `settlement_grace` has just ended once more;
//! `app reconcile ledger --date` runs any day by hand.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveTime, Utc};

use crate::application::audit::{self, entity};
use crate::application::ports::Cause;
use crate::application::ports::{
    AuditRecord, Clock, GatewayError, LedgerRun, LedgerStore, PaymentRepository, PayoutStore, ProviderLedger,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::PaymentId;
use crate::domain::ledger::{CappedFindings, Finding, FindingKind, Seen, match_theirs, missing_at_provider};
use crate::domain::payout::{PaymentPayout, Payout, Settled};

/// The distinct payment keys a page names.
fn payment_keys<'a>(keys: impl Iterator<Item = Option<&'a str>>) -> Vec<String> {
    let mut keys: Vec<String> = keys.flatten().map(str::to_owned).collect();
    keys.sort();
    keys.dedup();
    keys
}

/// A provider's refusal, or failure, to show its books: nothing is stored.
fn refused_ledger(e: GatewayError) -> AppError {
    match e {
        // Its answer, not an outage (409): asking again will not help.
        GatewayError::Rejected { code, message } => AppError::Conflict {
            code: crate::application::money::provider_view::PROVIDER_REFUSED,
            message: format!("the payment provider refused to show its ledger: {code}: {message}"),
        },
        e @ GatewayError::Unavailable(_) => {
            AppError::Unavailable(Cause::context("payment provider's ledger", e))
        }
    }
}

/// Pages of one day read at most (5 000 rows each at Toss: five million transactions).
const MAX_PAGES: usize = 1000;

/// When and in which zone the provider's day is reconciled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerSettings {
    /// The provider's zone (Toss: Asia/Seoul, UTC+09:00 without daylight saving).
    pub zone: FixedOffset,
    /// The time of day, in that zone, after which the previous day is reconciled.
    pub at: NaiveTime,
    /// How long after a transaction the provider may take to list its settlement
    /// (`payment.toss.settlement_grace`); past it, a missing one is a finding.
    pub settlement_grace: chrono::Duration,
    /// `payment.toss.ledger_max_findings`: the most findings one run keeps (a provider that
    /// answers rows without end fills neither the memory nor the store); the rest are
    /// counted in one `TRUNCATED` finding.
    pub max_findings: usize,
}

/// How a day's run went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerReport {
    pub run: LedgerRun,
    pub findings: Vec<Finding>,
}

pub struct Ledger {
    /// The provider's ledger; `None` for a provider that keeps none (mock, external).
    provider: Option<Arc<dyn ProviderLedger>>,
    books: Arc<dyn PaymentRepository>,
    store: Arc<dyn LedgerStore>,
    payouts: Arc<dyn PayoutStore>,
    clock: Arc<dyn Clock>,
    settings: LedgerSettings,
}

/// What the provider pays out on one day (`paidOutDate`): what the bank should receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayoutDay {
    pub date: NaiveDate,
    pub amount: i64,
    pub fee: i64,
    /// The VAT of the rows that give it.
    pub vat: i64,
    pub pay_out_amount: i64,
    pub rows: Vec<Payout>,
    /// Whether the provider keeps a ledger payouts are read from (Toss); with one that
    /// keeps none (mock, external) nothing is ever recorded.
    pub provider_ledger: bool,
}

impl Ledger {
    pub fn new(
        provider: Option<Arc<dyn ProviderLedger>>,
        books: Arc<dyn PaymentRepository>,
        store: Arc<dyn LedgerStore>,
        payouts: Arc<dyn PayoutStore>,
        clock: Arc<dyn Clock>,
        settings: LedgerSettings,
    ) -> Self {
        Ledger { provider, books, store, payouts, clock, settings }
    }

    /// The instants of `day` in the provider's zone, first and last.
    fn bounds(&self, day: NaiveDate) -> (DateTime<Utc>, DateTime<Utc>) {
        // A fixed offset maps each local time to one instant: midnight there, as UTC.
        let offset = chrono::Duration::seconds(i64::from(self.settings.zone.local_minus_utc()));
        let start = (day.and_time(NaiveTime::MIN) - offset).and_utc();
        (start, start + chrono::Duration::days(1) - chrono::Duration::microseconds(1))
    }

    /// Reconciles `day`: the provider's ledger against our books; stores the run and its
    /// findings (replacing an earlier run of the day), each finding audited.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Conflict` `NOT_SUPPORTED` when the provider keeps no
    /// ledger (mock, external); `Unavailable` when the provider or the database fails
    /// (nothing is stored: the day's earlier run, if any, stands).
    pub async fn reconcile_day(&self, actor: &Actor, day: NaiveDate) -> Result<LedgerReport, AppError> {
        actor.require_admin()?;
        let Some(provider) = self.provider.as_ref() else {
            return Err(AppError::Conflict {
                code: "NOT_SUPPORTED",
                message: "this payment provider has no ledger to reconcile".into(),
            });
        };
        let started_at = self.clock.now();
        let (start, end) = self.bounds(day);
        let (seen, mut findings, transactions) = self.transactions(provider.as_ref(), day).await?;
        let ours = self.books.books(Some((start, end)), &[]).await?;
        findings.extend(missing_at_provider(&ours, &seen, start, end));
        drop(seen);
        let mut settled = self.settlements(provider.as_ref(), day, &mut findings).await?;
        settled.missing(&ours, start, end, self.clock.now(), self.settings.settlement_grace);
        findings.extend(settled.findings.drain(..));
        let findings = findings.finish();
        let run = LedgerRun {
            day,
            started_at,
            finished_at: self.clock.now(),
            transactions,
            findings: findings.len() as i64,
        };
        let audit = self.audit(actor, &run, &findings, settled.payouts.len()).await?;
        self.store.replace_day(run.clone(), findings.clone(), settled.payouts, audit).await?;
        if findings.is_empty() {
            tracing::info!(%day, transactions = run.transactions, "ledger reconciled: clean");
        } else {
            tracing::warn!(%day, findings = findings.len(), "ledger reconciled: findings for an operator");
        }
        Ok(LedgerReport { run, findings })
    }

    /// The provider's transactions of `day`, page by page (docs/toss.md, "The ledger"):
    /// each page matched with the books it names and let go; only what the provider listed
    /// is kept, for the last half. Answers that, the findings, and how many rows there were.
    async fn transactions(
        &self,
        provider: &dyn ProviderLedger,
        day: NaiveDate,
    ) -> Result<(Seen, CappedFindings, i64), AppError> {
        let mut seen = Seen::default();
        let mut findings = CappedFindings::new(self.settings.max_findings);
        let mut transactions = 0i64;
        let mut cursors: HashSet<String> = HashSet::new();
        let mut after: Option<String> = None;
        for pages in 1..=MAX_PAGES {
            let page = provider.ledger_page(day, after.clone()).await.map_err(refused_ledger)?;
            transactions += (page.transactions.len() + page.unreadable.len()) as i64;
            findings.extend(page.unreadable.iter().map(Finding::unreadable));
            let fresh = seen.note(&page.transactions);
            let keys = payment_keys(fresh.iter().map(|t| Some(t.payment_key.as_str())));
            if !keys.is_empty() {
                let books = self.books.books(None, &keys).await?;
                findings.extend(match_theirs(&fresh, &books));
            }
            match page.next {
                None => return Ok((seen, findings, transactions)),
                Some(next) if !cursors.insert(next.clone()) => {
                    // A provider that pages in a circle would be read for ever.
                    return Err(AppError::unavailable(format!(
                        "the provider's ledger of {day} repeats its cursor after {pages} pages; nothing stored"
                    )));
                }
                Some(next) => after = Some(next),
            }
        }
        Err(AppError::unavailable(format!(
            "the provider's ledger of {day} has more than {MAX_PAGES} pages; nothing stored"
        )))
    }

    /// What the provider pays out for the transactions it sold on `day` (docs/spec.md §13),
    /// page by page: each page matched with the books it names and let go; the payouts
    /// recorded and the sources settled are kept, each page's findings moved to `findings`
    /// (capped: a provider answering rows without end cannot fill the memory).
    async fn settlements(
        &self,
        provider: &dyn ProviderLedger,
        day: NaiveDate,
        findings: &mut CappedFindings,
    ) -> Result<Settled, AppError> {
        let mut settled = Settled::default();
        for page in 1..=MAX_PAGES {
            let read = provider.settlement_page(day, page as u32).await.map_err(refused_ledger)?;
            findings.extend(read.unreadable.iter().map(Finding::unreadable));
            let keys = payment_keys(read.rows.iter().map(|r| r.payment_key.as_deref()));
            let books = if keys.is_empty() { Vec::new() } else { self.books.books(None, &keys).await? };
            settled.match_rows(&read.rows, &books);
            findings.extend(settled.findings.drain(..));
            if !read.more {
                return Ok(settled);
            }
        }
        Err(AppError::unavailable(format!(
            "the provider's settlements of {day} have more than {MAX_PAGES} pages; nothing stored"
        )))
    }

    /// Each finding audited once, when first found (a rerun audits what is new), and the
    /// run itself.
    async fn audit(
        &self,
        actor: &Actor,
        run: &LedgerRun,
        findings: &[Finding],
        payouts: usize,
    ) -> Result<Vec<AuditRecord>, AppError> {
        let day = run.day;
        let earlier: HashSet<String> = match self.store.day(day).await? {
            Some((_, earlier)) => earlier.iter().map(Finding::identity).collect(),
            None => HashSet::new(),
        };
        let new_findings: Vec<&Finding> =
            findings.iter().filter(|f| !earlier.contains(&f.identity())).collect();
        let at = run.finished_at;
        let mut audit: Vec<AuditRecord> = new_findings
            .iter()
            .map(|f| {
                let detail = format!(
                    "{}: payment {} transaction {} ours {} theirs {}: {}",
                    f.kind,
                    f.payment_key.as_deref().unwrap_or("-"),
                    f.transaction_key.as_deref().unwrap_or("-"),
                    f.ours.as_deref().unwrap_or("-"),
                    f.theirs.as_deref().unwrap_or("-"),
                    f.detail
                );
                audit::record(AuditAction::LedgerFinding, entity::LEDGER, day, actor, Some(detail), at)
            })
            .collect();
        let detail = format!(
            "{} transactions, {payouts} payouts, {} findings ({} new)",
            run.transactions,
            run.findings,
            new_findings.len()
        );
        audit.push(audit::record(
            AuditAction::LedgerReconciled,
            entity::LEDGER,
            day,
            actor,
            Some(detail),
            at,
        ));
        Ok(audit)
    }

    /// The worker's round: once `ledger_at` has passed in the provider's zone, the previous
    /// day is reconciled if it has no run yet. `None` when nothing was due.
    ///
    /// # Errors
    /// As [`Ledger::reconcile_day`].
    pub async fn run_due(&self) -> Result<Option<LedgerReport>, AppError> {
        let now = self.clock.now().with_timezone(&self.settings.zone);
        if now.time() < self.settings.at {
            return Ok(None);
        }
        let Some(yesterday) = now.date_naive().pred_opt() else { return Ok(None) };
        let actor = Actor::system("ledger");
        if self.store.day(yesterday).await?.is_none() {
            return self.reconcile_day(&actor, yesterday).await.map(Some);
        }
        // The day whose settlements' grace has just ended is run once more: what the
        // provider still has not settled is `SETTLEMENT_MISSING` now (docs/operations.md).
        let grace_days = self.settings.settlement_grace.num_days() + 1;
        let Some(settled_by_now) =
            yesterday.checked_sub_days(chrono::Days::new(grace_days.max(0).unsigned_abs()))
        else {
            return Ok(None);
        };
        let (_, end) = self.bounds(settled_by_now);
        match self.store.day(settled_by_now).await? {
            Some((run, _)) if run.finished_at < end + self.settings.settlement_grace => {
                self.reconcile_day(&actor, settled_by_now).await.map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The run of `day` and its findings; `None` if the day was never run.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Unavailable` when the database fails.
    pub async fn findings(
        &self,
        actor: &Actor,
        day: NaiveDate,
    ) -> Result<Option<(LedgerRun, Vec<Finding>)>, AppError> {
        actor.require_admin()?;
        Ok(self.store.day(day).await?)
    }

    /// The latest run's findings by kind, for `/metrics` (`ledger_findings{kind}`).
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn latest_counts(&self) -> Result<Vec<(FindingKind, i64)>, AppError> {
        Ok(self.store.latest_counts().await?)
    }

    /// What the provider pays out on `day` (by `paidOutDate`), summed, with its rows.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Unavailable` when the database fails.
    pub async fn payouts_on(&self, actor: &Actor, day: NaiveDate) -> Result<PayoutDay, AppError> {
        actor.require_admin()?;
        let rows = self.payouts.paid_out_on(day).await?;
        Ok(PayoutDay {
            date: day,
            amount: rows.iter().map(|r| r.amount).sum(),
            fee: rows.iter().map(|r| r.fee).sum(),
            vat: rows.iter().filter_map(|r| r.vat).sum(),
            pay_out_amount: rows.iter().map(|r| r.pay_out_amount).sum(),
            rows,
            provider_ledger: self.provider.is_some(),
        })
    }

    /// A payment's payouts netted (its approval and cancels), once the provider settled it.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn payout_of(&self, payment: PaymentId) -> Result<Option<PaymentPayout>, AppError> {
        Ok(PaymentPayout::net(&self.payouts.payouts_of(&[payment]).await?))
    }
}

#[async_trait::async_trait]
impl crate::application::jobs::PeriodicJob for Ledger {
    fn name(&self) -> &'static str {
        "the provider's ledger"
    }

    /// A minute: the day's run is due once `payment.toss.ledger_at` has passed, and a day that
    /// failed is tried again the next minute.
    fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_secs(60)
    }

    /// A day of many pages, each up to the provider's own minute: an hour before the job
    /// counts as silent.
    fn longest_round(&self) -> std::time::Duration {
        std::time::Duration::from_secs(3600)
    }

    async fn round(&self) -> Result<Option<String>, AppError> {
        Ok(self.run_due().await?.map(|r| format!("ledger reconciled: {r:?}")))
    }
}
