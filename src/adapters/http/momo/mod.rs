//! The meetup platform's payment endpoints (`http.dialects.momo`, docs/spec.md §14,
//! docs/dialects.md): `momo-spring-project/momo-backend`'s `PaymentController` paths, its
//! envelope, tokens and texts on a listener of their own, over the same use cases.
//!
//! - [`envelope`]: its `{success, message, data, timestamp}` answers and its texts.
//! - [`auth`]: its access tokens, from its cookie or the bearer header.
//! - [`payments`]: `/payments/me`, `/payments/{id}/pg`, `/payments/{id}/refund`.
//! - [`key_in`]: `/payments/test/keyin`, a meeting's fee charged to a keyed-in card.

pub mod auth;
pub mod doc;
pub mod envelope;
pub mod key_in;
pub mod payments;
pub mod schema;

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpResponse, web};

use self::auth::{FromCookie, MomoKeys};
use self::envelope::text;
use crate::adapters::Secret;

/// The meetup platform's payment endpoints (docs/spec.md §14, docs/dialects.md).
#[derive(Debug, Clone)]
pub struct MomoDialectSettings {
    pub bind: SocketAddr,
    /// The HMAC key of its access tokens (HS256), UTF-8 bytes, at least 32 (`jwt_secret`).
    pub jwt_secret: Secret,
}

/// What the dialect's handlers share: its key and the platform's zone.
pub struct MomoApi {
    pub keys: MomoKeys,
    /// `meetings.timezone`: the zone of its `LocalDateTime`s.
    pub zone: chrono_tz::Tz,
    /// `meetings.merchant`, found when the service started (`None`: `DEFAULT`): the
    /// members act in it, as the meeting service's orders are its.
    pub merchant: Option<crate::domain::ids::MerchantId>,
}

impl MomoApi {
    /// # Errors
    /// Its key cannot be made from `jwt_secret`.
    pub fn new(
        settings: &MomoDialectSettings,
        zone: chrono_tz::Tz,
        merchant: Option<crate::domain::ids::MerchantId>,
    ) -> Result<Arc<Self>, crate::adapters::SetupError> {
        let keys = MomoKeys::new(settings.jwt_secret.expose().as_bytes())?;
        Ok(Arc::new(MomoApi { keys, zone, merchant }))
    }
}

/// Middleware: a token read from the `Authorization` cookie is handed back as its filter
/// does — the cookie cleared (`Max-Age=0`), the token in the `Authorization` header.
pub async fn cookie_echo(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    // The request is not held across the call: routing needs it unshared.
    let mut res = next.call(req).await?;
    let from_cookie = res.request().extensions().get::<FromCookie>().cloned();
    if let Some(FromCookie(token)) = from_cookie {
        let headers = res.headers_mut();
        headers.append(header::SET_COOKIE, HeaderValue::from_static("Authorization=; Path=/; Max-Age=0"));
        if let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) {
            headers.insert(header::AUTHORIZATION, value);
        }
    }
    Ok(res)
}

/// A body that is JSON by its `Content-Type` (`application/json`, or a `+json` type): any
/// other, or none, is `415` in its envelope — never parsed as JSON, so that a form or
/// `text/plain` post another site can send without asking cannot move money.
///
/// # Errors
/// The `415`.
pub(super) fn json_body(api: &MomoApi, req: &actix_web::HttpRequest) -> Result<(), envelope::MomoError> {
    let essence = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
    match essence {
        Some(t) if t == "application/json" || (t.starts_with("application/") && t.ends_with("+json")) => {
            Ok(())
        }
        _ => Err(api.fail(StatusCode::UNSUPPORTED_MEDIA_TYPE, text::MEDIA_TYPE)),
    }
}

/// Middleware: the whole body read before the handler, within 10 s and 64 KiB (docs/spec.md
/// §5), each failure in its envelope — a body that stops arriving holds no connection.
pub async fn bounded_body(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    use super::body::BodyError;
    if let Err(e) = super::body::buffer(&mut req).await {
        let (status, message) = match e {
            BodyError::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, text::TOO_LARGE),
            BodyError::TimedOut => (StatusCode::REQUEST_TIMEOUT, text::TOO_SLOW),
            BodyError::Broken(_) => (StatusCode::BAD_REQUEST, text::BAD_INPUT),
        };
        let answer = envelope::MomoError::new(zone_of(req.request()), status, message).response();
        return Ok(req.into_response(answer));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

fn zone_of(req: &actix_web::HttpRequest) -> chrono_tz::Tz {
    req.app_data::<web::Data<MomoApi>>().map_or(chrono_tz::Tz::UTC, |api| api.zone)
}

/// A path it serves, answering another method with its `405` text.
fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    super::refusing_other_methods(path, allow, |req, _| {
        envelope::MomoError::new(zone_of(req), StatusCode::METHOD_NOT_ALLOWED, text::METHOD).response()
    })
}

/// Every route of the dialect; bad bodies and queries in its envelope.
pub fn routes(cfg: &mut web::ServiceConfig) {
    let bad = |req: &actix_web::HttpRequest| -> actix_web::Error {
        envelope::MomoError::new(zone_of(req), StatusCode::BAD_REQUEST, text::BAD_INPUT).into()
    };
    cfg.app_data(web::QueryConfig::default().error_handler(move |_, req| bad(req)))
        .app_data(web::PayloadConfig::default().limit(64 * 1024))
        .service(resource("/payments/test/keyin", "POST").route(web::post().to(key_in::key_in)))
        .service(resource("/payments/me", "GET").route(web::get().to(payments::me)))
        .service(resource("/payments/{paymentId}/pg", "GET").route(web::get().to(payments::pg)))
        .service(resource("/payments/{paymentId}/refund", "POST").route(web::post().to(payments::refund)));
}

/// Anything else: `401` without a token (everything there needs one), else `404` in its
/// envelope (the platform: 500 from its catch-all).
pub async fn not_found(req: actix_web::HttpRequest) -> HttpResponse {
    if let Err(err) = auth::member_of(&req) {
        return err.response();
    }
    envelope::MomoError::new(zone_of(&req), StatusCode::NOT_FOUND, text::NOT_FOUND).response()
}
