//! `X-Correlation-Id`: taken from the request (when sane) or generated, put on every
//! response, into the request's log span and, through the use cases, into outbox rows.

use std::future::{Ready, ready};

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use tracing::Instrument;

use super::HttpState;
use crate::application::meter::Meter;

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
    // The method as a label or span name is one of the standard ones or `_OTHER`: a client
    // can send any token there (`XABCDEFGHIJ`, a thousand characters), and each distinct
    // value would be a new series in `/metrics`.
    let method = method_label(req.method());
    let span = tracing::info_span!(
        "http",
        otel.name = %format!("{method} {}", req.path()),
        correlation_id = %id,
        method,
        path = %req.path(),
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    // An incoming W3C `traceparent` is continued; otherwise this request starts a trace.
    let traceparent = req.headers().get("traceparent").and_then(|v| v.to_str().ok());
    crate::telemetry::continue_trace(&span, traceparent);
    let started = std::time::Instant::now();
    let meter = req.app_data::<web::Data<HttpState>>().map(|s| s.metrics.meter.clone());
    let result = next.call(req).instrument(span.clone()).await;
    let _enter = span.enter();
    let elapsed = started.elapsed();
    match result {
        Ok(mut response) => {
            let status = response.status().as_u16();
            tracing::info!(status, elapsed_ms = elapsed.as_millis() as u64, "request");
            if let Some(meter) = meter {
                // The route's template (`/api/orders/{id}`), never the raw path: one series
                // per route, whatever ids and probes arrive.
                let route = response.request().match_pattern().unwrap_or_else(|| "unmatched".into());
                // The span is named by the route too, not the raw path.
                span.record("otel.name", format!("{method} {route}"));
                record_request(&meter, method, route, status, elapsed);
            }
            if let Ok(value) = HeaderValue::from_str(&id) {
                response.headers_mut().insert(HeaderName::from_static(HEADER), value);
            }
            Ok(response)
        }
        Err(err) => {
            if let Some(meter) = meter {
                let status = err.as_response_error().status_code().as_u16();
                record_request(&meter, method, "unmatched".into(), status, elapsed);
            }
            Err(err)
        }
    }
}

/// The request method as a label value: the methods of RFC 9110 and PATCH by name, any
/// other `_OTHER` (OpenTelemetry's convention for `http.request.method`).
fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "_OTHER",
    }
}

/// RED metrics of one request: `http_requests_total{method,route,status}` and
/// `http_request_duration_seconds{method,route}`. Every label is bounded: the method by
/// [`method_label`], the route by the app's route table, the status by HTTP.
fn record_request(
    meter: &Meter,
    method: &'static str,
    route: String,
    status: u16,
    elapsed: std::time::Duration,
) {
    meter.record(|| {
        metrics::counter!("http_requests_total", "method" => method, "route" => route.clone(), "status" => status.to_string())
            .increment(1);
        metrics::histogram!("http_request_duration_seconds", "method" => method, "route" => route)
            .record(elapsed.as_secs_f64());
    });
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
