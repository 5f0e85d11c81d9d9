//! The commerce backend's HTTP API (`http.dialects.commerce`, docs/spec.md §14,
//! docs/dialects.md): `Gseobi/commerce-orchestration-backend`'s paths, envelope, tokens and
//! texts on a listener of their own, over the same use cases as the native API.
//!
//! - [`envelope`]: its `{success, code, message, data}` answers and its error codes.
//! - [`auth`]: its demo tokens (HMAC over `jwt_secret`, `roles`), minted and verified.
//! - `X-Trace-Id` on every answer ([`trace`]), taken as the request's correlation id.

pub mod admin;
pub mod auth;
pub mod doc;
pub mod envelope;
pub mod orders;
pub mod schema;
pub mod view;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpResponse, web};
use serde::Deserialize;

use self::auth::{CommerceKeys, Roles};
use self::envelope::{CommerceError, ok};
use super::correlation::CorrelationId;
use crate::adapters::Secret;

/// The header the platform traces a request by (its `RequestTraceFilter`).
pub const TRACE_HEADER: &str = "x-trace-id";

/// The commerce backend's HTTP API (docs/spec.md §14, docs/dialects.md).
#[derive(Debug, Clone)]
pub struct CommerceDialectSettings {
    pub bind: SocketAddr,
    /// The HMAC key of its bearer tokens, UTF-8 bytes, at least 32 (`jwt_secret`).
    pub jwt_secret: Secret,
    /// Whether `POST /api/auth/token` mints tokens (only with `payment.provider = mock`).
    pub demo_token: bool,
    pub token_validity: Duration,
    pub issuer: String,
    /// The code of the merchant whose orders the dialect's are (docs/spec.md §15).
    pub merchant: String,
}

/// What the dialect's handlers share: its settings and keys.
pub struct CommerceApi {
    pub settings: CommerceDialectSettings,
    pub keys: CommerceKeys,
    /// `settings.merchant`, found when the service started (`None`: `DEFAULT`).
    pub merchant: Option<crate::domain::ids::MerchantId>,
}

impl CommerceApi {
    /// # Errors
    /// Its key cannot be made from `jwt_secret`.
    pub fn new(
        settings: CommerceDialectSettings,
        merchant: Option<crate::domain::ids::MerchantId>,
    ) -> Result<Arc<Self>, crate::adapters::SetupError> {
        let keys = CommerceKeys::new(&settings)?;
        Ok(Arc::new(CommerceApi { settings, keys, merchant }))
    }
}

/// A trace id a client sent that we echo: as the platform, any non-blank value; bounded and
/// printable here, so that it can be a header again and a correlation id.
fn echoable(value: &str) -> bool {
    !value.trim().is_empty() && value.len() <= 128 && value.bytes().all(|b| b.is_ascii_graphic())
}

/// Middleware: the request's `X-Trace-Id` (echoed, else a new UUID) on its answer, and as
/// its correlation id (outbox rows, logs).
/// Middleware: the whole body read before the handler, within 10 s and 64 KiB (docs/spec.md
/// §5), each failure in its envelope — a body that stops arriving holds no connection.
pub async fn bounded_body(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    use super::body::BodyError;
    if let Err(e) = super::body::buffer(&mut req).await {
        let answer = match e {
            BodyError::TooLarge => CommerceError::coded(
                StatusCode::PAYLOAD_TOO_LARGE,
                "PAYLOAD_TOO_LARGE",
                "요청 본문이 너무 큽니다. (최대 64 KiB)",
            ),
            BodyError::TimedOut => CommerceError::coded(
                StatusCode::REQUEST_TIMEOUT,
                "REQUEST_TIMEOUT",
                "요청 본문이 제시간에 도착하지 않았습니다.",
            ),
            BodyError::Broken(_) => CommerceError::malformed(),
        };
        return Ok(req.into_response(answer.response()));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

pub async fn trace(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = req
        .headers()
        .get(TRACE_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| echoable(v))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    req.extensions_mut().insert(CorrelationId(id.clone()));
    let mut res = next.call(req).await?;
    if let Ok(value) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(HeaderName::from_static(TRACE_HEADER), value);
    }
    Ok(res)
}

/// A path the platform serves, answering a method it does not serve with `405` in its
/// envelope (the platform: 500; docs/dialects.md).
fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    super::refusing_other_methods(path, allow, |_, _| CommerceError::method_not_allowed().response())
}

/// Every route of the dialect, its bodies' and paths' errors in its envelope.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.app_data(
        web::JsonConfig::default().limit(64 * 1024).error_handler(|_, _| CommerceError::malformed().into()),
    )
    .app_data(web::PathConfig::default().error_handler(|_, _| CommerceError::malformed().into()))
    .service(resource("/actuator/health", "GET").route(web::get().to(health)))
    .service(resource("/api/auth/token", "POST").route(web::post().to(token)))
    .service(resource("/api/orders", "POST").route(web::post().to(orders::create)))
    .service(resource("/api/orders/{orderId}", "GET").route(web::get().to(orders::get)))
    .service(resource("/api/orders/{orderId}/flow", "GET").route(web::get().to(orders::flow)))
    .service(resource("/api/orders/{orderId}/orchestrate", "POST").route(web::post().to(orders::orchestrate)))
    .service(
        resource("/api/admin/notification-events/retry-due", "POST").route(web::post().to(admin::retry_due)),
    )
    .service(
        resource("/api/admin/notification-events/{notificationEventId}/retry", "POST")
            .route(web::post().to(admin::retry_notification)),
    )
    .service(
        resource("/api/admin/notification-events/{notificationEventId}/ignore", "POST")
            .route(web::post().to(admin::ignore_notification)),
    )
    .service(
        resource("/api/admin/outbox-events/{outboxEventId}/retry", "POST")
            .route(web::post().to(admin::retry_outbox)),
    );
}

/// Anything the platform does not serve: `401` without a token under `/api/` (its security
/// asks for one first), else `404` in its envelope (the platform: 500).
pub async fn not_found(req: actix_web::HttpRequest) -> HttpResponse {
    if req.path().starts_with("/api/")
        && let Err(err) = auth::caller_of(&req)
    {
        return err.response();
    }
    CommerceError::not_found().response()
}

/// `GET /actuator/health`: Spring Boot's answer shape, outside the envelope.
#[utoipa::path(
    get,
    path = "/actuator/health",
    tag = "commerce",
    responses(
        (status = 200, body = crate::adapters::http::commerce::schema::Health),
        (status = 503, description = "DOWN", body = crate::adapters::http::commerce::schema::Health),
    )
)]
async fn health(state: web::Data<super::HttpState>) -> HttpResponse {
    let up = state.readiness.check(state.role).await.ready;
    let status = if up { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    HttpResponse::build(status).json(serde_json::json!({ "status": if up { "UP" } else { "DOWN" } }))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TokenRequest {
    username: Option<String>,
    roles: Option<Vec<String>>,
}

/// `POST /api/auth/token`: a demo token, only with `demo_token = true` (else 404, as a path
/// the platform serves only in demo mode).
#[utoipa::path(
    post,
    path = "/api/auth/token",
    tag = "commerce",
    request_body = crate::adapters::http::commerce::schema::TokenRequest,
    responses(
        (status = 200, description = "data: {tokenType, accessToken, roles}", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 400, description = "BAD_REQUEST: the first invalid field's message", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 401, description = "UNAUTHORIZED: demo tokens are off and no valid token was sent", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 404, description = "NOT_FOUND: demo tokens are off (with a valid token)", body = crate::adapters::http::commerce::schema::Envelope),
    )
)]
async fn token(
    api: web::Data<CommerceApi>,
    req: actix_web::HttpRequest,
    body: web::Json<TokenRequest>,
) -> Result<HttpResponse, CommerceError> {
    if !api.settings.demo_token {
        // Not served: like any path under `/api/` it has none, so a token comes first
        // (401 without one, as the platform's own test expects), then 404.
        auth::caller_of(&req)?;
        return Err(CommerceError::not_found());
    }
    let body = body.into_inner();
    let username = body
        .username
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| CommerceError::bad_request("username은 필수입니다."))?;
    if username.chars().count() > 200 || username.chars().any(char::is_control) {
        return Err(CommerceError::bad_request("username은 200자 이하의 문자여야 합니다."));
    }
    let roles: Roles = match body.roles {
        Some(roles) if !roles.is_empty() => roles,
        _ => vec!["ROLE_USER".to_owned()],
    };
    let token = api.keys.mint(&username, &roles).map_err(|_| CommerceError::internal())?;
    Ok(ok(serde_json::json!({ "tokenType": "Bearer", "accessToken": token, "roles": roles })))
}
