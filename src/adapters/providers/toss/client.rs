//! [`TossClient`]: one method per call of Toss's API we make, each sending a typed body
//! ([`super::model`]) and checking the object answered; what an error means is
//! [`super::answer::meaning`].

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use super::answer::{Call, Meaning, meaning};
use super::model::{
    self, BillingCharge, BillingIssue, CancelRequest, Confirm, KeyIn, TossBilling, TossPayment,
    TossTransaction,
};
use crate::adapters::Secret;
use crate::adapters::providers::transport::{Exchange, ProviderHttp};
use crate::adapters::providers::{BrokenAnswer, SetupError};
use crate::application::ports::Cause;
use crate::domain::ledger::UnreadableRow;
use crate::domain::payout::SettlementRow;
use crate::domain::text;

#[derive(Debug, Clone)]
pub struct TossSettings {
    /// `https://api.tosspayments.com`, or the fake's address.
    pub base_url: String,
    /// `test_sk_…` or `live_sk_…`.
    pub secret_key: Secret,
    /// Each call's timeout (`payment.toss.timeout`).
    pub timeout: Duration,
    /// `GET /v1/transactions`' timeout: Toss says it may take up to 60 s.
    pub ledger_timeout: Duration,
    /// Temporary failures and in-flight answers retried this many times per call.
    pub retries: u32,
    /// First retry delay; doubled after each.
    pub retry_backoff: Duration,
}

/// A call that did not end in the object asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TossError {
    /// Toss answered an error (after the retries its meaning allows).
    Answered { status: u16, code: String, message: String, meaning: Meaning },
    /// Sent, but no complete answer: Toss may have acted.
    Lost(Cause),
    /// Never reached Toss, however often tried.
    NotSent(Cause),
    /// An answer that breaks the protocol (unreadable, over-long, disagreeing).
    Broken(String),
}

impl std::fmt::Display for TossError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TossError::Answered { status, code, message, .. } => {
                write!(f, "Toss answered {status} {code}: {message}")
            }
            TossError::Lost(why) => write!(f, "no answer from Toss: {why}"),
            TossError::NotSent(why) => write!(f, "Toss not reached: {why}"),
            TossError::Broken(why) => write!(f, "Toss's answer breaks the protocol: {why}"),
        }
    }
}

impl std::error::Error for TossError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // The cause's text is in this one's: the chain goes on from its source.
            TossError::Lost(cause) | TossError::NotSent(cause) => cause.source(),
            TossError::Answered { .. } | TossError::Broken(_) => None,
        }
    }
}

impl TossError {
    /// What the error means for the call it answered.
    pub fn meaning(&self) -> Option<Meaning> {
        match self {
            TossError::Answered { meaning, .. } => Some(*meaning),
            _ => None,
        }
    }
}

/// One request to make.
struct Request<'a> {
    method: Method,
    path: String,
    /// A typed body ([`model`]), as JSON.
    body: Option<Vec<u8>>,
    /// Sent as `Idempotency-Key` (POSTs).
    key: Option<&'a str>,
    call: Call,
    timeout: Duration,
}

/// The HTTP client of Toss's API.
pub struct TossClient {
    http: ProviderHttp,
    timeout: Duration,
    ledger_timeout: Duration,
}

/// Toss's error body.
#[derive(Debug, Default, serde::Deserialize)]
struct ErrorBody {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

impl TossClient {
    /// # Errors
    /// The HTTP client cannot be built, or an idempotency key could never be sent.
    pub fn new(settings: TossSettings) -> Result<Self, SetupError> {
        let http = ProviderHttp::new(
            &settings.base_url,
            settings.secret_key,
            settings.timeout,
            settings.retries,
            settings.retry_backoff,
        )?;
        Ok(TossClient { http, timeout: settings.timeout, ledger_timeout: settings.ledger_timeout })
    }

    /// The secret key calls are made with (the customer keys are derived from it).
    pub(super) fn secret_key(&self) -> &Secret {
        self.http.secret_key()
    }

    /// Makes `request`, retrying what Toss calls temporary (same key, backoff) and an
    /// in-flight key (same key, a pause), a bounded number of times; `parse` checks the
    /// object answered.
    async fn send<T>(
        &self,
        request: Request<'_>,
        parse: impl Fn(&[u8]) -> Result<T, BrokenAnswer>,
    ) -> Result<T, TossError> {
        if let Some(key) = request.key
            && (key.is_empty() || key.chars().count() > 300)
        {
            // Toss refuses such a key; it is ours, so this is our bug, never the customer's.
            return Err(TossError::Broken("Idempotency-Key must be 1–300 characters".into()));
        }
        let mut attempt = 0;
        loop {
            let mut builder = self.http.request(request.method.clone(), &request.path, request.timeout);
            if let Some(key) = request.key {
                builder = builder.header("Idempotency-Key", key);
            }
            if let Some(body) = &request.body {
                builder =
                    builder.header(reqwest::header::CONTENT_TYPE, "application/json").body(body.clone());
            }
            let failure = match self.http.exchange(builder).await {
                Exchange::NotSent(why) => TossError::NotSent(why),
                Exchange::Lost(why) => return Err(TossError::Lost(why)),
                Exchange::Answered(status, body) if status.is_success() => {
                    return parse(&body).map_err(|broken| TossError::Broken(broken.0));
                }
                Exchange::Answered(status, body) => {
                    let error: ErrorBody = serde_json::from_slice(&body).unwrap_or_default();
                    let broken =
                        text::check("code", &error.code, text::limits::PROVIDER_CODE).and_then(|()| {
                            text::check("message", &error.message, text::limits::PROVIDER_MESSAGE)
                        });
                    if let Err(why) = broken {
                        return Err(TossError::Broken(why.to_string()));
                    }
                    let meaning = meaning(request.call, status.as_u16(), &error.code);
                    TossError::Answered {
                        status: status.as_u16(),
                        code: error.code,
                        message: error.message,
                        meaning,
                    }
                }
            };
            let again = matches!(failure, TossError::NotSent(_))
                || matches!(failure.meaning(), Some(Meaning::Transient | Meaning::InFlight));
            if !again || !self.http.again(&mut attempt, request.call_name(), &failure).await {
                return Err(failure);
            }
        }
    }

    /// A POST of `body` under the idempotency `key`.
    fn post<'a>(
        &self,
        path: String,
        body: &impl serde::Serialize,
        key: &'a str,
        call: Call,
    ) -> Result<Request<'a>, TossError> {
        // Our own structs of strings and numbers: a failure here is our bug, never sent.
        let body = serde_json::to_vec(body).map_err(|e| TossError::Broken(format!("request body: {e}")))?;
        Ok(Request {
            method: Method::POST,
            path,
            body: Some(body),
            key: Some(key),
            call,
            timeout: self.timeout,
        })
    }

    /// A GET, which moves nothing.
    fn get(&self, path: String) -> Request<'static> {
        Request { method: Method::GET, path, body: None, key: None, call: Call::Read, timeout: self.timeout }
    }

    /// `POST /v1/payments/confirm`: the widget's payment, confirmed.
    ///
    /// # Errors
    /// As [`TossError`] says.
    pub async fn confirm(
        &self,
        payment_key: &str,
        order_id: &str,
        amount: i64,
        key: &str,
    ) -> Result<TossPayment, TossError> {
        let body = Confirm { payment_key, order_id, amount };
        let request = self.post("/v1/payments/confirm".into(), &body, key, Call::Charge)?;
        self.send(request, parse_payment).await
    }

    /// `POST /v1/billing/{billingKey}`: a saved card charged.
    ///
    /// # Errors
    /// As [`TossError`] says.
    pub async fn charge_billing(
        &self,
        billing_key: &str,
        customer_key: &str,
        amount: i64,
        order_id: &str,
        order_name: &str,
        key: &str,
    ) -> Result<TossPayment, TossError> {
        let body = BillingCharge { customer_key, amount, order_id, order_name };
        let path = format!("/v1/billing/{}", path_segment(billing_key)?);
        let request = self.post(path, &body, key, Call::Charge)?;
        self.send(request, parse_payment).await
    }

    /// `POST /v1/payments/key-in`: a card charged by its number (Toss's key-in API; the
    /// meetup platform's test payments), under the idempotency `key`.
    ///
    /// # Errors
    /// As [`TossError`] says.
    pub async fn key_in(&self, charge: &KeyIn<'_>, key: &str) -> Result<TossPayment, TossError> {
        let request = self.post("/v1/payments/key-in".into(), charge, key, Call::Charge)?;
        self.send(request, parse_payment).await
    }

    /// `POST /v1/billing/authorizations/issue`: the billing-auth widget's `authKey` turned
    /// into a billing key for `customer_key`.
    ///
    /// # Errors
    /// As [`TossError`] says.
    pub async fn issue_billing_key(
        &self,
        auth_key: &str,
        customer_key: &str,
        key: &str,
    ) -> Result<TossBilling, TossError> {
        let body = BillingIssue { auth_key, customer_key };
        let request = self.post("/v1/billing/authorizations/issue".into(), &body, key, Call::Issue)?;
        self.send(request, |b| model::read::<TossBilling>(b)?.checked()).await
    }

    /// `POST /v1/payments/{paymentKey}/cancel`: `amount` of it (`None`: the whole balance),
    /// refused by Toss unless its refundable balance is `refundable` (`refundableAmount`).
    ///
    /// # Errors
    /// As [`TossError`] says.
    pub async fn cancel(
        &self,
        payment_key: &str,
        reason: &str,
        amount: Option<i64>,
        refundable: i64,
        key: &str,
    ) -> Result<TossPayment, TossError> {
        let body =
            CancelRequest { cancel_reason: reason, cancel_amount: amount, refundable_amount: refundable };
        let path = format!("/v1/payments/{}/cancel", path_segment(payment_key)?);
        let request = self.post(path, &body, key, Call::Cancel)?;
        self.send(request, parse_payment).await
    }

    /// `GET /v1/payments/orders/{orderId}`.
    ///
    /// # Errors
    /// As [`TossError`] says; no such payment is `Answered` with meaning `NotFound`.
    pub async fn payment_by_order(&self, order_id: &str) -> Result<TossPayment, TossError> {
        let path = format!("/v1/payments/orders/{}", path_segment(order_id)?);
        self.send(self.get(path), parse_payment).await
    }

    /// `GET /v1/payments/{paymentKey}`, the object as Toss sent it (the provider's view for
    /// support passes it on unchanged) beside what we read of it.
    ///
    /// # Errors
    /// As [`TossError`] says.
    pub async fn payment(&self, payment_key: &str) -> Result<(TossPayment, Value), TossError> {
        let path = format!("/v1/payments/{}", path_segment(payment_key)?);
        self.send(self.get(path), |b| {
            let read = parse_payment(b)?;
            let whole = serde_json::from_slice::<Value>(b).map_err(|e| BrokenAnswer(e.to_string()))?;
            Ok((read, whole))
        })
        .await
    }

    /// One page of `GET /v1/transactions` (`startDate`/`endDate` in Toss's ISO 8601 local
    /// form, Korea's time): at most `limit` (≤ 5 000) entries after `starting_after`, each
    /// row read on its own (one that cannot be read does not sink the page).
    ///
    /// # Errors
    /// As [`TossError`] says.
    pub async fn transactions(
        &self,
        start: &str,
        end: &str,
        starting_after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Result<TossTransaction, UnreadableRow>>, TossError> {
        let mut path = format!(
            "/v1/transactions?startDate={}&endDate={}&limit={}",
            query_value(start),
            query_value(end),
            limit.clamp(1, 5000)
        );
        if let Some(after) = starting_after {
            path.push_str(&format!("&startingAfter={}", query_value(after)));
        }
        let request = Request { timeout: self.ledger_timeout, ..self.get(path) };
        self.send(request, |b| {
            Ok(model::read::<Vec<Value>>(b)?.into_iter().map(TossTransaction::from_row).collect())
        })
        .await
    }

    /// One page (from 1) of `GET /v1/settlements` for the transactions sold on `day`
    /// (`dateType=soldDate`, Toss's date): at most `size` (≤ 5 000) rows, each read on its
    /// own (one that cannot be read does not sink the page). Toss says such a call may take
    /// up to 60 s, as the ledger's.
    ///
    /// # Errors
    /// As [`TossError`] says.
    pub async fn settlements(
        &self,
        day: chrono::NaiveDate,
        page: u32,
        size: u32,
    ) -> Result<Vec<Result<SettlementRow, UnreadableRow>>, TossError> {
        let day = day.format("%Y-%m-%d");
        let path = format!(
            "/v1/settlements?startDate={day}&endDate={day}&dateType=soldDate&page={}&size={}",
            page.max(1),
            size.clamp(1, 5000)
        );
        let request = Request { timeout: self.ledger_timeout, ..self.get(path) };
        self.send(request, |b| {
            Ok(model::read::<Vec<Value>>(b)?.iter().map(model::settlement_from_row).collect())
        })
        .await
    }
}

impl Request<'_> {
    /// The call's kind without anything that could be a key (for logs).
    fn call_name(&self) -> &'static str {
        match self.call {
            Call::Charge => "charge",
            Call::Cancel => "cancel",
            Call::Read => "read",
            Call::Issue => "issue",
        }
    }
}

fn parse_payment(body: &[u8]) -> Result<TossPayment, BrokenAnswer> {
    model::read::<TossPayment>(body)?.checked()
}

/// A key as a path segment: Toss's keys are `[A-Za-z0-9_-]` (and `=` in billing keys); any
/// other character is refused rather than sent somewhere else.
fn path_segment(value: &str) -> Result<&str, TossError> {
    if text::is_provider_key(value, usize::MAX) {
        Ok(value)
    } else {
        Err(TossError::Broken("a key with characters Toss never uses".into()))
    }
}

/// `2026-12-01T00:00:00` needs no escaping but `:` (kept: it is legal in a query).
fn query_value(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
