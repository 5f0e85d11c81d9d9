//! Operator endpoints (role `admin`): the outbox's rows, stats and repairs. Each repair is
//! audited with the acting subject and the optional `reason`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Admin;
use super::body::{JsonBody, MaybeJson};
use super::dto::{OutboxEventResponse, ReasonRequest};
use super::problem::{ApiError, Problem};
use super::{HttpState, query_param};
use crate::application::envelopes::timestamp;
use crate::application::input::parse_duration;
use crate::application::outbox::Redrive;
use crate::application::ports::{OutboxFilter, OutboxStats};
use crate::domain::outbox::{FailureCode, OutboxStatus};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OutboxListQuery {
    /// `READY` | `PROCESSING` | `RETRY_WAIT` | `PUBLISHED` | `DEAD_LETTER` | `DISCARDED`
    status: Option<String>,
    /// Only events of this type (`payment.approved`).
    #[serde(rename = "eventType")]
    #[param(rename = "eventType")]
    event_type: Option<String>,
    /// Only events that failed with this code (`UNROUTABLE`, `NACKED`, ...).
    #[serde(rename = "failureCode")]
    #[param(rename = "failureCode")]
    failure_code: Option<String>,
    /// Only dead letters older than this: a duration (`10m`) or an RFC 3339 instant.
    #[serde(rename = "olderThan")]
    #[param(rename = "olderThan")]
    older_than: Option<String>,
    /// 1 to 100, default 50.
    limit: Option<String>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutboxPageResponse {
    pub items: Vec<OutboxEventResponse>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutboxStatsResponse {
    /// Rows per status, every status present.
    pub by_status: std::collections::BTreeMap<String, i64>,
    pub oldest_ready_created_at: Option<String>,
    /// Age of the oldest `READY` row: how far behind the relay is.
    pub oldest_ready_age_seconds: Option<f64>,
    /// Age of the oldest claim still `PROCESSING`.
    pub oldest_claim_age_seconds: Option<f64>,
    pub dead_letters_by_type: std::collections::BTreeMap<String, i64>,
    /// Aggregates whose later events wait behind a dead letter.
    pub blocked_aggregates: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedriveRequest {
    pub event_type: Option<String>,
    /// e.g. `UNROUTABLE`, `NACK`, `CONFIRM_TIMEOUT`
    pub failure_code: Option<String>,
    /// Only dead letters older than this: a duration (`10m`, `1h`) or an RFC 3339 instant.
    pub older_than: Option<String>,
    /// 1 to 1000.
    pub limit: u32,
    #[serde(default)]
    pub dry_run: bool,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedriveResponse {
    pub matched: usize,
    pub redriven: usize,
    pub ids: Vec<i64>,
}

fn unprocessable(field: &str, message: &str) -> ApiError {
    ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, message)
}

fn failure_code(text: &str) -> Result<FailureCode, ApiError> {
    FailureCode::parse(text).ok_or_else(|| unprocessable("failureCode", "not a failure code"))
}

/// `olderThan`: an RFC 3339 instant, or a duration back from now (`10m`).
fn older_than(text: &str) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    match text.parse::<chrono::DateTime<chrono::Utc>>() {
        Ok(at) => Ok(at),
        Err(_) => parse_duration(text)
            .ok()
            .and_then(|d| chrono::Duration::from_std(d).ok())
            .map(|d| chrono::Utc::now() - d)
            .ok_or_else(|| unprocessable("olderThan", "expected a duration like 10m or an RFC 3339 instant")),
    }
}

pub fn stats_response(stats: &OutboxStats, now: chrono::DateTime<chrono::Utc>) -> OutboxStatsResponse {
    let age = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.map(|t| ((now - t).num_milliseconds().max(0) as f64) / 1000.0)
    };
    OutboxStatsResponse {
        by_status: stats.by_status.iter().map(|(s, n)| (s.as_str().to_owned(), *n)).collect(),
        oldest_ready_created_at: stats.oldest_ready_created_at.map(timestamp),
        oldest_ready_age_seconds: age(stats.oldest_ready_created_at),
        oldest_claim_age_seconds: age(stats.oldest_claim_at),
        dead_letters_by_type: stats.dead_letters_by_type.iter().cloned().collect(),
        blocked_aggregates: stats.blocked_aggregates,
    }
}

/// Outbox rows, newest first.
#[utoipa::path(
    get,
    path = "/api/admin/outbox",
    tag = "admin",
    params(OutboxListQuery),
    responses(
        (status = 200, body = OutboxPageResponse),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not an admin", body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list_outbox(
    state: web::Data<HttpState>,
    admin: Admin,
    query: web::Query<OutboxListQuery>,
) -> Result<HttpResponse, ApiError> {
    let actor = &admin.0;
    let q = query.into_inner();
    let status = query_param("status", q.status, 64)?
        .map(|s| OutboxStatus::parse(&s).ok_or_else(|| unprocessable("status", "not an outbox status")))
        .transpose()?;
    let limit = query_param("limit", q.limit, 16)?
        .map(|l| l.parse::<u32>().map_err(|_| unprocessable("limit", "must be a number between 1 and 100")))
        .transpose()?
        .unwrap_or(50);
    let before_id = query_param("cursor", q.cursor, 64)?
        .map(|c| c.parse::<i64>().map_err(|_| unprocessable("cursor", "not a cursor from this API")))
        .transpose()?;
    let event_type = query_param("eventType", q.event_type, 128)?;
    let failure_code =
        query_param("failureCode", q.failure_code, 64)?.map(|c| failure_code(&c)).transpose()?;
    let dead_lettered_before =
        query_param("olderThan", q.older_than, 64)?.map(|t| older_than(&t)).transpose()?;
    // Filtered here, over every row: the console's filters and the redrive's dry run agree.
    let filter = OutboxFilter { status, event_type, failure_code, dead_lettered_before, before_id, limit };
    let page = state.outbox_admin.list(actor, filter).await?;
    Ok(HttpResponse::Ok().json(OutboxPageResponse {
        items: page.items.iter().map(|e| OutboxEventResponse::of(e, &state.wire)).collect(),
        next_cursor: page.next_before_id.map(|id| id.to_string()),
    }))
}

/// Counts per status, backlog age, dead letters by type, blocked aggregates.
#[utoipa::path(
    get,
    path = "/api/admin/outbox/stats",
    tag = "admin",
    responses(
        (status = 200, body = OutboxStatsResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn outbox_stats(state: web::Data<HttpState>, admin: Admin) -> Result<HttpResponse, ApiError> {
    let actor = &admin.0;
    let stats = state.outbox_admin.stats(actor).await?;
    Ok(HttpResponse::Ok().json(stats_response(&stats, chrono::Utc::now())))
}

fn outbox_id(text: &str) -> Result<i64, ApiError> {
    text.parse().map_err(|_| ApiError::not_found("outbox event"))
}

/// A dead letter republished or (`discard`) discarded, answered with the row after.
async fn resolve(
    state: &HttpState,
    admin: &Admin,
    path: &str,
    body: MaybeJson<ReasonRequest>,
    discard: bool,
) -> Result<HttpResponse, ApiError> {
    let id = outbox_id(path)?;
    let row = state.outbox_admin.resolve_dead_letter(&admin.0, id, discard, ReasonRequest::of(body)?).await?;
    Ok(HttpResponse::Ok().json(OutboxEventResponse::of(&row, &state.wire)))
}

/// A dead letter back to `READY` (retry budget reset); `409` for any other status.
#[utoipa::path(
    post,
    path = "/api/admin/outbox/{id}/republish",
    tag = "admin",
    params(("id" = i64, Path)),
    request_body(content = Option<ReasonRequest>, description = "Optional reason, recorded in the audit log"),
    responses(
        (status = 200, body = OutboxEventResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "OUTBOX_NOT_DEAD_LETTER", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn republish(
    state: web::Data<HttpState>,
    admin: Admin,
    path: web::Path<String>,
    body: MaybeJson<ReasonRequest>,
) -> Result<HttpResponse, ApiError> {
    resolve(&state, &admin, &path, body, false).await
}

/// A dead letter to `DISCARDED`: never published, the aggregate unblocked.
#[utoipa::path(
    post,
    path = "/api/admin/outbox/{id}/discard",
    tag = "admin",
    params(("id" = i64, Path)),
    request_body(content = Option<ReasonRequest>, description = "Optional reason, recorded in the audit log"),
    responses(
        (status = 200, body = OutboxEventResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "OUTBOX_NOT_DEAD_LETTER", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn discard(
    state: web::Data<HttpState>,
    admin: Admin,
    path: web::Path<String>,
    body: MaybeJson<ReasonRequest>,
) -> Result<HttpResponse, ApiError> {
    resolve(&state, &admin, &path, body, true).await
}

/// Bulk republish of dead letters matching a filter; `dryRun` only reports.
#[utoipa::path(
    post,
    path = "/api/admin/outbox/redrive",
    tag = "admin",
    request_body = RedriveRequest,
    responses(
        (status = 200, body = RedriveResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn redrive(
    state: web::Data<HttpState>,
    admin: Admin,
    body: JsonBody<RedriveRequest>,
) -> Result<HttpResponse, ApiError> {
    let actor = &admin.0;
    let r = body.value;
    let failure_code = r.failure_code.map(|c| failure_code(&c)).transpose()?;
    let older_than = r.older_than.map(|t| older_than(&t)).transpose()?;
    let report = state
        .outbox_admin
        .redrive(
            actor,
            Redrive {
                event_type: r.event_type,
                failure_code,
                older_than,
                limit: r.limit,
                dry_run: r.dry_run,
                reason: r.reason,
            },
        )
        .await?;
    Ok(HttpResponse::Ok().json(RedriveResponse {
        matched: report.matched,
        redriven: report.redriven,
        ids: report.ids,
    }))
}
