//! A merchant's repairs under its path (docs/spec.md §15): its notification events and the
//! settlements waiting for an operator — read by anyone let in, repaired by an `OPERATOR`
//! member or key (or the platform operator). Another merchant's under this path is `404`.

use actix_web::{HttpResponse, web};

use crate::adapters::http::HttpState;
use crate::adapters::http::auth::{InMerchant, Reads, Then, Writes};
use crate::adapters::http::body::MaybeJson;
use crate::adapters::http::dto::{OrderDetailResponse, ReasonRequest};
use crate::adapters::http::notifications::{self, NotificationListQuery, NotificationListResponse, Repair};
use crate::adapters::http::problem::{ApiError, Problem};
use crate::adapters::http::settlements::{self, SettlementListQuery, SettlementListResponse};

/// The merchant's notification events, most recently changed first.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/notification-events",
    tag = "merchants",
    operation_id = "merchant_notification_events",
    params(("id" = String, Path, description = "Merchant id"), NotificationListQuery),
    responses(
        (status = 200, body = NotificationListResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn notification_events(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
    query: web::Query<NotificationListQuery>,
) -> Result<HttpResponse, ApiError> {
    notifications::list_as(&state, &caller.actor, query.into_inner()).await
}

/// Re-sends one of the merchant's notifications now (an `OPERATOR`).
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/notification-events/{eventId}/reprocess",
    tag = "merchants",
    operation_id = "merchant_reprocess",
    params(("id" = String, Path, description = "Merchant id"), ("eventId" = String, Path, description = "Notification event id")),
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
    path: web::Path<(String, String)>,
    Then(caller, body): Then<InMerchant<Writes>, MaybeJson<ReasonRequest>>,
) -> Result<HttpResponse, ApiError> {
    notifications::repair_as(&state, &caller.actor, &path.1, body, Repair::Reprocess).await
}

/// Gives one of the merchant's notifications up (an `OPERATOR`).
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/notification-events/{eventId}/ignore",
    tag = "merchants",
    operation_id = "merchant_ignore",
    params(("id" = String, Path, description = "Merchant id"), ("eventId" = String, Path, description = "Notification event id")),
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
    path: web::Path<(String, String)>,
    Then(caller, body): Then<InMerchant<Writes>, MaybeJson<ReasonRequest>>,
) -> Result<HttpResponse, ApiError> {
    notifications::repair_as(&state, &caller.actor, &path.1, body, Repair::Ignore).await
}

/// The merchant's settlements (`?status=AWAITING_OPERATOR`: those waiting for an operator).
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/settlements",
    tag = "merchants",
    operation_id = "merchant_settlement_list",
    params(("id" = String, Path, description = "Merchant id"), SettlementListQuery),
    responses(
        (status = 200, body = SettlementListResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn settlement_list(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
    query: web::Query<SettlementListQuery>,
) -> Result<HttpResponse, ApiError> {
    settlements::list_as(&state, &caller.actor, query.into_inner()).await
}

/// Tries one of the merchant's waiting settlements again now (an `OPERATOR`).
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/settlements/{settlementId}/retry",
    tag = "merchants",
    operation_id = "merchant_settlement_retry",
    params(("id" = String, Path, description = "Merchant id"), ("settlementId" = String, Path, description = "Settlement id")),
    request_body(content = Option<ReasonRequest>, description = "Optional reason, recorded in the audit log"),
    responses(
        (status = 200, description = "The order after the attempt", body = OrderDetailResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "SETTLEMENT_NOT_WAITING or ORDER_BUSY", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn settlement_retry(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    Then(caller, body): Then<InMerchant<Writes>, MaybeJson<ReasonRequest>>,
) -> Result<HttpResponse, ApiError> {
    settlements::retry_as(&state, &caller.actor, &path.1, body).await
}

/// Marks one of the merchant's waiting settlements settled (an `OPERATOR`).
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/settlements/{settlementId}/mark-settled",
    tag = "merchants",
    operation_id = "merchant_settlement_mark_settled",
    params(("id" = String, Path, description = "Merchant id"), ("settlementId" = String, Path, description = "Settlement id")),
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
pub async fn settlement_mark_settled(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    Then(caller, body): Then<InMerchant<Writes>, MaybeJson<ReasonRequest>>,
) -> Result<HttpResponse, ApiError> {
    settlements::mark_settled_as(&state, &caller.actor, &path.1, body).await
}
