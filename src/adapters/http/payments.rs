//! Provider callbacks (`POST /api/payments/callbacks`, docs/spec.md §5) and the operators' view of
//! payments whose outcome is unknown.
//!
//! A callback is authenticated by `X-Signature: t=<unix seconds>,v1=<hex>`, where `v1` is
//! HMAC-SHA256 over `"{t}.{raw body}"` under `payment.external.webhook_secret`, compared in
//! constant time; `t` must be within 300 s of now. Anything else is `401` and changes
//! nothing.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use utoipa::ToSchema;

use super::HttpState;
use super::auth::Admin;
use super::body::MaybeJson;
use super::body::RawBody;
use super::dto::{OrderDetailResponse, OrderResponse, PaymentResponse};
use super::problem::{ApiError, Problem};
use crate::application::envelopes::timestamp;
use crate::application::money::refunds::OperatorDecision;
use crate::application::recovery::{CallbackResult, ProviderCallback};
use crate::domain::text;

/// How far a callback's timestamp may be from now.
pub const TOLERANCE_SECONDS: i64 = 300;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallbackRequest {
    pub provider_transaction_id: String,
    pub payment_request_id: String,
    /// `APPROVED` | `DECLINED`
    pub status: String,
    pub decline_code: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallbackResponse {
    /// `APPLIED` or `DUPLICATE`
    pub result: &'static str,
    pub order_status: Option<&'static str>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnconfirmedPaymentResponse {
    pub order_id: String,
    #[serde(flatten)]
    pub payment: PaymentResponse,
    pub reconcile_attempts: i32,
    pub next_reconcile_at: Option<String>,
    pub updated_at: String,
}

fn unauthorized(why: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "INVALID_SIGNATURE", why.to_owned())
}

fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// Checks `X-Signature` against the raw body.
///
/// # Errors
/// `401 INVALID_SIGNATURE` with a generic reason.
pub fn verify_signature(secret: &[u8], header: Option<&str>, body: &[u8], now: i64) -> Result<(), ApiError> {
    let header = header.ok_or_else(|| unauthorized("missing X-Signature"))?;
    let (mut t, mut v1) = (None, None);
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", value)) => t = value.parse::<i64>().ok(),
            Some(("v1", value)) => v1 = hex(value),
            _ => {}
        }
    }
    let (t, v1) = t.zip(v1).ok_or_else(|| unauthorized("malformed X-Signature"))?;
    if (now - t).abs() > TOLERANCE_SECONDS {
        return Err(unauthorized("stale or future timestamp"));
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| unauthorized("bad signature"))?;
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&v1).map_err(|_| unauthorized("bad signature"))
}

/// The provider tells us the final outcome of a payment (e.g. one that timed out).
#[utoipa::path(
    post,
    path = "/api/payments/callbacks",
    tag = "payments",
    request_body = CallbackRequest,
    params(("X-Signature" = String, Header, description = "t=<unix seconds>,v1=<hex HMAC-SHA256 of t, a dot and the raw body>")),
    responses(
        (status = 200, description = "Applied, or a duplicate (no-op)", body = CallbackResponse),
        (status = 401, description = "Missing, bad or stale signature", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown paymentRequestId", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "ORDER_BUSY: retry shortly", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn callback(
    state: web::Data<HttpState>,
    req: HttpRequest,
    body: RawBody,
) -> Result<HttpResponse, ApiError> {
    let Some(secret) = &state.webhook_secret else {
        return Err(unauthorized("provider callbacks are not configured"));
    };
    let header = req.headers().get("x-signature").and_then(|v| v.to_str().ok());
    if let Err(err) =
        verify_signature(secret.expose().as_bytes(), header, &body.0, chrono::Utc::now().timestamp())
    {
        state.recovery.reject_callback(&err.detail).await;
        return Err(err);
    }
    let request: CallbackRequest = super::body::decode(&body.0)?.value;
    let approved = match request.status.as_str() {
        "APPROVED" => true,
        "DECLINED" => false,
        _ => {
            return Err(ApiError::field(
                StatusCode::UNPROCESSABLE_ENTITY,
                "status",
                "must be APPROVED or DECLINED",
            ));
        }
    };
    for (field, value) in [
        ("providerTransactionId", &request.provider_transaction_id),
        ("paymentRequestId", &request.payment_request_id),
    ] {
        if value.is_empty() || value.len() > 128 {
            return Err(ApiError::field(
                StatusCode::UNPROCESSABLE_ENTITY,
                field,
                "must be 1 to 128 characters",
            ));
        }
    }
    let result = state
        .recovery
        .handle_callback(ProviderCallback {
            provider_transaction_id: request.provider_transaction_id,
            payment_request_id: request.payment_request_id,
            approved,
            decline_code: request.decline_code,
        })
        .await?;
    match result {
        CallbackResult::Applied(record) => Ok(HttpResponse::Ok()
            .json(CallbackResponse { result: "APPLIED", order_status: Some(record.order.status.as_str()) })),
        CallbackResult::Duplicate => {
            Ok(HttpResponse::Ok().json(CallbackResponse { result: "DUPLICATE", order_status: None }))
        }
        CallbackResult::Busy => Err(ApiError::new(
            StatusCode::CONFLICT,
            crate::application::ORDER_BUSY,
            "the order is being processed right now; retry shortly",
        )),
    }
}

/// Payments whose outcome is unknown — an approval (`CONFIRMATION_REQUIRED`) or a refund
/// (`REFUND_PENDING`) — with their attempts; those out of attempts wait for an operator.
#[utoipa::path(
    get,
    path = "/api/admin/payments/unconfirmed",
    tag = "admin",
    responses(
        (status = 200, body = [UnconfirmedPaymentResponse]),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn unconfirmed(state: web::Data<HttpState>, admin: Admin) -> Result<HttpResponse, ApiError> {
    let payments = state.recovery.unconfirmed(&admin.0).await?;
    let items: Vec<UnconfirmedPaymentResponse> = payments
        .iter()
        .map(|p| UnconfirmedPaymentResponse {
            order_id: p.order_id.to_string(),
            payment: PaymentResponse::from(p),
            reconcile_attempts: p.reconcile_attempts,
            next_reconcile_at: p.next_reconcile_at.map(timestamp),
            updated_at: timestamp(p.updated_at),
        })
        .collect();
    Ok(HttpResponse::Ok().json(items))
}

/// Orders whose compensation failed on every retry (audited `COMPENSATION_EXHAUSTED`): the
/// order is `FAILED` and its payment still `APPROVED`; an operator must settle it.
#[utoipa::path(
    get,
    path = "/api/admin/payments/compensations-exhausted",
    tag = "admin",
    responses(
        (status = 200, body = [OrderResponse]),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn compensations_exhausted(
    state: web::Data<HttpState>,
    admin: Admin,
) -> Result<HttpResponse, ApiError> {
    let orders = state.recovery.compensations_exhausted(&admin.0).await?;
    Ok(HttpResponse::Ok().json(orders.iter().map(OrderResponse::from).collect::<Vec<_>>()))
}

/// Orders whose saga stalled half-way and that stalled-saga recovery gave up on after
/// `saga.recovery_max_attempts` resumes (audited `SAGA_RECOVERY_EXHAUSTED`).
#[utoipa::path(
    get,
    path = "/api/admin/orders/stalled",
    tag = "admin",
    responses(
        (status = 200, body = [OrderResponse]),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn stalled(state: web::Data<HttpState>, admin: Admin) -> Result<HttpResponse, ApiError> {
    let orders = state.recovery.stalled_for_operator(&admin.0).await?;
    Ok(HttpResponse::Ok().json(orders.iter().map(OrderResponse::from).collect::<Vec<_>>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &[u8], t: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        let v1: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        format!("t={t},v1={v1}")
    }

    #[test]
    fn signatures_are_checked_over_timestamp_and_raw_body() {
        let (secret, body, now) = (b"whsec", br#"{"a":1}"#, 1_800_000_000);
        assert!(verify_signature(secret, Some(&sign(secret, now, body)), body, now).is_ok());
        assert!(verify_signature(secret, Some(&sign(secret, now - 300, body)), body, now).is_ok());
        assert!(verify_signature(secret, Some(&sign(secret, now - 301, body)), body, now).is_err(), "stale");
        assert!(verify_signature(secret, Some(&sign(secret, now + 301, body)), body, now).is_err(), "future");
        assert!(verify_signature(b"other", Some(&sign(secret, now, body)), body, now).is_err(), "wrong key");
        assert!(
            verify_signature(secret, Some(&sign(secret, now, body)), br#"{"a":2}"#, now).is_err(),
            "tampered"
        );
        for bad in ["", "t=1", "v1=00", "t=x,v1=zz", "garbage"] {
            assert!(verify_signature(secret, Some(bad), body, now).is_err(), "{bad}");
        }
        assert!(verify_signature(secret, None, body, now).is_err());
    }
}

/// Ours beside the provider's.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderViewResponse {
    pub payment: PaymentResponse,
    /// The provider's live record, unchanged (Toss's Payment object); `null` when it has none.
    #[schema(value_type = Object)]
    pub provider: Option<serde_json::Value>,
}

/// The provider's live record of one of our payments (`id`: our payment id), for support.
#[utoipa::path(
    get,
    path = "/api/admin/payments/{id}/provider",
    tag = "admin",
    params(("id" = String, Path, description = "Our payment id (UUID)")),
    responses(
        (status = 200, body = ProviderViewResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "NOT_SUPPORTED (the provider shows nothing) or NOT_AT_PROVIDER", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The provider cannot be reached", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn provider_view(
    state: web::Data<HttpState>,
    admin: Admin,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = uuid::Uuid::parse_str(&path)
        .map(crate::domain::ids::PaymentId::from_uuid)
        .map_err(|_| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "id", "must be a UUID"))?;
    let (payment, record) = state.provider_view.of(&admin.0, id).await?;
    Ok(HttpResponse::Ok().json(ProviderViewResponse {
        payment: PaymentResponse::from(&payment),
        provider: record.map(|r| r.whole),
    }))
}

/// What an operator found a pending refund to be, in the provider's own books.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolveRefundRequest {
    /// `MADE` (the provider refunded it) or `NOT_MADE` (it never did).
    pub outcome: String,
    /// Why; recorded in the audit log.
    #[schema(max_length = 1000)]
    pub reason: String,
    /// The provider's key of the cancel (Toss's `transactionKey`), with `MADE`, if known.
    #[schema(max_length = 200)]
    pub transaction_key: Option<String>,
}

/// Ends a refund left pending (its outcome unknown, `REFUND_UNRESOLVED`): an operator who
/// looked at the provider's books records it as made or not made. Audited.
#[utoipa::path(
    post,
    path = "/api/admin/orders/{id}/refunds/{refundId}/resolve",
    tag = "admin",
    params(
        ("id" = String, Path, description = "Order id"),
        ("refundId" = String, Path, description = "Refund id"),
    ),
    request_body = ResolveRefundRequest,
    responses(
        (status = 200, description = "The order after the refund's outcome", body = OrderDetailResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "REFUND_NOT_PENDING or ORDER_BUSY", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn resolve_refund(
    state: web::Data<HttpState>,
    admin: Admin,
    path: web::Path<(String, String)>,
    body: MaybeJson<ResolveRefundRequest>,
) -> Result<HttpResponse, ApiError> {
    let (order, refund) = path.into_inner();
    let order_id = super::orders::parse_order_id(&order)?;
    let refund_id = refund.parse().map_err(|_| ApiError::not_found("refund"))?;
    let unprocessable =
        |field: &str, message: String| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, message);
    let body =
        body.0.ok_or_else(|| unprocessable("outcome", "a body {outcome, reason} is required".into()))?;
    let checked = |field: &'static str, value: &str, limit| {
        text::check(field, value, limit).map_err(|e| unprocessable(e.field(), e.message()))
    };
    checked("reason", &body.reason, text::limits::REASON)?;
    if body.reason.trim().is_empty() {
        return Err(unprocessable("reason", "an operator's decision needs a reason".into()));
    }
    if let Some(key) = &body.transaction_key {
        checked("transactionKey", key, 200)?;
    }
    let decision = match (body.outcome.as_str(), body.transaction_key) {
        ("MADE", transaction_key) => OperatorDecision::Made { transaction_key },
        ("NOT_MADE", None) => OperatorDecision::NotMade,
        ("NOT_MADE", Some(_)) => {
            return Err(unprocessable("transactionKey", "a refund not made has no transaction key".into()));
        }
        _ => return Err(unprocessable("outcome", "must be MADE or NOT_MADE".into())),
    };
    let record =
        state.refunds.resolve_by_operator(&admin.0, order_id, refund_id, decision, body.reason).await?;
    Ok(HttpResponse::Ok().json(OrderDetailResponse::from(&record)))
}
