//! Operator endpoints for settlements that could not be delivered (role `admin`; docs/spec.md
//! §13): list them, retry one now, or mark one settled. Every action is audited with the
//! subject and reason.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Admin;
use super::body::MaybeJson;
use super::dto::{OrderDetailResponse, ReasonRequest};
use super::problem::{ApiError, Problem};
use super::{HttpState, query_param};
use crate::application::Actor;
use crate::application::envelopes::timestamp;
use crate::application::ports::ListedSettlement;
use crate::domain::ids::SettlementId;
use crate::domain::settlement::SettlementStatus;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SettlementListQuery {
    /// e.g. `AWAITING_OPERATOR`, `RETRY_SCHEDULED`
    status: Option<String>,
    /// 1 to 100, default 50.
    limit: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettlementResponse {
    pub id: String,
    pub order_id: String,
    /// The order's number (docs/spec.md §3), the one people quote.
    pub order_number: i64,
    /// `REQUESTED` | `RETRY_SCHEDULED` | `AWAITING_OPERATOR` | `SUCCEEDED` | `FAILED`
    pub status: &'static str,
    pub amount: i64,
    pub currency: String,
    pub attempts: i32,
    pub next_attempt_at: Option<String>,
    pub last_error: Option<String>,
    pub failure_reason: Option<String>,
    pub updated_at: String,
}

impl From<&ListedSettlement> for SettlementResponse {
    fn from(listed: &ListedSettlement) -> Self {
        let s = &listed.settlement;
        SettlementResponse {
            id: s.id.to_string(),
            order_id: s.order_id.to_string(),
            order_number: listed.order_number,
            status: s.status.as_str(),
            amount: s.amount.minor(),
            currency: s.amount.currency().as_str().to_owned(),
            attempts: s.attempts,
            next_attempt_at: s.next_attempt_at.map(timestamp),
            last_error: s.last_error.clone(),
            failure_reason: s.failure_reason.clone(),
            updated_at: timestamp(s.updated_at),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettlementListResponse {
    pub items: Vec<SettlementResponse>,
}

fn unprocessable(field: &str, message: &str) -> ApiError {
    ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, message)
}

fn settlement_id(text: &str) -> Result<SettlementId, ApiError> {
    text.parse().map_err(|_| ApiError::not_found("settlement"))
}

/// Settlements, most recently changed first.
#[utoipa::path(
    get,
    path = "/api/admin/settlements",
    tag = "admin",
    params(SettlementListQuery),
    responses(
        (status = 200, body = SettlementListResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    state: web::Data<HttpState>,
    admin: Admin,
    query: web::Query<SettlementListQuery>,
) -> Result<HttpResponse, ApiError> {
    list_as(&state, &admin.0, query.into_inner()).await
}

/// The settlements `actor` may see: every merchant's, or the merchant's it acts in.
pub(crate) async fn list_as(
    state: &HttpState,
    actor: &Actor,
    q: SettlementListQuery,
) -> Result<HttpResponse, ApiError> {
    let status = query_param("status", q.status, 64)?
        .map(|s| {
            SettlementStatus::parse(&s).ok_or_else(|| unprocessable("status", "not a settlement status"))
        })
        .transpose()?;
    let limit = query_param("limit", q.limit, 16)?
        .map(|l| {
            l.parse::<u32>()
                .ok()
                .filter(|l| (1..=100).contains(l))
                .ok_or_else(|| unprocessable("limit", "must be a number between 1 and 100"))
        })
        .transpose()?
        .unwrap_or(50);
    let items = state.settlements.list(actor, status, limit).await?;
    Ok(HttpResponse::Ok()
        .json(SettlementListResponse { items: items.iter().map(SettlementResponse::from).collect() }))
}

/// One settlement: its state, attempts and last error (the order page's settlement).
#[utoipa::path(
    get,
    path = "/api/admin/settlements/{id}",
    tag = "admin",
    params(("id" = String, Path, description = "Settlement id")),
    responses(
        (status = 200, body = SettlementResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn get(
    state: web::Data<HttpState>,
    _admin: Admin,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let listed = state.settlements.get(settlement_id(&path)?).await?;
    Ok(HttpResponse::Ok().json(SettlementResponse::from(&listed)))
}

/// Tries a waiting settlement again now (`RETRY_SCHEDULED` or `AWAITING_OPERATOR`), under its
/// own id; the saga goes on from its answer.
#[utoipa::path(
    post,
    path = "/api/admin/settlements/{id}/retry",
    tag = "admin",
    params(("id" = String, Path, description = "Settlement id")),
    request_body(content = Option<ReasonRequest>, description = "Optional reason, recorded in the audit log"),
    responses(
        (status = 200, description = "The order after the attempt", body = OrderDetailResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "SETTLEMENT_NOT_WAITING or ORDER_BUSY", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn retry(
    state: web::Data<HttpState>,
    admin: Admin,
    path: web::Path<String>,
    body: MaybeJson<ReasonRequest>,
) -> Result<HttpResponse, ApiError> {
    retry_as(&state, &admin.0, &path, body).await
}

/// `actor`'s retry of settlement `raw`.
pub(crate) async fn retry_as(
    state: &HttpState,
    actor: &Actor,
    raw: &str,
    body: MaybeJson<ReasonRequest>,
) -> Result<HttpResponse, ApiError> {
    let id = settlement_id(raw)?;
    let reason = ReasonRequest::of(body)?.unwrap_or_else(|| "retried by an operator".into());
    let record = state.settlements.retry(actor, id, reason).await?;
    Ok(HttpResponse::Ok().json(OrderDetailResponse::from(&record)))
}

/// Marks a waiting settlement settled (the accounting system has it): the order goes on to
/// its notification.
#[utoipa::path(
    post,
    path = "/api/admin/settlements/{id}/mark-settled",
    tag = "admin",
    params(("id" = String, Path, description = "Settlement id")),
    request_body(content = ReasonRequest, description = "Why: recorded in the audit log (required)"),
    responses(
        (status = 200, description = "The order after the change", body = OrderDetailResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "SETTLEMENT_NOT_WAITING or ORDER_BUSY", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "No reason", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn mark_settled(
    state: web::Data<HttpState>,
    admin: Admin,
    path: web::Path<String>,
    body: MaybeJson<ReasonRequest>,
) -> Result<HttpResponse, ApiError> {
    mark_settled_as(&state, &admin.0, &path, body).await
}

/// `actor` marks settlement `raw` settled.
pub(crate) async fn mark_settled_as(
    state: &HttpState,
    actor: &Actor,
    raw: &str,
    body: MaybeJson<ReasonRequest>,
) -> Result<HttpResponse, ApiError> {
    let id = settlement_id(raw)?;
    let reason = ReasonRequest::of(body)?
        .filter(|r| !r.trim().is_empty())
        .ok_or_else(|| unprocessable("reason", "is required: say how it was settled"))?;
    let record = state.settlements.mark_settled(actor, id, &reason).await?;
    Ok(HttpResponse::Ok().json(OrderDetailResponse::from(&record)))
}
