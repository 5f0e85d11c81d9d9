//! Toss Payments' v1 REST API (docs/spec.md §10; docs/toss.md has every call, the error
//! table and the sources).
//!
//! [`TossClient`] owns the wire: `Authorization: Basic base64("{secret_key}:")` on every call,
//! the intent's `Idempotency-Key` on every POST, the configured timeout (60 s for the ledger),
//! bounded retries with the *same* key for what Toss calls temporary, a pause and the same key
//! for `409 IDEMPOTENT_REQUEST_PROCESSING`, and every answer checked before it is believed
//! ([`model`]). [`TossPaymentGateway`] maps Toss's answers onto the payment port: what an
//! error means is [`answer::meaning`], one table. The secret key and billing keys are never
//! logged or put into an error: errors carry Toss's code and message and our reason only.

mod answer;
mod model;

use std::time::Duration;

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{Value, json};

pub use self::answer::{Call, Meaning, meaning};
pub use self::model::{TossBilling, TossCancel, TossPayment, TossStatus, TossTransaction};
use super::transport::{Exchange, exchange};
use crate::adapters::Secret;
use crate::application::ports::Cause;
use crate::application::ports::{
    ApprovalOutcome, ApprovePayment, BillingKey, CancelPayment, CancelReceipt, GatewayError, IssuedCard,
    LedgerPage, LookupOutcome, PaymentAuthorization, PaymentGateway, ProviderCancel, ProviderCustomers,
    ProviderLedger, ProviderRecord, ProviderRecords, Scenario,
};
use crate::domain::ledger::{ProviderTransaction, TransactionKind, UnreadableRow};
use crate::domain::payment::AUTHORIZATION_MISMATCH;
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
    body: Option<Value>,
    /// Sent as `Idempotency-Key` (POSTs).
    key: Option<&'a str>,
    call: Call,
    timeout: Duration,
}

/// The HTTP client of Toss's API.
pub struct TossClient {
    client: reqwest::Client,
    settings: TossSettings,
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
    pub fn new(settings: TossSettings) -> Result<Self, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(settings.timeout)
            .build()
            .map_err(|e| format!("cannot build the Toss client: {e}"))?;
        Ok(TossClient { client, settings })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.settings.base_url.trim_end_matches('/'))
    }

    /// Makes `request`, retrying what Toss calls temporary (same key, backoff) and an
    /// in-flight key (same key, a pause), a bounded number of times; `parse` checks the
    /// object answered.
    async fn send<T>(
        &self,
        request: Request<'_>,
        parse: impl Fn(&[u8]) -> Result<T, String>,
    ) -> Result<T, TossError> {
        if let Some(key) = request.key
            && (key.is_empty() || key.chars().count() > 300)
        {
            // Toss refuses such a key; it is ours, so this is our bug, never the customer's.
            return Err(TossError::Broken("Idempotency-Key must be 1–300 characters".into()));
        }
        let mut attempt = 0;
        loop {
            let mut builder =
                self.client.request(request.method.clone(), self.url(&request.path)).timeout(request.timeout);
            if let Some(key) = request.key {
                builder = builder.header("Idempotency-Key", key);
            }
            if let Some(body) = &request.body {
                builder = builder.json(body);
            }
            let failure = match exchange(builder, &self.settings.secret_key).await {
                Exchange::NotSent(why) => TossError::NotSent(why),
                Exchange::Lost(why) => return Err(TossError::Lost(why)),
                Exchange::Answered(status, body) if status.is_success() => {
                    return parse(&body).map_err(TossError::Broken);
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
            if !again || attempt >= self.settings.retries {
                return Err(failure);
            }
            tracing::warn!(reason = %failure, attempt, path = request.call_name(), "Toss call failed for now; the same call again");
            tokio::time::sleep(crate::domain::backoff::doubled_pause(self.settings.retry_backoff, attempt))
                .await;
            attempt += 1;
        }
    }

    fn payment_call<'a>(
        &self,
        method: Method,
        path: String,
        body: Option<Value>,
        key: Option<&'a str>,
        call: Call,
    ) -> Request<'a> {
        Request { method, path, body, key, call, timeout: self.settings.timeout }
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
        let body = json!({ "paymentKey": payment_key, "orderId": order_id, "amount": amount });
        let request = self.payment_call(
            Method::POST,
            "/v1/payments/confirm".into(),
            Some(body),
            Some(key),
            Call::Charge,
        );
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
        let body = json!({ "customerKey": customer_key, "amount": amount, "orderId": order_id, "orderName": order_name });
        let path = format!("/v1/billing/{}", path_segment(billing_key)?);
        let request = self.payment_call(Method::POST, path, Some(body), Some(key), Call::Charge);
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
        let body = json!({ "authKey": auth_key, "customerKey": customer_key });
        let request = self.payment_call(
            Method::POST,
            "/v1/billing/authorizations/issue".into(),
            Some(body),
            Some(key),
            Call::Read,
        );
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
        let mut body = json!({ "cancelReason": reason, "refundableAmount": refundable });
        if let Some(amount) = amount {
            body["cancelAmount"] = json!(amount);
        }
        let path = format!("/v1/payments/{}/cancel", path_segment(payment_key)?);
        let request = self.payment_call(Method::POST, path, Some(body), Some(key), Call::Cancel);
        self.send(request, parse_payment).await
    }

    /// `GET /v1/payments/orders/{orderId}`.
    ///
    /// # Errors
    /// As [`TossError`] says; no such payment is `Answered` with meaning `NotFound`.
    pub async fn payment_by_order(&self, order_id: &str) -> Result<TossPayment, TossError> {
        let path = format!("/v1/payments/orders/{}", path_segment(order_id)?);
        self.send(self.payment_call(Method::GET, path, None, None, Call::Read), parse_payment).await
    }

    /// `GET /v1/payments/{paymentKey}`, the object as Toss sent it (the provider's view for
    /// support passes it on unchanged) beside what we read of it.
    ///
    /// # Errors
    /// As [`TossError`] says.
    pub async fn payment(&self, payment_key: &str) -> Result<(TossPayment, Value), TossError> {
        let path = format!("/v1/payments/{}", path_segment(payment_key)?);
        let request = self.payment_call(Method::GET, path, None, None, Call::Read);
        self.send(request, |b| {
            let read = parse_payment(b)?;
            let whole = serde_json::from_slice::<Value>(b).map_err(|e| e.to_string())?;
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
        let mut request = self.payment_call(Method::GET, path, None, None, Call::Read);
        request.timeout = self.settings.ledger_timeout;
        self.send(request, |b| {
            Ok(model::read::<Vec<Value>>(b)?.into_iter().map(TossTransaction::from_row).collect())
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
        }
    }
}

fn parse_payment(body: &[u8]) -> Result<TossPayment, String> {
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

/// The payment port over [`TossClient`].
pub struct TossPaymentGateway {
    client: TossClient,
}

impl TossPaymentGateway {
    pub fn new(client: TossClient) -> Self {
        TossPaymentGateway { client }
    }

    pub fn client(&self) -> &TossClient {
        &self.client
    }
}

/// An error that leaves the outcome open, as the reason of an unknown outcome. Our own
/// configuration being wrong is said first, so that an operator sees it at once.
/// A Toss failure as the port's `Unavailable`: the error kept whole, a refusal of our own
/// key or request named as such.
fn unavailable(error: TossError) -> GatewayError {
    if error.meaning() == Some(Meaning::OurConfiguration) {
        return GatewayError::unavailable(open_reason(&error));
    }
    GatewayError::Unavailable(Cause::new(error))
}

fn open_reason(error: &TossError) -> String {
    match error.meaning() {
        Some(Meaning::OurConfiguration) => {
            format!("TOSS_CONFIGURATION: our request or key was refused ({error})")
        }
        _ => error.to_string(),
    }
}

/// What a Payment object answered to a charge means.
/// Entries asked for per page of `GET /v1/transactions` (Toss's most).
const LEDGER_PAGE: u32 = 5000;

/// Toss's `cancels[]`, as the port lists a provider's cancels.
fn provider_cancels(payment: &TossPayment) -> Vec<ProviderCancel> {
    payment
        .cancels
        .iter()
        .flatten()
        .map(|c| ProviderCancel { transaction_key: c.transaction_key.clone(), amount: c.cancel_amount })
        .collect()
}

fn charged(request: &ApprovePayment, payment: TossPayment) -> ApprovalOutcome {
    if payment.order_id != request.payment_request_id {
        return ApprovalOutcome::Unknown { reason: "Toss answered about another orderId".into() };
    }
    match payment.status {
        TossStatus::Done if payment.total_amount == request.amount.minor() => {
            ApprovalOutcome::Approved { provider_transaction_id: payment.payment_key }
        }
        TossStatus::Done => ApprovalOutcome::Unknown {
            reason: format!(
                "Toss approved {} for a charge of {}",
                payment.total_amount,
                request.amount.minor()
            ),
        },
        TossStatus::Aborted | TossStatus::Expired => ApprovalOutcome::Declined {
            code: payment.failure_code(),
            provider_transaction_id: Some(payment.payment_key),
        },
        other => ApprovalOutcome::Unknown { reason: format!("Toss answered a charge with status {other:?}") },
    }
}

#[async_trait]
impl PaymentGateway for TossPaymentGateway {
    async fn approve(&self, request: &ApprovePayment) -> Result<ApprovalOutcome, GatewayError> {
        if request.amount.currency().as_str() != "KRW" {
            return Ok(ApprovalOutcome::Declined {
                code: "NOT_SUPPORTED_CURRENCY".into(),
                provider_transaction_id: None,
            });
        }
        let amount = request.amount.minor();
        let key = &request.payment_request_id;
        let answer = match &request.authorization {
            None => {
                return Ok(ApprovalOutcome::Declined {
                    code: "NO_PAYMENT_METHOD".into(),
                    provider_transaction_id: None,
                });
            }
            Some(PaymentAuthorization::Checkout { payment_key }) => {
                self.client.confirm(payment_key, &request.payment_request_id, amount, key).await
            }
            Some(PaymentAuthorization::SavedCard { billing_key, customer_key }) => {
                self.client
                    .charge_billing(
                        &billing_key.0,
                        customer_key,
                        amount,
                        &request.payment_request_id,
                        &request.order_name,
                        key,
                    )
                    .await
            }
        };
        Ok(match answer {
            Ok(payment) => charged(request, payment),
            Err(TossError::Answered { code, meaning: Meaning::Refused, .. }) => {
                ApprovalOutcome::Declined { code, provider_transaction_id: None }
            }
            // The checkout's orderId or amount are not what the customer authorized with this
            // key (Toss: 400 INVALID_REQUEST, "결제 요청 정보(orderId, amount)가 결제창과
            // 다릅니다"): a key from another checkout, or another amount authorized in the
            // widget — the customer's error, nothing moved, and the key is not this order's.
            Err(TossError::Answered { status: 400, code, .. })
                if code == "INVALID_REQUEST"
                    && matches!(request.authorization, Some(PaymentAuthorization::Checkout { .. })) =>
            {
                ApprovalOutcome::Declined {
                    code: AUTHORIZATION_MISMATCH.into(),
                    provider_transaction_id: None,
                }
            }
            Err(TossError::Answered { meaning: Meaning::SessionExpired, .. }) => ApprovalOutcome::Declined {
                code: "PAYMENT_WINDOW_EXPIRED".into(),
                provider_transaction_id: None,
            },
            // Everything else leaves the outcome open: a look-up by orderId settles it.
            Err(error) => ApprovalOutcome::Unknown { reason: open_reason(&error) },
        })
    }

    async fn lookup(
        &self,
        payment_request_id: &str,
        _scenario: &Scenario,
    ) -> Result<LookupOutcome, GatewayError> {
        match self.client.payment_by_order(payment_request_id).await {
            Ok(payment) => Ok(match payment.status {
                TossStatus::Done => LookupOutcome::Approved { provider_transaction_id: payment.payment_key },
                TossStatus::Aborted | TossStatus::Expired => LookupOutcome::Declined {
                    code: payment.failure_code(),
                    provider_transaction_id: Some(payment.payment_key),
                },
                TossStatus::Canceled => LookupOutcome::Cancelled {
                    cancels: provider_cancels(&payment),
                    provider_transaction_id: payment.payment_key,
                },
                TossStatus::PartialCanceled => LookupOutcome::PartlyCancelled {
                    cancels: provider_cancels(&payment),
                    provider_transaction_id: payment.payment_key,
                    balance: payment.balance_amount,
                },
                // Not taken (yet): the same charge with the same key cannot charge twice.
                TossStatus::Ready | TossStatus::InProgress | TossStatus::WaitingForDeposit => {
                    LookupOutcome::NotFound
                }
            }),
            Err(TossError::Answered { meaning: Meaning::NotFound, .. }) => Ok(LookupOutcome::NotFound),
            Err(error) => Err(unavailable(error)),
        }
    }

    async fn cancel(&self, request: &CancelPayment) -> Result<CancelReceipt, GatewayError> {
        let amount = request.amount.minor();
        let balance = request.balance.minor();
        // `cancelAmount` is left out only for exactly the whole balance: an amount over the
        // balance must reach Toss as it is (and be refused), never become "all of it".
        let partial = (amount != balance).then_some(amount);
        let answer = self
            .client
            .cancel(
                &request.provider_transaction_id,
                &request.reason,
                partial,
                balance,
                &request.idempotency_key,
            )
            .await;
        match answer {
            Ok(payment) => {
                let newest = payment.newest_cancel().ok_or_else(|| {
                    GatewayError::unavailable("Toss answered a cancel with no entry in cancels[]")
                })?;
                Ok(CancelReceipt {
                    transaction_key: Some(newest.transaction_key.clone()),
                    balance_after: Some(payment.balance_amount),
                })
            }
            // Already cancelled answers a key of ours that Toss never carried out (a cancel it
            // made would be replayed under its key): refused, and the refund's caller asks Toss
            // what cancelled it and records that (docs/toss.md).
            Err(TossError::Answered { code, message, meaning: Meaning::AlreadyCancelled, .. }) => {
                Err(GatewayError::AlreadyCancelled { code, message })
            }
            Err(TossError::Answered {
                code,
                message,
                meaning: Meaning::NotCancelable | Meaning::NotFound,
                ..
            }) => Err(GatewayError::Rejected { code, message }),
            Err(TossError::Answered { code, message, meaning: Meaning::StaleBalance, .. }) => {
                Err(GatewayError::StaleBalance { message: format!("{code}: {message}") })
            }
            // Unknown, temporary to the end, lost, broken or our own
            // configuration: open; the refund's look-up records what Toss has.
            Err(error) => Err(unavailable(error)),
        }
    }
}

#[async_trait]
impl ProviderLedger for TossPaymentGateway {
    async fn ledger_page(
        &self,
        day: chrono::NaiveDate,
        after: Option<String>,
    ) -> Result<LedgerPage, GatewayError> {
        // The day as Toss counts it (its zone, docs/toss.md): D 00:00:00 – D 23:59:59.
        let (start, end) = (format!("{day}T00:00:00"), format!("{day}T23:59:59"));
        let rows = self
            .client
            .transactions(&start, &end, after.as_deref(), LEDGER_PAGE)
            .await
            .map_err(unavailable)?;
        let full = rows.len() == LEDGER_PAGE as usize;
        let last_key = rows.last().and_then(|row| match row {
            Ok(t) => Some(t.transaction_key.clone()),
            Err(unreadable) => unreadable.transaction_key.clone(),
        });
        let mut page = LedgerPage::default();
        for row in rows {
            let t = match row {
                Ok(t) => t,
                Err(unreadable) => {
                    page.unreadable.push(unreadable);
                    continue;
                }
            };
            let (kind, status) = match t.status {
                TossStatus::Done => (TransactionKind::Approval, "DONE"),
                TossStatus::Canceled => (TransactionKind::Cancel, "CANCELED"),
                TossStatus::PartialCanceled => (TransactionKind::Cancel, "PARTIAL_CANCELED"),
                // No money moved (a virtual account waiting, an abort): nothing to match.
                _ => continue,
            };
            let Ok(at) = chrono::DateTime::parse_from_rfc3339(&t.transaction_at) else {
                page.unreadable.push(UnreadableRow {
                    why: format!(
                        "transactionAt: not a date and time: {}",
                        text::excerpt(&t.transaction_at, 64)
                    ),
                    transaction_key: Some(t.transaction_key),
                });
                continue;
            };
            page.transactions.push(ProviderTransaction {
                status: status.into(),
                transaction_key: t.transaction_key,
                payment_key: t.payment_key,
                order_id: t.order_id,
                kind,
                amount: t.amount,
                at: at.with_timezone(&chrono::Utc),
            });
        }
        if full {
            // Toss pages by the last row's key: a full page must end with one we can read.
            page.next = Some(last_key.ok_or_else(|| {
                GatewayError::unavailable("the ledger page's last row has no transactionKey to page on")
            })?);
        }
        Ok(page)
    }
}

#[async_trait]
impl ProviderRecords for TossPaymentGateway {
    async fn provider_record(
        &self,
        provider_transaction_id: &str,
    ) -> Result<Option<ProviderRecord>, GatewayError> {
        match self.client.payment(provider_transaction_id).await {
            Ok((_, whole)) => Ok(Some(ProviderRecord(whole))),
            Err(TossError::Answered { meaning: Meaning::NotFound, .. }) => Ok(None),
            Err(error) => Err(unavailable(error)),
        }
    }
}

#[async_trait]
impl ProviderCustomers for TossPaymentGateway {
    /// A UUID-shaped HMAC-SHA256 of the customer id under the secret key: stable, and
    /// unguessable by anyone without the key (Toss asks for a random key, never an e-mail,
    /// a phone number or an id that counts up). A new secret key (test to live) gives every
    /// customer a new key; saved cards keep the key they were issued with.
    fn customer_key(&self, customer_id: &str) -> String {
        use hmac::{Hmac, Mac};
        let secret = self.client.settings.secret_key.expose().as_bytes();
        // HMAC takes a key of any length (RFC 2104: a long one is hashed first), so this
        // cannot fail.
        #[allow(clippy::expect_used)]
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
        mac.update(b"customerKey:");
        mac.update(customer_id.as_bytes());
        let digest = mac.finalize().into_bytes();
        let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
    }

    async fn issue_billing_key(
        &self,
        auth_key: &str,
        customer_key: &str,
    ) -> Result<IssuedCard, GatewayError> {
        use sha2::Digest;
        // The one-time authKey and the customer name the issue: the same customer asking
        // again gets it replayed; another customer's post of the key is a request of its own,
        // which Toss refuses (issue 43 item 10).
        let mut hasher = sha2::Sha256::new();
        hasher.update(customer_key.as_bytes());
        hasher.update(b":");
        hasher.update(auth_key.as_bytes());
        let digest = hasher.finalize();
        let key: String = format!("issue-{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>());
        match self.client.issue_billing_key(auth_key, customer_key, &key).await {
            Ok(billing) if billing.customer_key != customer_key => {
                // Whatever made Toss answer so, the card is not this customer's.
                Err(GatewayError::Rejected {
                    code: "NOT_MATCHES_CUSTOMER_KEY".into(),
                    message: "the card was issued for another customer".into(),
                })
            }
            Ok(billing) => Ok(IssuedCard {
                billing_key: BillingKey(billing.billing_key),
                card_company: billing.card_company,
                card_number: billing.card_number,
            }),
            Err(TossError::Answered { status, code, message, .. })
                if (400..500).contains(&status) && status != 401 && status != 409 && status != 429 =>
            {
                Err(GatewayError::Rejected { code, message })
            }
            Err(error) => Err(unavailable(error)),
        }
    }
}
