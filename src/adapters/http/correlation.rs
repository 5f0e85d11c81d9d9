//! `X-Correlation-Id`: taken from the request (when sane) or generated, put on every
//! response, into the request's log span and, through the use cases, into outbox rows.

use std::future::{Ready, ready};

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage, HttpRequest};
use tracing::Instrument;

pub const HEADER: &str = "x-correlation-id";

/// The request's correlation id.
#[derive(Debug, Clone)]
pub struct CorrelationId(pub String);

fn acceptable(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 128
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

/// Middleware: assigns the id, logs the request in a span carrying it, echoes it back.
pub async fn correlate(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = req
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| acceptable(v))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    req.extensions_mut().insert(CorrelationId(id.clone()));
    let span = tracing::info_span!(
        "http",
        correlation_id = %id,
        method = %req.method(),
        path = %req.path()
    );
    let started = std::time::Instant::now();
    let result = next.call(req).instrument(span.clone()).await;
    let _enter = span.enter();
    match result {
        Ok(mut response) => {
            let status = response.status().as_u16();
            tracing::info!(status, elapsed_ms = started.elapsed().as_millis() as u64, "request");
            if let Ok(value) = HeaderValue::from_str(&id) {
                response.headers_mut().insert(HeaderName::from_static(HEADER), value);
            }
            Ok(response)
        }
        Err(err) => Err(err),
    }
}

impl FromRequest for CorrelationId {
    type Error = actix_web::Error;
    type Future = Ready<Result<CorrelationId, actix_web::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let id = req
            .extensions()
            .get::<CorrelationId>()
            .cloned()
            .unwrap_or_else(|| CorrelationId(uuid::Uuid::new_v4().to_string()));
        ready(Ok(id))
    }
}
