//! Operator endpoints for notification events (role `admin`): list, run due retries now,
//! reprocess one, ignore one. Every action is audited with the subject and reason.

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
use crate::domain::ids::NotificationId;
use crate::domain::notification::{Notification, NotificationStatus};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NotificationListQuery {
    /// e.g. `RETRY_SCHEDULED`, `MANUAL_INTERVENTION_REQUIRED`, `FAILED`
    status: Option<String>,
    /// 1 to 100, default 50.
    limit: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationEventResponse {
    pub id: String,
    pub order_id: String,
    pub status: &'static str,
    pub policy: Option<&'static str>,
    pub attempts: i32,
    pub next_attempt_at: Option<String>,
    pub last_error: Option<String>,
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationListResponse {
    pub items: Vec<NotificationEventResponse>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryDueResponse {
    pub claimed: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub skipped: usize,
    pub processed_ids: Vec<String>,
}

impl From<&Notification> for NotificationEventResponse {
    fn from(n: &Notification) -> Self {
        NotificationEventResponse {
            id: n.id.to_string(),
            order_id: n.order_id.to_string(),
            status: n.status.as_str(),
            policy: n.handling(),
            attempts: n.attempts,
            next_attempt_at: n.next_attempt_at.map(timestamp),
            last_error: n.last_error.clone(),
            updated_at: timestamp(n.updated_at),
        }
    }
}

fn unprocessable(field: &str, message: &str) -> ApiError {
    ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, message)
}

fn notification_id(text: &str) -> Result<NotificationId, ApiError> {
    text.parse().map_err(|_| ApiError::not_found("notification event"))
}

/// Notification events, most recently changed first.
#[utoipa::path(
    get,
    path = "/api/admin/notification-events",
    tag = "admin",
    params(NotificationListQuery),
    responses(
        (status = 200, body = NotificationListResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    state: web::Data<HttpState>,
    admin: Admin,
    query: web::Query<NotificationListQuery>,
) -> Result<HttpResponse, ApiError> {
    list_as(&state, &admin.0, query.into_inner()).await
}

/// The notification events `actor` may see: every merchant's, or the merchant's it acts in.
pub(crate) async fn list_as(
    state: &HttpState,
    actor: &Actor,
    q: NotificationListQuery,
) -> Result<HttpResponse, ApiError> {
    let status = query_param("status", q.status, 64)?
        .map(|s| {
            NotificationStatus::parse(&s).ok_or_else(|| unprocessable("status", "not a notification status"))
        })
        .transpose()?;
    let limit = query_param("limit", q.limit, 16)?
        .map(|l| l.parse::<u32>().map_err(|_| unprocessable("limit", "must be a number between 1 and 100")))
        .transpose()?
        .unwrap_or(50);
    let items = state.notifications.list(actor, status, limit).await?;
    Ok(HttpResponse::Ok().json(NotificationListResponse {
        items: items.iter().map(NotificationEventResponse::from).collect(),
    }))
}

/// Attempts every due retry now (what the scheduler does each interval).
#[utoipa::path(
    post,
    path = "/api/admin/notification-events/retry-due",
    tag = "admin",
    responses(
        (status = 200, body = RetryDueResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn retry_due(state: web::Data<HttpState>, admin: Admin) -> Result<HttpResponse, ApiError> {
    let report = state.notifications.retry_due(&admin.0).await?;
    Ok(HttpResponse::Ok().json(RetryDueResponse {
        claimed: report.claimed,
        succeeded: report.succeeded,
        failed: report.failed,
        skipped: report.skipped,
        processed_ids: report.processed_ids.iter().map(|id| id.to_string()).collect(),
    }))
}

/// Re-sends one notification now; a success completes its order.
#[utoipa::path(
    post,
    path = "/api/admin/notification-events/{id}/reprocess",
    tag = "admin",
    params(("id" = String, Path, description = "Notification event id")),
    request_body(content = Option<ReasonRequest>, description = "Optional reason, recorded in the audit log"),
    responses(
        (status = 200, description = "The order after the attempt", body = OrderDetailResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "NOTIFICATION_NOT_REPROCESSABLE or NOTIFICATION_BUSY", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn reprocess(
    state: web::Data<HttpState>,
    admin: Admin,
    path: web::Path<String>,
    body: MaybeJson<ReasonRequest>,
) -> Result<HttpResponse, ApiError> {
    repair_as(&state, &admin.0, &path, body, Repair::Reprocess).await
}

/// What an operator does to a notification.
pub(crate) enum Repair {
    Reprocess,
    Ignore,
}

/// `actor` reprocesses or ignores notification `raw`.
pub(crate) async fn repair_as(
    state: &HttpState,
    actor: &Actor,
    raw: &str,
    body: MaybeJson<ReasonRequest>,
    repair: Repair,
) -> Result<HttpResponse, ApiError> {
    let id = notification_id(raw)?;
    let reason = ReasonRequest::of(body)?;
    let record = match repair {
        Repair::Reprocess => state.notifications.reprocess(actor, id, reason).await?,
        Repair::Ignore => state.notifications.ignore(actor, id, reason).await?,
    };
    Ok(HttpResponse::Ok().json(OrderDetailResponse::from(&record)))
}

/// Gives a notification up (`IGNORED`); an order that failed only for it is `COMPLETED`.
#[utoipa::path(
    post,
    path = "/api/admin/notification-events/{id}/ignore",
    tag = "admin",
    params(("id" = String, Path, description = "Notification event id")),
    request_body(content = Option<ReasonRequest>, description = "Optional reason, recorded in the audit log"),
    responses(
        (status = 200, description = "The order after the change", body = OrderDetailResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "NOTIFICATION_NOT_IGNORABLE", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn ignore(
    state: web::Data<HttpState>,
    admin: Admin,
    path: web::Path<String>,
    body: MaybeJson<ReasonRequest>,
) -> Result<HttpResponse, ApiError> {
    repair_as(&state, &admin.0, &path, body, Repair::Ignore).await
}
