//! The bodies we send Toss (typed, each named as Toss's reference names its fields), and
//! Toss's objects as we read them (reference: the Payment, Billing and Transaction objects),
//! checked like any input (docs/spec.md §5): a key or code over its documented length or with
//! control characters, a negative or missing amount, breaks the protocol, and the answer is
//! then an unknown outcome, never a decision. Only the fields we act on are read; the
//! provider's view for support passes the whole object on unchanged.

use serde::{Deserialize, Serialize};

use crate::adapters::providers::BrokenAnswer;
use crate::domain::ledger::UnreadableRow;
use crate::domain::payout::SettlementRow;
use crate::domain::text;

/// `paymentKey`, documented as up to 200 characters.
const PAYMENT_KEY: usize = 200;
/// `orderId`: 6–64 characters.
const ORDER_ID: usize = 64;
/// `transactionKey`: 64 characters.
const TRANSACTION_KEY: usize = 64;
/// `billingKey`: 200 characters.
const BILLING_KEY: usize = 200;

/// `POST /v1/payments/confirm` (reference: "결제 승인").
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Confirm<'a> {
    pub payment_key: &'a str,
    pub order_id: &'a str,
    pub amount: i64,
}

/// `POST /v1/billing/{billingKey}` (reference: "카드 자동결제 승인").
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BillingCharge<'a> {
    pub customer_key: &'a str,
    pub amount: i64,
    pub order_id: &'a str,
    pub order_name: &'a str,
}

/// `POST /v1/payments/key-in` (reference: "카드 번호 결제", the key-in API): a card charged
/// by its number, as the meetup platform's test payments do.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyIn<'a> {
    pub amount: i64,
    pub order_id: &'a str,
    pub order_name: &'a str,
    pub card_number: &'a str,
    pub card_expiration_year: &'a str,
    pub card_expiration_month: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card_password: Option<&'a str>,
    pub customer_identity_number: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub customer_email: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub customer_name: Option<&'a str>,
}

/// `POST /v1/billing/authorizations/issue` (reference: "authKey로 카드 빌링키 발급").
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BillingIssue<'a> {
    pub auth_key: &'a str,
    pub customer_key: &'a str,
}

/// `POST /v1/payments/{paymentKey}/cancel` (reference: "결제 취소"): no `cancelAmount` is
/// the whole balance.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CancelRequest<'a> {
    pub cancel_reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel_amount: Option<i64>,
    pub refundable_amount: i64,
}

/// Where a Toss payment stands (`status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TossStatus {
    Ready,
    InProgress,
    WaitingForDeposit,
    Done,
    Canceled,
    PartialCanceled,
    Aborted,
    Expired,
}

impl TossStatus {
    /// As Toss spells it.
    pub fn as_str(&self) -> &'static str {
        match self {
            TossStatus::Ready => "READY",
            TossStatus::InProgress => "IN_PROGRESS",
            TossStatus::WaitingForDeposit => "WAITING_FOR_DEPOSIT",
            TossStatus::Done => "DONE",
            TossStatus::Canceled => "CANCELED",
            TossStatus::PartialCanceled => "PARTIAL_CANCELED",
            TossStatus::Aborted => "ABORTED",
            TossStatus::Expired => "EXPIRED",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TossFailure {
    pub code: String,
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TossCancel {
    pub cancel_amount: i64,
    pub transaction_key: String,
    #[serde(default)]
    pub canceled_at: Option<String>,
    #[serde(default)]
    pub cancel_reason: Option<String>,
}

/// The Payment object, the fields we act on.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TossPayment {
    pub payment_key: String,
    pub order_id: String,
    #[serde(default)]
    pub order_name: Option<String>,
    pub status: TossStatus,
    pub total_amount: i64,
    pub balance_amount: i64,
    #[serde(default)]
    pub requested_at: Option<String>,
    #[serde(default)]
    pub approved_at: Option<String>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub cancels: Option<Vec<TossCancel>>,
    #[serde(default)]
    pub failure: Option<TossFailure>,
}

/// The Billing object (a saved card), the fields we keep.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TossBilling {
    pub billing_key: String,
    pub customer_key: String,
    #[serde(default)]
    pub card_company: Option<String>,
    #[serde(default)]
    pub card_number: Option<String>,
}

impl std::fmt::Debug for TossBilling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TossBilling")
            .field("billing_key", &"***")
            .field("customer_key", &self.customer_key)
            .field("card_company", &self.card_company)
            .field("card_number", &self.card_number)
            .finish()
    }
}

/// One entry of `GET /v1/transactions`: an approval or a cancel.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TossTransaction {
    pub transaction_key: String,
    pub payment_key: String,
    pub order_id: String,
    pub status: TossStatus,
    pub transaction_at: String,
    pub amount: i64,
    #[serde(default)]
    pub currency: Option<String>,
}

fn check(field: &str, value: &str, max: usize) -> Result<(), BrokenAnswer> {
    if value.is_empty() {
        return Err(format!("{field}: empty").into());
    }
    text::check(field, value, max).map_err(|e| BrokenAnswer(e.to_string()))
}

fn amount(field: &str, value: i64) -> Result<(), BrokenAnswer> {
    if value < 0 { Err(format!("{field}: negative").into()) } else { Ok(()) }
}

/// Reads an answer, or says how it breaks the protocol.
pub fn read<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, BrokenAnswer> {
    serde_json::from_slice(body).map_err(|e| BrokenAnswer(format!("unreadable answer: {e}")))
}

impl TossPayment {
    /// # Errors
    /// How the answer breaks the protocol.
    pub fn checked(self) -> Result<Self, BrokenAnswer> {
        check("paymentKey", &self.payment_key, PAYMENT_KEY)?;
        check("orderId", &self.order_id, ORDER_ID)?;
        amount("totalAmount", self.total_amount)?;
        amount("balanceAmount", self.balance_amount)?;
        if self.balance_amount > self.total_amount {
            return Err("balanceAmount exceeds totalAmount".into());
        }
        for (i, cancel) in self.cancels.iter().flatten().enumerate() {
            check(&format!("cancels[{i}].transactionKey"), &cancel.transaction_key, TRANSACTION_KEY)?;
            amount(&format!("cancels[{i}].cancelAmount"), cancel.cancel_amount)?;
        }
        if let Some(failure) = &self.failure {
            check("failure.code", &failure.code, text::limits::PROVIDER_CODE)?;
        }
        Ok(self)
    }

    /// The newest cancel (Toss appends to `cancels[]`).
    pub fn newest_cancel(&self) -> Option<&TossCancel> {
        self.cancels.as_ref().and_then(|c| c.last())
    }

    /// The code of a failed payment (`failure.code`), or the status itself.
    pub fn failure_code(&self) -> String {
        self.failure
            .as_ref()
            .map(|f| f.code.clone())
            .unwrap_or_else(|| format!("{:?}", self.status).to_uppercase())
    }
}

impl TossBilling {
    /// # Errors
    /// How the answer breaks the protocol.
    pub fn checked(self) -> Result<Self, BrokenAnswer> {
        check("billingKey", &self.billing_key, BILLING_KEY)?;
        check("customerKey", &self.customer_key, 50)?;
        for (field, value) in [("cardCompany", &self.card_company), ("cardNumber", &self.card_number)] {
            if let Some(value) = value {
                text::check(field, value, 64).map_err(|e| BrokenAnswer(e.to_string()))?;
            }
        }
        Ok(self)
    }
}

impl TossTransaction {
    /// # Errors
    /// How the answer breaks the protocol.
    pub fn checked(self) -> Result<Self, BrokenAnswer> {
        check("transactionKey", &self.transaction_key, TRANSACTION_KEY)?;
        check("paymentKey", &self.payment_key, PAYMENT_KEY)?;
        check("orderId", &self.order_id, ORDER_ID)?;
        check("transactionAt", &self.transaction_at, 64)?;
        amount("amount", self.amount)?;
        Ok(self)
    }

    /// One row of a page, read on its own: a row that breaks the protocol is that row's
    /// problem (with its `transactionKey` if that much is readable), not the page's.
    pub fn from_row(row: serde_json::Value) -> Result<Self, UnreadableRow> {
        let key = row
            .get("transactionKey")
            .and_then(serde_json::Value::as_str)
            .filter(|k| check("transactionKey", k, TRANSACTION_KEY).is_ok())
            .map(str::to_owned);
        serde_json::from_value::<TossTransaction>(row)
            .map_err(|e| BrokenAnswer(e.to_string()))
            .and_then(TossTransaction::checked)
            .map_err(|why| UnreadableRow { transaction_key: key, why: text::excerpt(&why.0, 200) })
    }
}

/// A number Toss may send as a number or as a string (`"990"`: fee amounts, docs/toss.md).
fn loose_amount(row: &serde_json::Value, field: &str) -> Result<Option<i64>, BrokenAnswer> {
    match row.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Number(n)) => {
            n.as_i64().map(Some).ok_or_else(|| BrokenAnswer(format!("{field}: not a whole number")))
        }
        Some(serde_json::Value::String(t)) => t
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| BrokenAnswer(format!("{field}: not a number: {}", text::excerpt(t, 32)))),
        Some(_) => Err(format!("{field}: not a number").into()),
    }
}

fn key_of(row: &serde_json::Value, field: &str, max: usize) -> Result<Option<String>, BrokenAnswer> {
    match row.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(k)) => {
            check(field, k, max)?;
            Ok(Some(k.clone()))
        }
        Some(_) => Err(format!("{field}: not a string").into()),
    }
}

fn date_of(row: &serde_json::Value, field: &str) -> Result<chrono::NaiveDate, BrokenAnswer> {
    let text =
        row.get(field).and_then(serde_json::Value::as_str).ok_or_else(|| format!("{field}: missing"))?;
    // `2026-12-01`; a date and time is read for its date.
    let day = text.get(..10).unwrap_or(text);
    chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d")
        .map_err(|_| BrokenAnswer(format!("{field}: not a date: {}", text::excerpt(text, 32))))
}

/// One row of `GET /v1/settlements` (the Settlement object), read as Toss answers it rather
/// than as its reference spells it (docs/toss.md, "What Toss pays out"): `supplyAmount` or
/// `suppliedAmount`; the total `fee`, or the sum of `fees[]` when it is absent; amounts as
/// numbers or strings; keys absent in test mode's rows.
pub fn settlement_from_row(row: &serde_json::Value) -> Result<SettlementRow, UnreadableRow> {
    let transaction_key = row
        .get("transactionKey")
        .and_then(serde_json::Value::as_str)
        .filter(|k| check("transactionKey", k, TRANSACTION_KEY).is_ok())
        .map(str::to_owned);
    read_settlement(row).map_err(|why| UnreadableRow { transaction_key, why: text::excerpt(&why.0, 200) })
}

fn read_settlement(row: &serde_json::Value) -> Result<SettlementRow, BrokenAnswer> {
    let amount = loose_amount(row, "amount")?.ok_or("amount: missing")?;
    let fee = match loose_amount(row, "fee")? {
        Some(fee) => fee,
        None => {
            let fees =
                row.get("fees").and_then(serde_json::Value::as_array).ok_or("fee: missing, and no fees[]")?;
            let mut total = 0i64;
            for (i, entry) in fees.iter().enumerate() {
                let one = loose_amount(entry, "fee").map_err(|e| format!("fees[{i}].{e}"))?;
                total = total.checked_add(one.unwrap_or(0)).ok_or("fees[]: too large")?;
            }
            total
        }
    };
    let supply_amount = match loose_amount(row, "supplyAmount")? {
        Some(supply) => Some(supply),
        None => loose_amount(row, "suppliedAmount")?,
    };
    Ok(SettlementRow {
        transaction_key: key_of(row, "transactionKey", TRANSACTION_KEY)?,
        payment_key: key_of(row, "paymentKey", PAYMENT_KEY)?,
        order_id: key_of(row, "orderId", ORDER_ID)?,
        amount,
        fee,
        supply_amount,
        vat: loose_amount(row, "vat")?,
        pay_out_amount: loose_amount(row, "payOutAmount")?.ok_or("payOutAmount: missing")?,
        sold_date: date_of(row, "soldDate")?,
        paid_out_date: date_of(row, "paidOutDate")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payment(extra: serde_json::Value) -> Result<TossPayment, BrokenAnswer> {
        let mut base = serde_json::json!({
            "paymentKey": "tgen_1", "orderId": "pay-1-1", "status": "DONE",
            "totalAmount": 1000, "balanceAmount": 1000, "cancels": null, "failure": null
        });
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        read::<TossPayment>(base.to_string().as_bytes())?.checked()
    }

    #[test]
    fn a_payment_that_breaks_the_protocol_is_refused_naming_the_field() {
        assert!(payment(serde_json::json!({})).is_ok());
        let cases = [
            (serde_json::json!({ "paymentKey": "k".repeat(201) }), "paymentKey"),
            (serde_json::json!({ "paymentKey": "" }), "paymentKey"),
            (serde_json::json!({ "orderId": "a\u{0}b" }), "orderId"),
            (serde_json::json!({ "balanceAmount": 2000 }), "balanceAmount"),
            (serde_json::json!({ "totalAmount": -1 }), "totalAmount"),
            (serde_json::json!({ "status": "SOMETHING" }), "unreadable"),
            (serde_json::json!({ "totalAmount": "1000" }), "unreadable"),
            (
                serde_json::json!({ "cancels": [{ "cancelAmount": 1, "transactionKey": "t\nk" }] }),
                "cancels[0].transactionKey",
            ),
        ];
        for (extra, field) in cases {
            let err = payment(extra.clone()).unwrap_err();
            assert!(err.0.contains(field), "{extra}: {err}");
        }
    }

    #[test]
    fn a_billing_key_never_shows_in_debug() {
        let billing = TossBilling {
            billing_key: "bk_secret".into(),
            customer_key: "c".into(),
            card_company: None,
            card_number: None,
        };
        assert!(!format!("{billing:?}").contains("bk_secret"));
    }

    #[test]
    fn a_settlement_is_read_whichever_way_toss_spells_it() {
        let live = serde_json::json!({
            "paymentKey": "tviva_1", "transactionKey": "tk_1", "orderId": "pay-1-1", "amount": 30000,
            "fee": 990, "fees": [{ "type": "BASE", "fee": 990 }], "supplyAmount": 900, "vat": 90,
            "payOutAmount": 29010, "soldDate": "2026-12-01", "paidOutDate": "2026-12-03"
        });
        let read = settlement_from_row(&live).unwrap();
        assert_eq!(
            (read.amount, read.fee, read.supply_amount, read.vat, read.pay_out_amount),
            (30000, 990, Some(900), Some(90), 29010)
        );
        assert_eq!(read.paid_out_date.to_string(), "2026-12-03");
        let mut reference = live.clone();
        reference.as_object_mut().unwrap().remove("supplyAmount");
        reference["suppliedAmount"] = serde_json::json!(900);
        assert_eq!(
            settlement_from_row(&reference).unwrap(),
            read,
            "suppliedAmount, as the reference spells it"
        );
        let mut strings = live.clone();
        strings["fee"] = serde_json::json!("990");
        strings["fees"] = serde_json::json!([{ "type": "BASE", "fee": "990" }]);
        assert_eq!(settlement_from_row(&strings).unwrap(), read, "fees as strings");
        let mut no_fees = live.clone();
        no_fees.as_object_mut().unwrap().remove("fees");
        assert_eq!(settlement_from_row(&no_fees).unwrap(), read, "fees[] missing");
        let mut only_fees = live.clone();
        only_fees.as_object_mut().unwrap().remove("fee");
        assert_eq!(settlement_from_row(&only_fees).unwrap(), read, "the total from fees[]");
        let mut test_mode = live.clone();
        test_mode["paymentKey"] = serde_json::Value::Null;
        test_mode["transactionKey"] = serde_json::Value::Null;
        assert_eq!(settlement_from_row(&test_mode).unwrap().payment_key, None, "test mode's null keys");
        let mut cancel = live.clone();
        cancel["amount"] = serde_json::json!(-10000);
        assert_eq!(settlement_from_row(&cancel).unwrap().amount, -10000);
        for (field, value) in [
            ("fee", serde_json::json!("a lot")),
            ("soldDate", serde_json::json!("yesterday")),
            ("paymentKey", serde_json::json!("k".repeat(201))),
        ] {
            let mut broken = live.clone();
            broken[field] = value;
            let err = settlement_from_row(&broken).unwrap_err();
            assert!(err.why.contains(field), "{field}: {err:?}");
            assert_eq!(
                err.transaction_key.as_deref(),
                Some("tk_1"),
                "the row named when its key is readable"
            );
        }
    }
}
