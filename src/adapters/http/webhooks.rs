//! `POST /api/payments/toss/webhook`: Toss's `PAYMENT_STATUS_CHANGED` (and
//! `CANCEL_STATUS_CHANGED`) webhooks (docs/spec.md §10). Toss does not sign them, so the body
//! only names a payment: the service asks Toss and applies what Toss says. Anyone can call
//! this endpoint, so it is rate-limited (`429`, Toss retries) and what it audits is bounded:
//! notices of payments we do not have (and garbage) share one budget, each payment we have
//! gets a budget of its own, so a flood of made-up keys never starves Toss's genuine notices.
//! It answers `200` for anything applied or ignored, `503` when Toss or the database cannot
//! be asked now (Toss retries up to 7 times).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use super::HttpState;
use super::body::RawBody;
use super::problem::{ApiError, Problem};
use crate::application::AppError;
use crate::application::recovery::{NoticeOutcome, NoticeSubject, PaymentNotice};
use crate::domain::text;

/// A token bucket: `rate` notices a second, bursts of `burst`.
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    state: Mutex<(Instant, f64)>,
}

impl RateLimiter {
    pub fn new(rate: f64, burst: f64) -> Self {
        RateLimiter { rate, burst, state: Mutex::new((Instant::now(), burst)) }
    }

    /// Takes a token if one is there.
    pub fn admit(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let refill = now.duration_since(state.0).as_secs_f64() * self.rate;
        state.1 = (state.1 + refill).min(self.burst);
        state.0 = now;
        if state.1 >= 1.0 {
            state.1 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A token bucket per key (`rate` a second, bursts of `burst`), for at most `capacity`
/// keys: when that many are held, the ones whose bucket has refilled are forgotten (they are
/// as good as new); if none has, a new key is refused until one does.
pub struct KeyedLimiter {
    rate: f64,
    burst: f64,
    capacity: usize,
    buckets: Mutex<HashMap<String, (Instant, f64)>>,
}

impl KeyedLimiter {
    pub fn new(rate: f64, burst: f64, capacity: usize) -> Self {
        KeyedLimiter { rate, burst, capacity, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes a token from `key`'s bucket if one is there.
    pub fn admit(&self, key: &str) -> bool {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let level = |(at, tokens): (Instant, f64)| tokens + now.duration_since(at).as_secs_f64() * self.rate;
        if !buckets.contains_key(key) && buckets.len() >= self.capacity {
            buckets.retain(|_, bucket| level(*bucket) < self.burst);
            if buckets.len() >= self.capacity {
                return false;
            }
        }
        let bucket = buckets.entry(key.to_owned()).or_insert((now, self.burst));
        let tokens = level(*bucket).min(self.burst);
        if tokens >= 1.0 {
            *bucket = (now, tokens - 1.0);
            true
        } else {
            *bucket = (now, tokens);
            false
        }
    }
}

/// The webhook's budgets: strangers (garbage, other events, payments we do not have) share
/// one; each payment we have has its own.
pub struct WebhookLimits {
    pub strangers: RateLimiter,
    pub per_payment: KeyedLimiter,
}

impl Default for WebhookLimits {
    /// Strangers: 20 a second, bursts of 100. A payment we have: 1 a second, bursts of 10
    /// (Toss sends a handful per payment, retries included), for up to 10 000 payments at once.
    fn default() -> Self {
        WebhookLimits {
            strangers: RateLimiter::new(20.0, 100.0),
            per_payment: KeyedLimiter::new(1.0, 10.0, 10_000),
        }
    }
}

fn too_many() -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS", "too many webhooks; retry later")
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookResponse {
    /// `APPLIED` (Toss's answer changed something here) or `UNCHANGED`.
    pub outcome: &'static str,
}

/// The fields a notice is read for; everything else in it is ignored (never trusted).
fn notice_of(body: &[u8]) -> Result<Option<PaymentNotice>, ApiError> {
    let bad = |why: &str| ApiError::new(StatusCode::BAD_REQUEST, "MALFORMED_WEBHOOK", why.to_owned());
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|_| bad("not a JSON object"))?;
    let event = value["eventType"].as_str().ok_or_else(|| bad("eventType is missing"))?;
    if !matches!(event, "PAYMENT_STATUS_CHANGED" | "CANCEL_STATUS_CHANGED") {
        return Ok(None);
    }
    let key_ok = |k: &str| text::is_provider_key(k, 200);
    let payment_key = value["data"]["paymentKey"]
        .as_str()
        .filter(|k| key_ok(k))
        .ok_or_else(|| bad("data.paymentKey is missing or malformed"))?;
    let order_id = value["data"]["orderId"].as_str().filter(|k| key_ok(k)).map(str::to_owned);
    Ok(Some(PaymentNotice { payment_key: payment_key.to_owned(), order_id }))
}

/// Toss's webhook: a hint that a payment changed; Toss is asked, its answer applied.
#[utoipa::path(
    post,
    path = "/api/payments/toss/webhook",
    tag = "payments",
    responses(
        (status = 200, description = "Applied, or nothing to change (a duplicate, an unknown payment)", body = WebhookResponse),
        (status = 400, description = "MALFORMED_WEBHOOK", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Too many notices (of payments we do not have, or of this payment): Toss retries", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Toss or the database cannot be asked now: Toss retries", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn toss(state: web::Data<HttpState>, body: RawBody) -> Result<HttpResponse, ApiError> {
    let limits = &state.webhook_limits;
    let notice = match notice_of(&body.0) {
        Ok(Some(notice)) => notice,
        Ok(None) if limits.strangers.admit() => {
            return Ok(HttpResponse::Ok().json(WebhookResponse { outcome: "UNCHANGED" }));
        }
        Err(malformed) if limits.strangers.admit() => return Err(malformed),
        Ok(None) | Err(_) => return Err(too_many()),
    };
    let admit = |subject: NoticeSubject<'_>| match subject {
        NoticeSubject::Known(payment) => limits.per_payment.admit(payment),
        NoticeSubject::Unknown => limits.strangers.admit(),
    };
    let outcome = match state.recovery.payment_notice(notice, admit).await {
        Ok(outcome) => outcome,
        Err(AppError::Conflict { .. }) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                crate::application::ORDER_BUSY,
                "the order is being changed; retry",
            ));
        }
        Err(err) => return Err(err.into()),
    };
    let outcome = match outcome {
        NoticeOutcome::Applied => "APPLIED",
        NoticeOutcome::Unchanged => "UNCHANGED",
        NoticeOutcome::Throttled => return Err(too_many()),
    };
    Ok(HttpResponse::Ok().json(WebhookResponse { outcome }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limiter_admits_its_burst_then_its_rate() {
        let limiter = RateLimiter::new(1.0, 3.0);
        assert!((0..3).all(|_| limiter.admit()));
        assert!(!limiter.admit());
    }

    #[test]
    fn a_keyed_limiter_gives_each_key_its_own_budget_and_holds_a_bounded_number() {
        let limiter = KeyedLimiter::new(0.001, 2.0, 2);
        assert!(limiter.admit("a") && limiter.admit("a") && !limiter.admit("a"));
        assert!(limiter.admit("b"), "a spent key leaves the others alone");
        assert!(!limiter.admit("c"), "full of buckets still spent: a new key waits");
        let fresh = KeyedLimiter::new(0.001, 2.0, 1);
        assert!(fresh.admit("a"));
        assert!(!fresh.admit("b"));
    }

    #[test]
    fn a_notice_is_read_for_the_payment_it_names_only() {
        let notice = notice_of(br#"{"eventType":"PAYMENT_STATUS_CHANGED","createdAt":"x","data":{"paymentKey":"tgen_1","orderId":"pay-1","status":"DONE","totalAmount":1}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(notice, PaymentNotice { payment_key: "tgen_1".into(), order_id: Some("pay-1".into()) });
        assert_eq!(notice_of(br#"{"eventType":"DEPOSIT_CALLBACK","data":{}}"#).unwrap(), None);
        for bad in [
            &b"[]"[..],
            br#"{"data":{}}"#,
            br#"{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"../x"}}"#,
        ] {
            assert!(notice_of(bad).is_err());
        }
    }
}
