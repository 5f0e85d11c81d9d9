//! `GET /v1/settlements` (reference: "정산 조회", the Settlement object; guides: "정산"): one
//! row per approval and per cancel of the fake's payments, cancels as their own rows with
//! negative amounts, each with Toss's fee (a configurable rate), its VAT (`round(fee / 11)`,
//! the 10 % VAT included in the fee), the supply amount (`fee − vat`), what is paid out
//! (`amount − fee`), the day it was sold (`soldDate`, Korea's date) and the day it is paid
//! out (`paidOutDate`: `soldDate` + the configured cycle). Paged by `page` (from 1) and
//! `size` (≤ 5 000), filtered by `dateType` (`soldDate`, the default, or `paidOutDate`).
//!
//! Toss's answers disagree with its reference in places, and the fake can answer either way
//! (`POST /__fake/settlements/quirks`): `suppliedAmount` (the reference's name) instead of
//! `supplyAmount` (live answers'), `fees[]` left out, fee amounts as strings.

use chrono::{DateTime, Days, FixedOffset, NaiveDate};
use serde::Deserialize;
use serde_json::{Value, json};

/// How the fake settles: the fee rate and the payout cycle.
#[derive(Debug, Clone, Copy)]
pub struct SettlementTerms {
    /// Toss's fee, in basis points of the amount (330: 3.3 %).
    pub fee_basis_points: i64,
    /// Days from `soldDate` to `paidOutDate`.
    pub payout_days: u64,
}

impl Default for SettlementTerms {
    fn default() -> Self {
        SettlementTerms { fee_basis_points: 330, payout_days: 2 }
    }
}

/// Which of Toss's disagreeing spellings the fake answers with.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Quirks {
    /// `suppliedAmount` (the reference) instead of `supplyAmount` (live answers).
    pub supplied_amount: bool,
    /// No `fees[]` at all, the total `fee` only.
    pub fees_missing: bool,
    /// Fee amounts as strings (`"990"`).
    pub fees_as_strings: bool,
}

/// A settlement row's numbers changed, or a row added, by the fake's operator (a Toss whose
/// arithmetic does not add up, or that settles a payment the shop never had).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Tamper {
    pub payment_key: String,
    /// A fee other than the rate gives.
    pub fee: Option<i64>,
    /// A payout other than `amount − fee`.
    pub pay_out_amount: Option<i64>,
    /// Never settled: the payment has no row at all.
    pub withhold: bool,
}

/// A row for a payment the fake never took (`POST /__fake/settlements/extra`): `count` rows
/// of `amount` each, sold on `soldDate`, keys made up (test mode's rows may carry no keys:
/// `nullKeys`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Extra {
    /// `yyyy-MM-dd`.
    pub sold_date: String,
    pub amount: i64,
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default)]
    pub null_keys: bool,
}

fn one() -> u32 {
    1
}

/// One settlement row before it is spelled.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub payment_key: Option<String>,
    pub transaction_key: Option<String>,
    pub order_id: Option<String>,
    pub amount: i64,
    pub fee: i64,
    pub pay_out_amount: i64,
    pub approved_at: DateTime<FixedOffset>,
    pub sold_date: NaiveDate,
    pub paid_out_date: NaiveDate,
}

impl Row {
    /// The row Toss settles a transaction of `amount` (negative: a cancel) with.
    pub(crate) fn of(
        terms: SettlementTerms,
        keys: (Option<String>, Option<String>, Option<String>),
        amount: i64,
        at: DateTime<FixedOffset>,
    ) -> Row {
        // Rounded half away from zero, as a fee in won is.
        let fee = (amount * terms.fee_basis_points + amount.signum() * 5_000) / 10_000;
        let sold_date = at.date_naive();
        let paid_out_date = sold_date.checked_add_days(Days::new(terms.payout_days)).unwrap_or(sold_date);
        let (payment_key, transaction_key, order_id) = keys;
        Row {
            payment_key,
            transaction_key,
            order_id,
            amount,
            fee,
            pay_out_amount: amount - fee,
            approved_at: at,
            sold_date,
            paid_out_date,
        }
    }

    /// The Settlement object, spelled as `quirks` say.
    fn spelled(&self, quirks: Quirks) -> Value {
        // VAT is included in the fee at 10 %: fee = supply + vat, vat = round(fee / 11).
        let vat = (self.fee + self.fee.signum() * 5) / 11;
        let supply = self.fee - vat;
        let number = |n: i64| if quirks.fees_as_strings { json!(n.to_string()) } else { json!(n) };
        let mut row = json!({
            "mId": "tosspayments",
            "paymentKey": self.payment_key,
            "transactionKey": self.transaction_key,
            "orderId": self.order_id,
            "currency": "KRW",
            "method": "카드",
            "amount": self.amount,
            "interestFreeInstallmentFee": 0,
            "fee": number(self.fee),
            "vat": vat,
            "payOutAmount": self.pay_out_amount,
            "approvedAt": self.approved_at.to_rfc3339(),
            "soldDate": self.sold_date.format("%Y-%m-%d").to_string(),
            "paidOutDate": self.paid_out_date.format("%Y-%m-%d").to_string(),
        });
        let supply_name = if quirks.supplied_amount { "suppliedAmount" } else { "supplyAmount" };
        row[supply_name] = json!(supply);
        if !quirks.fees_missing {
            row["fees"] = json!([{ "type": "BASE", "fee": number(self.fee) }]);
        }
        row
    }
}

/// One page of `rows` for the query (`startDate`, `endDate`: dates; `dateType`; `page`,
/// `size`), or Toss's error.
pub(crate) fn page(rows: &[Row], query: &[(String, String)], quirks: Quirks) -> (u16, Value) {
    let get = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let date = |name: &str| get(name).and_then(|t| NaiveDate::parse_from_str(t, "%Y-%m-%d").ok());
    let (Some(start), Some(end)) = (date("startDate"), date("endDate")) else {
        return invalid("startDate, endDate는 yyyy-MM-dd 형식의 필수 값입니다.");
    };
    let by_paid_out = match get("dateType") {
        None | Some("soldDate") => false,
        Some("paidOutDate") => true,
        Some(_) => return invalid("dateType은 soldDate 또는 paidOutDate 입니다."),
    };
    let number = |name: &str, default: usize| get(name).map_or(Some(default), |t| t.parse::<usize>().ok());
    let (Some(page), Some(size)) = (number("page", 1), number("size", 100)) else {
        return invalid("page, size는 숫자입니다.");
    };
    if page == 0 || !(1..=5000).contains(&size) {
        return invalid("page는 1 이상, size는 1에서 5000 사이여야 합니다.");
    }
    let within: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            let day = if by_paid_out { r.paid_out_date } else { r.sold_date };
            day >= start && day <= end
        })
        .collect();
    let answer: Vec<Value> =
        within.iter().skip((page - 1).saturating_mul(size)).take(size).map(|r| r.spelled(quirks)).collect();
    (200, Value::Array(answer))
}

fn invalid(message: &str) -> (u16, Value) {
    (400, json!({ "code": "INVALID_REQUEST", "message": message }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<FixedOffset> {
        DateTime::parse_from_rfc3339(text).unwrap()
    }

    #[test]
    fn a_row_adds_up_as_toss_documents() {
        let terms = SettlementTerms { fee_basis_points: 330, payout_days: 2 };
        let row = Row::of(
            terms,
            (Some("pk".into()), Some("tk".into()), None),
            30_000,
            at("2026-12-01T23:30:00+09:00"),
        );
        assert_eq!((row.fee, row.pay_out_amount), (990, 29_010));
        assert_eq!(row.sold_date.to_string(), "2026-12-01", "Korea's date, not UTC's");
        assert_eq!(row.paid_out_date.to_string(), "2026-12-03");
        let spelled = row.spelled(Quirks::default());
        assert_eq!((spelled["vat"].clone(), spelled["supplyAmount"].clone()), (json!(90), json!(900)));
        let cancel = Row::of(terms, (None, None, None), -10_000, at("2026-12-02T10:00:00+09:00"));
        assert_eq!((cancel.fee, cancel.pay_out_amount), (-330, -9_670), "a cancel gives its fee back");
        let quirky = row.spelled(Quirks { supplied_amount: true, fees_missing: true, fees_as_strings: true });
        assert!(quirky.get("supplyAmount").is_none() && quirky["suppliedAmount"] == json!(900));
        assert!(quirky.get("fees").is_none());
        assert_eq!(quirky["fee"], json!("990"));
    }

    #[test]
    fn pages_are_counted_from_one_and_bounded() {
        let terms = SettlementTerms::default();
        let rows: Vec<Row> = (0..5)
            .map(|_| Row::of(terms, (None, None, None), 1_000, at("2026-12-01T10:00:00+09:00")))
            .collect();
        let q = |page: &str, size: &str| {
            vec![
                ("startDate".to_owned(), "2026-12-01".to_owned()),
                ("endDate".to_owned(), "2026-12-01".to_owned()),
                ("page".to_owned(), page.to_owned()),
                ("size".to_owned(), size.to_owned()),
            ]
        };
        let (status, second) = page(&rows, &q("2", "2"), Quirks::default());
        assert_eq!((status, second.as_array().unwrap().len()), (200, 2));
        assert_eq!(page(&rows, &q("3", "2"), Quirks::default()).1.as_array().unwrap().len(), 1);
        assert_eq!(page(&rows, &q("0", "2"), Quirks::default()).0, 400);
        assert_eq!(page(&rows, &q("1", "5001"), Quirks::default()).0, 400);
    }
}
