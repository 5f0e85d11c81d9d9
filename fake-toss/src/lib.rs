//! A fake of Toss Payments' v1 REST API (docs.tosspayments.com/reference), for the service's
//! tests and for running the whole service locally without a Toss account. It does only what
//! Toss documents; each behaviour names its page (README.md beside this file has the list):
//!
//! - auth: `Authorization: Basic base64("{secret_key}:")` (reference/using-api/authorization);
//! - `Idempotency-Key` on POSTs, scoped by (key, secret key, method, path), the first answer
//!   replayed, `409 IDEMPOTENT_REQUEST_PROCESSING` while the first is still running, at most
//!   300 characters (reference/using-api/idempotency-key);
//! - confirm, key-in (a card charged by its number; `4000000000000002` is refused
//!   `403 REJECT_CARD_PAYMENT`), billing-key issue and charge, cancel (full or partial, `cancels[]`,
//!   `balanceAmount`, `refundableAmount`), look-ups by `paymentKey` and `orderId`,
//!   `GET /v1/transactions` paged by `startingAfter` (reference);
//! - `TossPayments-Test-Code: <ERROR_CODE>` answers that error (reference/using-api/test-code);
//! - `PAYMENT_STATUS_CHANGED` webhooks, retried up to 7 times (guides/webhook).
//!
//! What a test needs beyond Toss's API lives under `/__fake/` (never part of Toss): the
//! widget's part (a checkout session, a billing authorization), a cancel made in the
//! dashboard, fault injection ("effect applied then 5xx", a plain 5xx, a delay), and the count
//! of calls and effects per operation.

mod settlements;

pub use settlements::{Extra, Quirks, SettlementTerms, Tamper};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use base64::Engine;
use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

/// Toss answers in Korea's time (every `...At` field carries `+09:00`).
fn kst() -> FixedOffset {
    // 9 hours is within ±24 h, the only case in which `east_opt` is `None`.
    FixedOffset::east_opt(9 * 3600).unwrap_or(Utc.fix())
}

/// The operations of the API, as counted and as faults target them.
pub const OPERATIONS: &[&str] = &[
    "confirm",
    "billing_issue",
    "billing_charge",
    "key_in",
    "cancel",
    "get_payment",
    "get_by_order",
    "transactions",
    "settlements",
];

/// How the fake starts.
#[derive(Debug, Clone)]
pub struct FakeSettings {
    /// The one secret key it accepts (`test_sk_...`).
    pub secret_key: String,
    /// How long a checkout session may wait for its confirm (Toss: 10 minutes).
    pub session_ttl: Duration,
    /// The first webhook retry's delay; Toss's schedule is minutes (1, 4, 16, ...): tests
    /// shrink it.
    pub webhook_retry_unit: Duration,
    /// The fee rate and payout cycle `GET /v1/settlements` answers with.
    pub settlement: SettlementTerms,
}

impl Default for FakeSettings {
    fn default() -> Self {
        FakeSettings {
            secret_key: "test_sk_fake_0000000000000000".into(),
            session_ttl: Duration::from_secs(600),
            webhook_retry_unit: Duration::from_secs(60),
            settlement: SettlementTerms::default(),
        }
    }
}

#[derive(Debug, Clone)]
struct Session {
    order_id: String,
    amount: i64,
    order_name: String,
    /// A card refusal the "customer's card" answers the confirm with.
    decline: Option<String>,
    created: DateTime<Utc>,
}

#[derive(Debug, Clone)]
struct Billing {
    customer_key: String,
    card_number: String,
}

#[derive(Debug, Clone)]
struct Transaction {
    key: String,
    payment_key: String,
    order_id: String,
    customer_key: Option<String>,
    status: String,
    amount: i64,
    at: DateTime<FixedOffset>,
}

#[derive(Debug, Clone, PartialEq)]
enum Stored {
    InFlight,
    Done(u16, Value),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    pub operation: String,
    /// `effect_then_500`: the effect happens, the answer is a 500 (the caller cannot know);
    /// `fail_500`: a 500 and nothing happens; `delay`: the answer comes `delayMs` late (the
    /// effect first, so an Idempotency-Key is in flight meanwhile); `late`: the effect
    /// itself lands `delayMs` late, and the answer after it (a slow Toss: a look-up
    /// meanwhile finds nothing under the orderId).
    pub kind: String,
    #[serde(default)]
    pub delay_ms: u64,
    #[serde(default = "one")]
    pub times: u32,
}

fn one() -> u32 {
    1
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, Session>,
    payments: HashMap<String, Value>,
    by_order: HashMap<String, String>,
    auth_keys: HashMap<String, Billing>,
    billing_keys: HashMap<String, Billing>,
    transactions: Vec<Transaction>,
    idempotency: HashMap<(String, String, String, String), Stored>,
    faults: Vec<Fault>,
    calls: HashMap<String, u64>,
    effects: HashMap<String, u64>,
    webhook_url: Option<String>,
    webhooks_sent: u64,
    quirks: Quirks,
    tampered: HashMap<String, Tamper>,
    extra_rows: Vec<settlements::Row>,
}

/// A running fake: its address, and the handle that stops it.
pub struct RunningFake {
    pub base_url: String,
    pub port: u16,
    handle: actix_web::dev::ServerHandle,
}

impl RunningFake {
    pub async fn stop(&self) {
        self.handle.stop(false).await;
    }
}

#[derive(Clone)]
struct Fake {
    settings: Arc<FakeSettings>,
    state: Arc<Mutex<State>>,
    http: reqwest::Client,
}

/// Toss's error body.
fn error(status: u16, code: &str, message: &str) -> (u16, Value) {
    (status, json!({ "code": code, "message": message }))
}

/// The HTTP status Toss answers each error code with (reference/error-codes); the fake's
/// `TossPayments-Test-Code` uses it.
pub fn status_of(code: &str) -> u16 {
    match code {
        "UNAUTHORIZED_KEY" => 401,
        "REJECT_CARD_PAYMENT"
        | "REJECT_CARD_COMPANY"
        | "FORBIDDEN_REQUEST"
        | "NOT_CANCELABLE_AMOUNT"
        | "NOT_CANCELABLE_PAYMENT"
        | "REJECT_ACCOUNT_PAYMENT"
        | "REJECT_TOSSPAY_INVALID_ACCOUNT"
        | "EXCEED_MAX_AUTH_COUNT"
        | "EXCEED_MAX_ONE_DAY_AMOUNT"
        | "NOT_AVAILABLE_BANK"
        | "INVALID_PASSWORD"
        | "FDS_ERROR" => 403,
        "NOT_FOUND_PAYMENT" | "NOT_FOUND_PAYMENT_SESSION" | "NOT_FOUND" => 404,
        "IDEMPOTENT_REQUEST_PROCESSING" => 409,
        "FAILED_PAYMENT_INTERNAL_SYSTEM_PROCESSING"
        | "FAILED_INTERNAL_SYSTEM_PROCESSING"
        | "UNKNOWN_PAYMENT_ERROR"
        | "FAILED_REFUND_PROCESS"
        | "FAILED_METHOD_HANDLING_CANCEL"
        | "FAILED_PARTIAL_REFUND"
        | "COMMON_ERROR"
        | "FAILED_CLOSED_ACCOUNT_REFUND" => 500,
        _ => 400,
    }
}

fn random_key(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

fn now_kst() -> DateTime<FixedOffset> {
    Utc::now().with_timezone(&kst())
}

impl Fake {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A handler that panicked while holding the lock leaves the state as it was at the
        // panic; the fake serves on with it (it is a test double).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Authorization: Basic base64("{secret}:")`.
    fn authorized(&self, req: &HttpRequest) -> Result<(), (u16, Value)> {
        let header = req.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
        let Some(encoded) = header.strip_prefix("Basic ") else {
            return Err(error(401, "UNAUTHORIZED_KEY", "인증되지 않은 시크릿 키 혹은 클라이언트 키 입니다."));
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        match decoded.as_deref().and_then(|d| d.strip_suffix(':')) {
            Some(key) if key == self.settings.secret_key => Ok(()),
            Some(_) => {
                Err(error(401, "UNAUTHORIZED_KEY", "인증되지 않은 시크릿 키 혹은 클라이언트 키 입니다."))
            }
            None => Err(error(
                400,
                "INCORRECT_BASIC_AUTH_FORMAT",
                "잘못된 요청입니다. ':' 를 포함해 인코딩해주세요.",
            )),
        }
    }

    fn take_fault(&self, operation: &str) -> Option<Fault> {
        let mut state = self.lock();
        let at = state.faults.iter().position(|f| f.operation == operation)?;
        let fault = state.faults[at].clone();
        if state.faults[at].times <= 1 {
            state.faults.remove(at);
        } else {
            state.faults[at].times -= 1;
        }
        Some(fault)
    }

    /// Every API call: counted, authorized, test code, idempotency, faults, then `effect`.
    async fn dispatch(
        &self,
        req: &HttpRequest,
        operation: &str,
        effect: impl FnOnce(&mut State) -> (u16, Value),
    ) -> HttpResponse {
        *self.lock().calls.entry(operation.to_owned()).or_default() += 1;
        if let Err(answer) = self.authorized(req) {
            return respond(answer);
        }
        if let Some(code) = req.headers().get("tosspayments-test-code").and_then(|v| v.to_str().ok()) {
            // A test code answers its error without touching anything (test keys only: this
            // fake has only a test key).
            return respond(error(status_of(code), code, "테스트 코드로 발생한 에러입니다."));
        }
        let key = if req.method() == actix_web::http::Method::POST {
            req.headers().get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned)
        } else {
            None
        };
        if let Some(key) = &key
            && key.chars().count() > 300
        {
            return respond(error(400, "INVALID_REQUEST", "멱등키는 300자 이하여야 합니다."));
        }
        let scope = key
            .map(|k| (k, self.settings.secret_key.clone(), req.method().to_string(), req.path().to_owned()));
        if let Some(scope) = &scope {
            let mut state = self.lock();
            match state.idempotency.get(scope) {
                Some(Stored::InFlight) => {
                    return respond(error(
                        409,
                        "IDEMPOTENT_REQUEST_PROCESSING",
                        "이전 요청이 아직 처리 중입니다.",
                    ));
                }
                Some(Stored::Done(status, body)) => return respond((*status, body.clone())),
                None => {
                    state.idempotency.insert(scope.clone(), Stored::InFlight);
                }
            }
        }
        let fault = self.take_fault(operation);
        if fault.as_ref().is_some_and(|f| f.kind == "fail_500") {
            if let Some(scope) = &scope {
                self.lock().idempotency.remove(scope);
            }
            return respond(error(
                500,
                "FAILED_INTERNAL_SYSTEM_PROCESSING",
                "내부 시스템 처리 작업이 실패했습니다.",
            ));
        }
        if let Some(f) = fault.as_ref().filter(|f| f.kind == "late") {
            // Still working at Toss: nothing done yet, the key in flight.
            tokio::time::sleep(Duration::from_millis(f.delay_ms)).await;
        }
        let answer = {
            let mut state = self.lock();
            let answer = effect(&mut state);
            if answer.0 == 200 {
                *state.effects.entry(operation.to_owned()).or_default() += 1;
            }
            answer
        };
        if let Some(f) = fault.as_ref().filter(|f| f.kind == "delay") {
            // Done at Toss, the answer not yet out: the key is still in flight meanwhile.
            tokio::time::sleep(Duration::from_millis(f.delay_ms)).await;
        }
        if let Some(scope) = &scope {
            let mut state = self.lock();
            // A 5xx is not kept: the same key may try again (guides: idempotency-key).
            if answer.0 >= 500 {
                state.idempotency.remove(scope);
            } else {
                state.idempotency.insert(scope.clone(), Stored::Done(answer.0, answer.1.clone()));
            }
        }
        match fault {
            Some(f) if f.kind == "effect_then_500" => respond(error(
                500,
                "FAILED_INTERNAL_SYSTEM_PROCESSING",
                "내부 시스템 처리 작업이 실패했습니다.",
            )),
            _ => respond(answer),
        }
    }

    /// Posts `PAYMENT_STATUS_CHANGED` for `payment` to the webhook URL, retrying a failed
    /// delivery up to 7 times (guides/webhook: 1, 4, 16, 64, 256, 1024, 4096 minutes; here in
    /// units of `webhook_retry_unit`).
    fn send_webhook(&self, payment: Value) {
        let Some(url) = self.lock().webhook_url.clone() else { return };
        let body = json!({
            "eventType": "PAYMENT_STATUS_CHANGED",
            "createdAt": now_kst().format("%Y-%m-%dT%H:%M:%S%.6f").to_string(),
            "data": payment,
        });
        let this = self.clone();
        tokio::spawn(async move {
            for attempt in 0..8u32 {
                if attempt > 0 {
                    tokio::time::sleep(this.settings.webhook_retry_unit * 4u32.pow(attempt - 1)).await;
                }
                this.lock().webhooks_sent += 1;
                let sent = this.http.post(&url).json(&body).timeout(Duration::from_secs(10)).send().await;
                if sent.is_ok_and(|r| r.status().is_success()) {
                    return;
                }
            }
        });
    }
}

fn respond((status, body): (u16, Value)) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)).json(body)
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, (u16, Value)> {
    serde_json::from_slice(body)
        .map_err(|e| error(400, "INVALID_REQUEST", &format!("잘못된 요청입니다: {e}")))
}

fn masked(number: &str) -> String {
    let digits: Vec<char> = number.chars().filter(char::is_ascii_digit).collect();
    if digits.len() < 12 {
        return "****".into();
    }
    let head: String = digits[..8].iter().collect();
    let tail: String = digits[digits.len() - 4..digits.len() - 1].iter().collect();
    format!("{head}****{tail}*")
}

/// A new Payment object (reference: the Payment object), `DONE`.
fn payment_done(
    payment_key: &str,
    order_id: &str,
    order_name: &str,
    amount: i64,
    kind: &str,
    card_number: &str,
) -> Value {
    let now = now_kst().to_rfc3339();
    json!({
        "mId": "tosspayments",
        "version": "2022-11-16",
        "paymentKey": payment_key,
        "type": kind,
        "orderId": order_id,
        "orderName": order_name,
        "currency": "KRW",
        "method": "카드",
        "status": "DONE",
        "requestedAt": now,
        "approvedAt": now,
        "useEscrow": false,
        "cultureExpense": false,
        "totalAmount": amount,
        "balanceAmount": amount,
        "suppliedAmount": amount - amount / 11,
        "vat": amount / 11,
        "taxFreeAmount": 0,
        "taxExemptionAmount": 0,
        "isPartialCancelable": true,
        "lastTransactionKey": random_key("txa_"),
        "cancels": null,
        "card": {
            "issuerCode": "61", "acquirerCode": "31", "number": masked(card_number),
            "installmentPlanMonths": 0, "approveNo": "00000000", "useCardPoint": false,
            "cardType": "신용", "ownerType": "개인", "acquireStatus": "READY",
            "isInterestFree": false, "interestPayer": null, "amount": amount
        },
        "failure": null,
        "country": "KR",
    })
}

fn record_transaction(
    state: &mut State,
    payment: &Value,
    key: &str,
    amount: i64,
    customer_key: Option<String>,
) {
    state.transactions.push(Transaction {
        key: key.to_owned(),
        payment_key: payment["paymentKey"].as_str().unwrap_or_default().to_owned(),
        order_id: payment["orderId"].as_str().unwrap_or_default().to_owned(),
        customer_key,
        status: payment["status"].as_str().unwrap_or_default().to_owned(),
        amount,
        at: now_kst(),
    });
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfirmBody {
    payment_key: String,
    order_id: String,
    amount: i64,
}

fn confirm(state: &mut State, ttl: Duration, body: &[u8]) -> (u16, Value) {
    let body: ConfirmBody = match parse(body) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let processed = state
        .payments
        .get(&body.payment_key)
        .is_some_and(|p| ["DONE", "CANCELED", "PARTIAL_CANCELED"].iter().any(|s| p["status"] == *s));
    if processed {
        return error(400, "ALREADY_PROCESSED_PAYMENT", "이미 처리된 결제 입니다.");
    }
    let Some(session) = state.sessions.get(&body.payment_key).cloned() else {
        return error(
            404,
            "NOT_FOUND_PAYMENT_SESSION",
            "결제 시간이 만료되어 결제 진행 데이터가 존재하지 않습니다.",
        );
    };
    if Utc::now() - session.created > chrono::Duration::from_std(ttl).unwrap_or_default() {
        state.sessions.remove(&body.payment_key);
        return error(
            404,
            "NOT_FOUND_PAYMENT_SESSION",
            "결제 시간이 만료되어 결제 진행 데이터가 존재하지 않습니다.",
        );
    }
    if session.order_id != body.order_id || session.amount != body.amount {
        return error(400, "INVALID_REQUEST", "결제 요청 정보(orderId, amount)가 결제창과 다릅니다.");
    }
    state.sessions.remove(&body.payment_key);
    let mut payment = payment_done(
        &body.payment_key,
        &body.order_id,
        &session.order_name,
        body.amount,
        "NORMAL",
        "4330123412341234",
    );
    if let Some(code) = session.decline {
        payment["status"] = json!("ABORTED");
        payment["approvedAt"] = Value::Null;
        payment["failure"] = json!({ "code": code, "message": "카드사에서 결제를 거절했습니다." });
        state.by_order.insert(body.order_id.clone(), body.payment_key.clone());
        state.payments.insert(body.payment_key.clone(), payment);
        return error(status_of(&code), &code, "카드사에서 결제를 거절했습니다.");
    }
    let key = payment["lastTransactionKey"].as_str().unwrap_or_default().to_owned();
    record_transaction(state, &payment, &key, body.amount, None);
    state.by_order.insert(body.order_id.clone(), body.payment_key.clone());
    state.payments.insert(body.payment_key.clone(), payment.clone());
    (200, payment)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IssueBody {
    auth_key: String,
    customer_key: String,
}

fn billing_issue(state: &mut State, body: &[u8]) -> (u16, Value) {
    let body: IssueBody = match parse(body) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let Some(auth) = state.auth_keys.get(&body.auth_key).cloned() else {
        return error(404, "NOT_FOUND", "존재하지 않는 정보 입니다. (authKey)");
    };
    if auth.customer_key != body.customer_key {
        return error(
            400,
            "NOT_MATCHES_CUSTOMER_KEY",
            "빌링 인증 고객키와 결제 요청 고객키가 일치하지 않습니다.",
        );
    }
    // An authKey is good for one issue.
    state.auth_keys.remove(&body.auth_key);
    let billing_key = random_key("bk_");
    state.billing_keys.insert(billing_key.clone(), auth.clone());
    (
        200,
        json!({
            "mId": "tosspayments",
            "customerKey": auth.customer_key,
            "authenticatedAt": now_kst().to_rfc3339(),
            "method": "카드",
            "billingKey": billing_key,
            "cardCompany": "현대",
            "cardNumber": masked(&auth.card_number),
            "card": { "issuerCode": "61", "acquirerCode": "31", "number": masked(&auth.card_number), "cardType": "신용", "ownerType": "개인" },
        }),
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChargeBody {
    customer_key: String,
    amount: i64,
    order_id: String,
    order_name: String,
}

fn billing_charge(state: &mut State, billing_key: &str, body: &[u8]) -> (u16, Value) {
    let body: ChargeBody = match parse(body) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let Some(billing) = state.billing_keys.get(billing_key).cloned() else {
        return error(404, "NOT_FOUND", "존재하지 않는 정보 입니다. (billingKey)");
    };
    if billing.customer_key != body.customer_key {
        return error(
            400,
            "NOT_MATCHES_CUSTOMER_KEY",
            "빌링 인증 고객키와 결제 요청 고객키가 일치하지 않습니다.",
        );
    }
    if state.by_order.contains_key(&body.order_id) {
        return error(400, "DUPLICATED_ORDER_ID", "이미 승인 및 취소가 진행된 중복된 주문번호 입니다.");
    }
    if body.amount <= 0 {
        return error(400, "INVALID_REQUEST", "잘못된 요청입니다. (amount)");
    }
    let payment_key = random_key("tbill_");
    let payment = payment_done(
        &payment_key,
        &body.order_id,
        &body.order_name,
        body.amount,
        "BILLING",
        &billing.card_number,
    );
    let key = payment["lastTransactionKey"].as_str().unwrap_or_default().to_owned();
    record_transaction(state, &payment, &key, body.amount, Some(billing.customer_key));
    state.by_order.insert(body.order_id, payment_key.clone());
    state.payments.insert(payment_key, payment.clone());
    (200, payment)
}

/// The card number the fake refuses at key-in (as a card company would, over its limit).
pub const KEY_IN_DECLINED_CARD: &str = "4000000000000002";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeyInBody {
    amount: i64,
    order_id: String,
    order_name: String,
    card_number: String,
    card_expiration_year: String,
    card_expiration_month: String,
    customer_identity_number: String,
}

/// `POST /v1/payments/key-in`: a card charged by its number (test keys only here, as the
/// fake has only a test key).
fn key_in(state: &mut State, body: &[u8]) -> (u16, Value) {
    let body: KeyInBody = match parse(body) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if !(15..=16).contains(&body.card_number.len()) || !body.card_number.bytes().all(|b| b.is_ascii_digit()) {
        return error(400, "INVALID_CARD_NUMBER", "카드번호를 다시 확인해주세요.");
    }
    if !digits(&body.card_expiration_year, 2) || !digits(&body.card_expiration_month, 2) {
        return error(400, "INVALID_CARD_EXPIRATION", "카드 정보를 다시 확인해주세요. (유효기간)");
    }
    if !(digits(&body.customer_identity_number, 6) || digits(&body.customer_identity_number, 10)) {
        return error(400, "INVALID_REQUEST", "잘못된 요청입니다. (customerIdentityNumber)");
    }
    if body.amount <= 0 {
        return error(400, "INVALID_REQUEST", "잘못된 요청입니다. (amount)");
    }
    if state.by_order.contains_key(&body.order_id) {
        return error(400, "DUPLICATED_ORDER_ID", "이미 승인 및 취소가 진행된 중복된 주문번호 입니다.");
    }
    if body.card_number == KEY_IN_DECLINED_CARD {
        return error(403, "REJECT_CARD_PAYMENT", "한도초과 혹은 잔액부족으로 결제에 실패했습니다.");
    }
    let payment_key = random_key("tkey_");
    let payment = payment_done(
        &payment_key,
        &body.order_id,
        &body.order_name,
        body.amount,
        "NORMAL",
        &body.card_number,
    );
    let key = payment["lastTransactionKey"].as_str().unwrap_or_default().to_owned();
    record_transaction(state, &payment, &key, body.amount, None);
    state.by_order.insert(body.order_id, payment_key.clone());
    state.payments.insert(payment_key, payment.clone());
    (200, payment)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelBody {
    cancel_reason: String,
    cancel_amount: Option<i64>,
    refundable_amount: Option<i64>,
}

fn cancel(state: &mut State, payment_key: &str, body: &[u8]) -> (u16, Value) {
    let body: CancelBody = match parse(body) {
        Ok(b) => b,
        Err(e) => return e,
    };
    apply_cancel(state, payment_key, &body.cancel_reason, body.cancel_amount, body.refundable_amount)
}

fn apply_cancel(
    state: &mut State,
    payment_key: &str,
    reason: &str,
    amount: Option<i64>,
    refundable: Option<i64>,
) -> (u16, Value) {
    let Some(mut payment) = state.payments.get(payment_key).cloned() else {
        return error(404, "NOT_FOUND_PAYMENT", "존재하지 않는 결제 정보 입니다.");
    };
    match payment["status"].as_str() {
        Some("CANCELED") => return error(400, "ALREADY_CANCELED_PAYMENT", "이미 취소된 결제 입니다."),
        Some("DONE" | "PARTIAL_CANCELED") => {}
        _ => return error(403, "NOT_CANCELABLE_PAYMENT", "취소 할 수 없는 결제 입니다."),
    }
    let balance = payment["balanceAmount"].as_i64().unwrap_or(0);
    if refundable.is_some_and(|r| r != balance) {
        // reference/error-codes (cancel): 400 NOT_MATCHES_REFUNDABLE_AMOUNT, "잔액 결과가
        //일치하지 않습니다." — what a live Toss answered the reporter of issue 43.
        return error(400, "NOT_MATCHES_REFUNDABLE_AMOUNT", "잔액 결과가 일치하지 않습니다.");
    }
    let amount = amount.unwrap_or(balance);
    if amount <= 0 || amount > balance {
        return error(403, "NOT_CANCELABLE_AMOUNT", "취소 할 수 없는 금액 입니다.");
    }
    let left = balance - amount;
    let transaction_key = random_key("txc_");
    let entry = json!({
        "cancelAmount": amount,
        "cancelReason": reason,
        "taxFreeAmount": 0,
        "taxExemptionAmount": 0,
        "refundableAmount": left,
        "easyPayDiscountAmount": 0,
        "canceledAt": now_kst().to_rfc3339(),
        "transactionKey": transaction_key,
        "receiptKey": null,
        "cancelStatus": "DONE",
    });
    let mut cancels = payment["cancels"].as_array().cloned().unwrap_or_default();
    cancels.push(entry);
    payment["cancels"] = Value::Array(cancels);
    payment["balanceAmount"] = json!(left);
    payment["status"] = json!(if left == 0 { "CANCELED" } else { "PARTIAL_CANCELED" });
    payment["lastTransactionKey"] = json!(transaction_key);
    record_transaction(state, &payment, &transaction_key, amount, None);
    state.payments.insert(payment_key.to_owned(), payment.clone());
    (200, payment)
}

/// `startDate` / `endDate`: ISO 8601, in Korea's time; a date alone is `00:00:00`.
fn kst_time(text: &str) -> Option<DateTime<FixedOffset>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t);
    }
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S")
        .ok()
        .or_else(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)))?;
    kst().from_local_datetime(&naive).single()
}

fn transactions(state: &mut State, query: &str) -> (u16, Value) {
    let q: HashMap<String, String> = url_pairs(query).into_iter().collect();
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => 100,
        Some(Ok(n)) if (1..=5000).contains(&n) => n,
        Some(_) => return error(400, "INVALID_REQUEST", "limit은 1에서 5000 사이여야 합니다."),
    };
    let (Some(start), Some(end)) =
        (q.get("startDate").and_then(|t| kst_time(t)), q.get("endDate").and_then(|t| kst_time(t)))
    else {
        return error(400, "INVALID_REQUEST", "startDate, endDate는 필수입니다.");
    };
    let mut within: Vec<&Transaction> =
        state.transactions.iter().filter(|t| t.at >= start && t.at <= end).collect();
    within.sort_by_key(|t| t.at);
    let from = match q.get("startingAfter") {
        Some(key) => match within.iter().position(|t| &t.key == key) {
            Some(at) => at + 1,
            None => return error(400, "INVALID_REQUEST", "startingAfter가 잘못되었습니다."),
        },
        None => 0,
    };
    let page: Vec<Value> = within
        .iter()
        .skip(from)
        .take(limit)
        .map(|t| {
            json!({
                "mId": "tosspayments",
                "transactionKey": t.key,
                "paymentKey": t.payment_key,
                "orderId": t.order_id,
                "method": "카드",
                "customerKey": t.customer_key,
                "useEscrow": false,
                "receiptUrl": null,
                "status": t.status,
                "transactionAt": t.at.to_rfc3339(),
                "currency": "KRW",
                "amount": t.amount,
            })
        })
        .collect();
    (200, Value::Array(page))
}

/// Every settlement row: one per approval and per cancel (negative), as tampered with,
/// and the rows of payments never taken here.
fn settlement_rows(state: &State, terms: SettlementTerms) -> Vec<settlements::Row> {
    let mut rows = Vec::with_capacity(state.transactions.len() + state.extra_rows.len());
    for t in &state.transactions {
        let tamper = state.tampered.get(&t.payment_key);
        if tamper.is_some_and(|t| t.withhold) {
            continue;
        }
        let signed = if t.status == "DONE" { t.amount } else { -t.amount };
        let keys = (Some(t.payment_key.clone()), Some(t.key.clone()), Some(t.order_id.clone()));
        let mut row = settlements::Row::of(terms, keys, signed, t.at);
        if let Some(tamper) = tamper.filter(|_| signed > 0) {
            row.fee = tamper.fee.unwrap_or(row.fee);
            row.pay_out_amount = tamper.pay_out_amount.unwrap_or(row.amount - row.fee);
        }
        rows.push(row);
    }
    rows.extend(state.extra_rows.iter().cloned());
    rows
}

/// `a=1&b=2`, percent-decoded.
fn url_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&text[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn api_confirm(req: HttpRequest, body: web::Bytes, fake: web::Data<Fake>) -> HttpResponse {
    let ttl = fake.settings.session_ttl;
    fake.dispatch(&req, "confirm", |s| confirm(s, ttl, &body)).await
}

async fn api_key_in(req: HttpRequest, body: web::Bytes, fake: web::Data<Fake>) -> HttpResponse {
    fake.dispatch(&req, "key_in", |s| key_in(s, &body)).await
}

async fn api_billing_issue(req: HttpRequest, body: web::Bytes, fake: web::Data<Fake>) -> HttpResponse {
    fake.dispatch(&req, "billing_issue", |s| billing_issue(s, &body)).await
}

async fn api_billing_charge(
    req: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
    fake: web::Data<Fake>,
) -> HttpResponse {
    fake.dispatch(&req, "billing_charge", |s| billing_charge(s, &path, &body)).await
}

async fn api_cancel(
    req: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
    fake: web::Data<Fake>,
) -> HttpResponse {
    fake.dispatch(&req, "cancel", |s| cancel(s, &path, &body)).await
}

async fn api_get_payment(req: HttpRequest, path: web::Path<String>, fake: web::Data<Fake>) -> HttpResponse {
    fake.dispatch(&req, "get_payment", |s| match s.payments.get(path.as_str()) {
        Some(p) => (200, p.clone()),
        None => error(404, "NOT_FOUND_PAYMENT", "존재하지 않는 결제 정보 입니다."),
    })
    .await
}

async fn api_get_by_order(req: HttpRequest, path: web::Path<String>, fake: web::Data<Fake>) -> HttpResponse {
    fake.dispatch(&req, "get_by_order", |s| {
        match s.by_order.get(path.as_str()).and_then(|k| s.payments.get(k)) {
            Some(p) => (200, p.clone()),
            None => error(404, "NOT_FOUND_PAYMENT", "존재하지 않는 결제 정보 입니다."),
        }
    })
    .await
}

async fn api_settlements(req: HttpRequest, fake: web::Data<Fake>) -> HttpResponse {
    let query = url_pairs(req.query_string());
    let terms = fake.settings.settlement;
    fake.dispatch(&req, "settlements", |s| settlements::page(&settlement_rows(s, terms), &query, s.quirks))
        .await
}

async fn fake_settlement_quirks(body: web::Json<Quirks>, fake: web::Data<Fake>) -> HttpResponse {
    fake.lock().quirks = body.into_inner();
    HttpResponse::NoContent().finish()
}

async fn fake_settlement_tamper(body: web::Json<Tamper>, fake: web::Data<Fake>) -> HttpResponse {
    let tamper = body.into_inner();
    fake.lock().tampered.insert(tamper.payment_key.clone(), tamper);
    HttpResponse::NoContent().finish()
}

async fn fake_settlement_extra(body: web::Json<Extra>, fake: web::Data<Fake>) -> HttpResponse {
    let extra = body.into_inner();
    let Some(at) = NaiveDate::parse_from_str(&extra.sold_date, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(12, 0, 0))
        .and_then(|t| kst().from_local_datetime(&t).single())
    else {
        return HttpResponse::BadRequest().finish();
    };
    let terms = fake.settings.settlement;
    let mut state = fake.lock();
    for _ in 0..extra.count {
        let keys = if extra.null_keys {
            (None, None, None)
        } else {
            (Some(random_key("tviva_")), Some(random_key("txs_")), Some(random_key("order-")))
        };
        state.extra_rows.push(settlements::Row::of(terms, keys, extra.amount, at));
    }
    HttpResponse::NoContent().finish()
}

async fn api_transactions(req: HttpRequest, fake: web::Data<Fake>) -> HttpResponse {
    let query = req.query_string().to_owned();
    fake.dispatch(&req, "transactions", |s| transactions(s, &query)).await
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CheckoutBody {
    order_id: String,
    amount: i64,
    #[serde(default)]
    order_name: Option<String>,
    #[serde(default)]
    decline: Option<String>,
}

/// The widget's part of a checkout: the customer authorized `amount` for `orderId`; the
/// answer's `paymentKey` is what the success redirect gives the shop.
async fn fake_checkout(body: web::Json<CheckoutBody>, fake: web::Data<Fake>) -> HttpResponse {
    let payment_key = random_key("tgen_");
    fake.lock().sessions.insert(
        payment_key.clone(),
        Session {
            order_id: body.order_id.clone(),
            amount: body.amount,
            order_name: body.order_name.clone().unwrap_or_else(|| "주문".into()),
            decline: body.decline.clone(),
            created: Utc::now(),
        },
    );
    HttpResponse::Ok()
        .json(json!({ "paymentKey": payment_key, "orderId": body.order_id, "amount": body.amount }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BillingAuthBody {
    customer_key: String,
    #[serde(default)]
    card_number: Option<String>,
}

/// The billing-auth widget's part: the customer registered a card; the answer's `authKey`
/// is what its success redirect gives the shop.
async fn fake_billing_auth(body: web::Json<BillingAuthBody>, fake: web::Data<Fake>) -> HttpResponse {
    let auth_key = random_key("bln_");
    let card_number = body.card_number.clone().unwrap_or_else(|| "4330123412341234".into());
    fake.lock()
        .auth_keys
        .insert(auth_key.clone(), Billing { customer_key: body.customer_key.clone(), card_number });
    HttpResponse::Ok().json(json!({ "authKey": auth_key, "customerKey": body.customer_key }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DashboardCancelBody {
    #[serde(default)]
    cancel_amount: Option<i64>,
    #[serde(default)]
    cancel_reason: Option<String>,
}

/// A cancel made by the shop's staff in Toss's dashboard: no Idempotency-Key, no call from
/// the service; a `PAYMENT_STATUS_CHANGED` webhook follows.
async fn fake_dashboard_cancel(
    path: web::Path<String>,
    body: web::Json<DashboardCancelBody>,
    fake: web::Data<Fake>,
) -> HttpResponse {
    let reason = body.cancel_reason.clone().unwrap_or_else(|| "대시보드 취소".into());
    let answer = apply_cancel(&mut fake.lock(), &path, &reason, body.cancel_amount, None);
    if answer.0 == 200 {
        fake.send_webhook(answer.1.clone());
    }
    respond(answer)
}

async fn fake_faults(body: web::Json<Fault>, fake: web::Data<Fake>) -> HttpResponse {
    if !OPERATIONS.contains(&body.operation.as_str())
        || !["effect_then_500", "fail_500", "delay", "late"].contains(&body.kind.as_str())
    {
        return HttpResponse::BadRequest().json(json!({ "operations": OPERATIONS }));
    }
    fake.lock().faults.push(body.into_inner());
    HttpResponse::NoContent().finish()
}

async fn fake_calls(fake: web::Data<Fake>) -> HttpResponse {
    let state = fake.lock();
    HttpResponse::Ok().json(json!({
        "calls": state.calls,
        "effects": state.effects,
        "webhooksSent": state.webhooks_sent,
        "idempotencyKeys": state.idempotency.keys().map(|k| k.0.clone()).collect::<Vec<_>>(),
    }))
}

#[derive(Deserialize)]
struct WebhookBody {
    url: String,
}

async fn fake_webhook(body: web::Json<WebhookBody>, fake: web::Data<Fake>) -> HttpResponse {
    fake.lock().webhook_url = Some(body.url.clone());
    HttpResponse::NoContent().finish()
}

/// Starts the fake on `bind` (`127.0.0.1:0` picks a free port) on the current tokio runtime.
///
/// # Errors
/// The address cannot be bound.
pub fn start(bind: &str, settings: FakeSettings) -> std::io::Result<RunningFake> {
    // Idempotent: a process that installed one already keeps it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let fake = Fake {
        settings: Arc::new(settings),
        state: Arc::new(Mutex::new(State::default())),
        http: reqwest::Client::new(),
    };
    let data = web::Data::new(fake);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(web::PayloadConfig::new(1 << 20))
            .route("/v1/payments/confirm", web::post().to(api_confirm))
            .route("/v1/payments/key-in", web::post().to(api_key_in))
            .route("/v1/payments/orders/{orderId}", web::get().to(api_get_by_order))
            .route("/v1/payments/{paymentKey}/cancel", web::post().to(api_cancel))
            .route("/v1/payments/{paymentKey}", web::get().to(api_get_payment))
            .route("/v1/billing/authorizations/issue", web::post().to(api_billing_issue))
            .route("/v1/billing/{billingKey}", web::post().to(api_billing_charge))
            .route("/v1/transactions", web::get().to(api_transactions))
            .route("/v1/settlements", web::get().to(api_settlements))
            .route("/__fake/checkout", web::post().to(fake_checkout))
            .route("/__fake/billing-auth", web::post().to(fake_billing_auth))
            .route("/__fake/payments/{paymentKey}/dashboard-cancel", web::post().to(fake_dashboard_cancel))
            .route("/__fake/faults", web::post().to(fake_faults))
            .route("/__fake/calls", web::get().to(fake_calls))
            .route("/__fake/webhook", web::post().to(fake_webhook))
            .route("/__fake/settlements/quirks", web::post().to(fake_settlement_quirks))
            .route("/__fake/settlements/tamper", web::post().to(fake_settlement_tamper))
            .route("/__fake/settlements/extra", web::post().to(fake_settlement_extra))
    })
    .workers(1)
    .disable_signals()
    .bind(bind)?;
    let port = server.addrs().first().map(|a| a.port()).unwrap_or(0);
    let server = server.run();
    let handle = server.handle();
    tokio::spawn(server);
    Ok(RunningFake { base_url: format!("http://127.0.0.1:{port}"), port, handle })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_pairs_are_percent_decoded() {
        assert_eq!(
            url_pairs("startDate=2026-12-01T00%3A00%3A00&limit=5"),
            vec![("startDate".into(), "2026-12-01T00:00:00".into()), ("limit".into(), "5".into())]
        );
    }

    #[test]
    fn a_date_alone_is_midnight_in_korea() {
        let t = kst_time("2026-12-01").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-12-01T00:00:00+09:00");
    }

    #[test]
    fn card_numbers_are_masked() {
        assert_eq!(masked("4330123412341234"), "43301234****123*");
    }
}
