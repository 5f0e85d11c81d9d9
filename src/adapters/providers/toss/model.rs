//! The bodies we send Toss (typed, each named as Toss's reference names its fields), and
//! Toss's objects as we read them (reference: the Payment, Billing and Transaction objects),
//! checked like any input (docs/spec.md §5): a key or code over its documented length or with
//! control characters, a negative or missing amount, breaks the protocol, and the answer is
//! then an unknown outcome, never a decision. Only the fields we act on are read; the
//! provider's view for support passes the whole object on unchanged.

use serde::{Deserialize, Serialize};

use crate::domain::ledger::UnreadableRow;
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
    pub status: TossStatus,
    pub total_amount: i64,
    pub balance_amount: i64,
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

fn check(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{field}: empty"));
    }
    text::check(field, value, max).map_err(|e| e.to_string())
}

fn amount(field: &str, value: i64) -> Result<(), String> {
    if value < 0 { Err(format!("{field}: negative")) } else { Ok(()) }
}

/// Reads an answer, or says how it breaks the protocol.
pub fn read<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("unreadable answer: {e}"))
}

impl TossPayment {
    /// # Errors
    /// How the answer breaks the protocol.
    pub fn checked(self) -> Result<Self, String> {
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
    pub fn checked(self) -> Result<Self, String> {
        check("billingKey", &self.billing_key, BILLING_KEY)?;
        check("customerKey", &self.customer_key, 50)?;
        for (field, value) in [("cardCompany", &self.card_company), ("cardNumber", &self.card_number)] {
            if let Some(value) = value {
                text::check(field, value, 64).map_err(|e| e.to_string())?;
            }
        }
        Ok(self)
    }
}

impl TossTransaction {
    /// # Errors
    /// How the answer breaks the protocol.
    pub fn checked(self) -> Result<Self, String> {
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
            .map_err(|e| e.to_string())
            .and_then(TossTransaction::checked)
            .map_err(|why| UnreadableRow { transaction_key: key, why: text::excerpt(&why, 200) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payment(extra: serde_json::Value) -> Result<TossPayment, String> {
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
            assert!(err.contains(field), "{extra}: {err}");
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
}
