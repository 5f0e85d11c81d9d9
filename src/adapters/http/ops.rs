//! Unauthenticated operations endpoints: liveness, readiness, the OpenAPI document and the
//! docs page (Swagger UI vendored into the binary: no asset is downloaded at build or run time).

use std::sync::{Arc, LazyLock};

use actix_web::{HttpResponse, ResponseError, http::header, web};
use serde_json::json;
use utoipa::OpenApi;
use utoipa_swagger_ui::Config;

use super::HttpState;
use crate::application::Actor;
use crate::domain::settlement::SettlementStatus;

/// The process is up.
#[utoipa::path(get, path = "/health/live", tag = "ops", responses((status = 200, description = "Alive")))]
pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "UP" }))
}

/// The database and broker answer.
#[utoipa::path(
    get,
    path = "/health/ready",
    tag = "ops",
    responses((status = 200, description = "Ready"), (status = 503, description = "A dependency is down"))
)]
pub async fn ready(state: web::Data<HttpState>) -> HttpResponse {
    let checked = state.readiness.check(state.role).await;
    let ready = checked.ready;
    let checks: serde_json::Map<String, serde_json::Value> = checked
        .checks
        .into_iter()
        .map(|(name, ok)| (name.to_owned(), json!(if ok { "UP" } else { "DOWN" })))
        .collect();
    let mut body = json!({ "status": if ready { "UP" } else { "DOWN" }, "checks": checks });
    if !checked.warnings.is_empty() {
        body["warnings"] = json!(checked.warnings);
    }
    if ready { HttpResponse::Ok().json(body) } else { HttpResponse::ServiceUnavailable().json(body) }
}

/// Prometheus text: orders by status, outbox rows by status and backlog age, publish,
/// confirm, retry and dead-letter counters, commit-to-confirm latency, and what waits for
/// an operator (`operator_attention{kind}`, `ledger_findings{kind}`: the findings of the
/// latest day reconciled against the provider's ledger).
#[utoipa::path(get, path = "/metrics", tag = "ops", responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(state: web::Data<HttpState>) -> HttpResponse {
    let meter = &state.metrics.meter;
    // Gauges that describe stored state are read at scrape time.
    if let Ok(counts) = state.queries.count_by_status().await {
        meter.record(|| {
            for (status, n) in counts {
                metrics::gauge!("orders", "status" => status.as_str()).set(n as f64);
            }
        });
    }
    if let Ok(stats) = state.outbox_admin.stats_for_metrics().await {
        let now = chrono::Utc::now();
        let age = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0)
        };
        meter.record(|| {
            for (status, n) in &stats.by_status {
                metrics::gauge!("outbox_rows", "status" => status.as_str()).set(*n as f64);
            }
            metrics::gauge!("outbox_oldest_ready_age_seconds").set(age(stats.oldest_ready_created_at));
            metrics::gauge!("outbox_oldest_claim_age_seconds").set(age(stats.oldest_claim_at));
            metrics::gauge!("outbox_blocked_aggregates").set(stats.blocked_aggregates as f64);
            for (lane, at) in &stats.oldest_ready_by_lane {
                metrics::gauge!("outbox_lane_oldest_ready_age_seconds", "lane" => lane.to_string())
                    .set(age(*at));
            }
            for (event_type, n) in &stats.dead_letters_by_type {
                metrics::gauge!("outbox_dead_letters", "event_type" => event_type.clone()).set(*n as f64);
            }
        });
    }
    if let Ok(attention) = state.recovery.needs_operator().await {
        meter.record(|| {
            for (kind, n) in attention {
                metrics::gauge!("operator_attention", "kind" => kind).set(n as f64);
            }
        });
    }
    // Settlements whose attempts ran out (docs/spec.md §13), counted up to 1 000.
    if let Ok(waiting) = state
        .settlements
        .list(&Actor::system("metrics"), Some(SettlementStatus::AwaitingOperator), 1000)
        .await
    {
        meter.record(|| {
            metrics::gauge!("operator_attention", "kind" => "settlement_awaiting_operator")
                .set(waiting.len() as f64);
        });
    }
    if let Ok(counts) = state.ledger.latest_counts().await {
        meter.record(|| {
            for (kind, n) in counts {
                metrics::gauge!("ledger_findings", "kind" => kind.as_str()).set(n as f64);
            }
        });
    }
    let body = state.metrics.handle.render();
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(body)
}

pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok().json(super::ApiDoc::openapi())
}

/// The commerce dialect's document (docs/dialects.md): its paths collide with ours, so it
/// is a document of its own.
pub async fn commerce_openapi() -> HttpResponse {
    use utoipa::OpenApi;
    HttpResponse::Ok().json(super::commerce::doc::CommerceApiDoc::openapi())
}

/// The momo dialect's document (docs/dialects.md).
pub async fn momo_openapi() -> HttpResponse {
    use utoipa::OpenApi;
    HttpResponse::Ok().json(super::momo::doc::MomoApiDoc::openapi())
}

/// `/docs` is a directory: Swagger UI's page loads its assets relative to `/docs/`.
pub async fn docs_root() -> HttpResponse {
    HttpResponse::PermanentRedirect().insert_header((header::LOCATION, "/docs/")).finish()
}

/// Swagger UI, vendored into the binary: operations grouped by tag (customer routes first),
/// "Authorize" for a bearer token, "Try it out" on every operation.
pub async fn docs(path: web::Path<String>) -> HttpResponse {
    static CONFIG: LazyLock<Arc<Config<'static>>> = LazyLock::new(|| {
        Arc::new(
            Config::new(["/openapi.json"])
                .try_it_out_enabled(true)
                .persist_authorization(true)
                .display_request_duration(true)
                .deep_linking(true),
        )
    });
    match utoipa_swagger_ui::serve(&path, CONFIG.clone()) {
        Ok(Some(file)) => HttpResponse::Ok()
            .content_type(file.content_type)
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .body(file.bytes.into_owned()),
        Ok(None) => super::problem::ApiError::not_found("resource").error_response(),
        Err(e) => {
            tracing::error!(error = %e, "the docs page cannot be rendered");
            super::problem::ApiError::new(
                actix_web::http::StatusCode::INTERNAL_SERVER_ERROR,
                "DOCS_UNAVAILABLE",
                "the docs page cannot be rendered",
            )
            .error_response()
        }
    }
}
