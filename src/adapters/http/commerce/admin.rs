//! Its `/api/admin/**` recovery paths (`ROLE_ADMIN`), acting on our notification events and
//! outbox through the operators' use cases. A notification event is named by its order's
//! number (one per order here); an outbox event by our outbox row's id.

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use super::auth::Operator;
use super::envelope::{CommerceError, ok};
use super::schema::{NotificationReprocessResponse, OutboxReprocessResponse, RetryDueResult};
use super::view;
use crate::adapters::http::HttpState;
use crate::application::AppError;
use crate::application::envelopes::ORDER_AGGREGATE;
use crate::application::ports::OrderRecord;
use crate::domain::ids::OrderId;
use crate::domain::notification::{FailurePolicy, Notification, NotificationStatus};
use crate::domain::outbox::OutboxStatus;

/// Its `AdminRecoveryRequest`: optional, kept in our audit log.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecoveryRequest {
    operator_id: Option<String>,
    reason: Option<String>,
}

/// The optional body as the audit reason (`operatorId=…, reason=…`), within its bounds.
fn reason_of(body: &web::Bytes) -> Result<Option<String>, CommerceError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let request: RecoveryRequest = match serde_json::from_slice::<Option<RecoveryRequest>>(body) {
        Ok(request) => request.unwrap_or_default(),
        Err(_) => return Err(CommerceError::malformed()),
    };
    if request.operator_id.as_ref().is_some_and(|o| o.chars().count() > 100) {
        return Err(CommerceError::bad_request("operatorId는 100자 이하여야 합니다."));
    }
    if request.reason.as_ref().is_some_and(|r| r.chars().count() > 500) {
        return Err(CommerceError::bad_request("reason은 500자 이하여야 합니다."));
    }
    // docs/spec.md §5: text we would not store is the caller's to mend (400), refused
    // before the action — never an action done and then a 503 for its audit row.
    for (field, value) in [("operatorId", &request.operator_id), ("reason", &request.reason)] {
        if value.as_deref().is_some_and(|v| v.chars().any(crate::domain::text::is_refused_control)) {
            return Err(CommerceError::bad_request(match field {
                "operatorId" => "operatorId에 제어 문자를 사용할 수 없습니다.",
                _ => "reason에 제어 문자를 사용할 수 없습니다.",
            }));
        }
    }
    let parts: Vec<String> = [("operatorId", request.operator_id), ("reason", request.reason)]
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| format!("{name}={v}")))
        .collect();
    Ok((!parts.is_empty()).then(|| parts.join(", ")))
}

fn notification_not_found() -> CommerceError {
    CommerceError::coded(
        actix_web::http::StatusCode::NOT_FOUND,
        "NOTIFICATION_EVENT_NOT_FOUND",
        "알림 이벤트를 찾을 수 없습니다.",
    )
}

fn not_allowed(message: String) -> CommerceError {
    CommerceError::coded(actix_web::http::StatusCode::BAD_REQUEST, "ADMIN_REPROCESS_NOT_ALLOWED", message)
}

/// The order and notification a notification event id names.
async fn notification_of(
    state: &HttpState,
    operator: &Operator,
    id: i64,
) -> Result<(OrderRecord, Notification), CommerceError> {
    let record = match state.queries.order_by_number(&operator.0.actor(), id).await {
        Ok(record) => record,
        Err(AppError::NotFound(_)) => return Err(notification_not_found()),
        Err(err) => return Err(err.into()),
    };
    let notification = record.notification.clone().ok_or_else(notification_not_found)?;
    Ok((record, notification))
}

/// The failure code the platform gives a notification waiting in this state.
fn failure_code(n: &Notification) -> Option<&'static str> {
    let waiting = matches!(
        n.status,
        NotificationStatus::RetryScheduled
            | NotificationStatus::ManualInterventionRequired
            | NotificationStatus::Failed
    );
    match n.policy? {
        _ if !waiting => None,
        FailurePolicy::AutoRetry => Some("NOTIFICATION_TRANSIENT_FAILURE"),
        FailurePolicy::ManualIntervention => Some("NOTIFICATION_MANUAL_INTERVENTION_REQUIRED"),
        FailurePolicy::Ignore => Some("NOTIFICATION_IGNORE_ALLOWED"),
    }
}

/// Its `AdminNotificationReprocessResponse`.
fn reprocessed(
    record: &OrderRecord,
    previous: &'static str,
    (action, result, message): (&'static str, &'static str, &'static str),
) -> NotificationReprocessResponse {
    let n = record.notification.as_ref();
    let code = n.and_then(failure_code);
    NotificationReprocessResponse {
        event_id: record.order.number,
        order_id: record.order.number,
        action,
        result,
        previous_status: previous,
        current_status: n.map(|n| view::notification_status(n.status)),
        message,
        handling_policy: n.and_then(Notification::handling).unwrap_or("NONE"),
        retry_count: n.map_or(0, |n| (n.attempts - 1).max(0)),
        next_attempt_at: n.and_then(|n| n.next_attempt_at).map(view::local),
        last_attempt_at: n.filter(|n| n.attempts > 0).map(|n| view::local(n.updated_at)),
        failure_code: code,
        failure_reason: code.and(n.and_then(|n| n.last_error.clone())),
        order_status: view::order_status(record),
    }
}

/// `POST /api/admin/notification-events/{id}/retry`: sends it again now; a success
/// completes its order.
#[utoipa::path(
    post,
    path = "/api/admin/notification-events/{notificationEventId}/retry",
    tag = "commerce",
    params(("notificationEventId" = i64, Path, description = "The order's number: one notification per order")),
    request_body(content = Option<crate::adapters::http::commerce::schema::RecoveryRequest>, description = "Optional: kept in the audit log"),
    responses(
        (status = 200, description = "data: its AdminNotificationReprocessResponse", body = crate::adapters::http::commerce::schema::Answer<NotificationReprocessResponse>),
        (status = 400, description = "ADMIN_REPROCESS_NOT_ALLOWED, with current=<status>", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 401, description = "UNAUTHORIZED: no valid bearer token", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 403, description = "FORBIDDEN: no ROLE_ADMIN", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 404, description = "NOTIFICATION_EVENT_NOT_FOUND", body = crate::adapters::http::commerce::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn retry_notification(
    state: web::Data<HttpState>,
    operator: Operator,
    path: web::Path<i64>,
    body: web::Bytes,
) -> Result<HttpResponse, CommerceError> {
    recover(&state, &operator, path.into_inner(), &body, Recovery::Retry).await
}

/// `POST /api/admin/notification-events/{id}/ignore`: the customer need not be told; an
/// order that failed only for it completes.
#[utoipa::path(
    post,
    path = "/api/admin/notification-events/{notificationEventId}/ignore",
    tag = "commerce",
    params(("notificationEventId" = i64, Path, description = "The order's number: one notification per order")),
    request_body(content = Option<crate::adapters::http::commerce::schema::RecoveryRequest>, description = "Optional: kept in the audit log"),
    responses(
        (status = 200, description = "data: its AdminNotificationReprocessResponse", body = crate::adapters::http::commerce::schema::Answer<NotificationReprocessResponse>),
        (status = 400, description = "ADMIN_REPROCESS_NOT_ALLOWED, with current=<status>", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 401, description = "UNAUTHORIZED: no valid bearer token", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 403, description = "FORBIDDEN: no ROLE_ADMIN", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 404, description = "NOTIFICATION_EVENT_NOT_FOUND", body = crate::adapters::http::commerce::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn ignore_notification(
    state: web::Data<HttpState>,
    operator: Operator,
    path: web::Path<i64>,
    body: web::Bytes,
) -> Result<HttpResponse, CommerceError> {
    recover(&state, &operator, path.into_inner(), &body, Recovery::Ignore).await
}

/// What an operator does with a notification event.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Recovery {
    Retry,
    Ignore,
}

/// An operator's retry (our re-send now) or ignore, answered as its
/// `AdminNotificationReprocessResponse`; a refusal names the event's status.
async fn recover(
    state: &HttpState,
    operator: &Operator,
    id: i64,
    body: &web::Bytes,
    recovery: Recovery,
) -> Result<HttpResponse, CommerceError> {
    let reason = reason_of(body)?;
    let (_, notification) = notification_of(state, operator, id).await?;
    let previous = view::notification_status(notification.status);
    let actor = operator.0.actor();
    let done = match recovery {
        Recovery::Retry => state.notifications.reprocess(&actor, notification.id, reason).await,
        Recovery::Ignore => state.notifications.ignore(&actor, notification.id, reason).await,
    };
    let record = match done {
        Ok(record) => record,
        Err(AppError::Conflict { .. }) => {
            let what = if recovery == Recovery::Retry { "재처리" } else { "무시 처리" };
            return Err(not_allowed(format!("{what} 가능한 알림 이벤트가 아닙니다. current={previous}")));
        }
        Err(err) => return Err(err.into()),
    };
    let sent = record.notification.as_ref().is_some_and(|n| n.status == NotificationStatus::Sent);
    let answer = match recovery {
        Recovery::Ignore => ("IGNORE", "IGNORED", "Notification event was marked as ignored."),
        Recovery::Retry if sent => ("RETRY", "SUCCESS", "Notification event was retried successfully."),
        Recovery::Retry => (
            "RETRY",
            "FAILED",
            "Notification event retry failed; it waits for its next attempt or an operator.",
        ),
    };
    Ok(ok(reprocessed(&record, previous, answer)))
}

/// `POST /api/admin/notification-events/retry-due`: every due retry now, answered as its
/// bare `NotificationRetryProcessingResult` (no envelope, as the platform).
#[utoipa::path(
    post,
    path = "/api/admin/notification-events/retry-due",
    tag = "commerce",
    responses(
        (status = 200, description = "Bare, no envelope", body = crate::adapters::http::commerce::schema::RetryDueResult),
        (status = 401, description = "UNAUTHORIZED: no valid bearer token", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 403, description = "FORBIDDEN: no ROLE_ADMIN", body = crate::adapters::http::commerce::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn retry_due(
    state: web::Data<HttpState>,
    operator: Operator,
) -> Result<HttpResponse, CommerceError> {
    let report = state.notifications.retry_due(&operator.0.actor()).await?;
    Ok(HttpResponse::Ok().json(RetryDueResult {
        status: "completed",
        processed_count: report.claimed + report.skipped,
        success_count: report.succeeded,
        failed_count: report.failed,
        skipped_count: report.skipped,
        processed_event_ids: report.processed_orders,
    }))
}

/// How long its outbox retry waits for the relay to send the event again.
const PUBLISH_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// `POST /api/admin/outbox-events/{id}/retry`: a dead letter goes back to the relay
/// (`READY`); anything else is refused with its status.
#[utoipa::path(
    post,
    path = "/api/admin/outbox-events/{outboxEventId}/retry",
    tag = "commerce",
    params(("outboxEventId" = i64, Path, description = "The outbox row's id")),
    request_body(content = Option<crate::adapters::http::commerce::schema::RecoveryRequest>, description = "Optional: kept in the audit log"),
    responses(
        (status = 200, description = "data: its AdminOutboxReprocessResponse", body = crate::adapters::http::commerce::schema::Answer<OutboxReprocessResponse>),
        (status = 400, description = "ADMIN_REPROCESS_NOT_ALLOWED, with current=<status>", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 401, description = "UNAUTHORIZED: no valid bearer token", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 403, description = "FORBIDDEN: no ROLE_ADMIN", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 404, description = "OUTBOX_EVENT_NOT_FOUND", body = crate::adapters::http::commerce::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn retry_outbox(
    state: web::Data<HttpState>,
    operator: Operator,
    path: web::Path<i64>,
    body: web::Bytes,
) -> Result<HttpResponse, CommerceError> {
    let reason = reason_of(&body)?;
    let actor = operator.0.actor();
    let id = path.into_inner();
    let not_found = || {
        CommerceError::coded(
            actix_web::http::StatusCode::NOT_FOUND,
            "OUTBOX_EVENT_NOT_FOUND",
            "Outbox 이벤트를 찾을 수 없습니다.",
        )
    };
    let refused = |status: OutboxStatus| {
        not_allowed(format!(
            "DEAD_LETTER 상태의 outbox 이벤트만 재처리할 수 있습니다. current={}",
            status.as_str()
        ))
    };
    // As the platform: published within the call where a relay runs (this process's, or a
    // worker's woken by the commit), its status answered.
    let row = match state.outbox_admin.republish_within(&actor, id, reason, PUBLISH_WITHIN).await {
        Ok(row) => row,
        Err(AppError::Conflict { .. }) => {
            let now = state.outbox_admin.get(&actor, id).await?;
            return Err(refused(now.status));
        }
        Err(AppError::NotFound(_)) => return Err(not_found()),
        Err(err) => return Err(err.into()),
    };
    // Its aggregate is an order: the platform names it by its number.
    let aggregate = match row.aggregate_id.parse::<OrderId>() {
        Ok(order) if row.aggregate_type == ORDER_AGGREGATE => {
            state.queries.get_order(&actor, order).await.ok().map(|r| r.order.number)
        }
        _ => None,
    };
    let status = row.status.as_str();
    let message = match row.status {
        OutboxStatus::Published => "Outbox event was republished successfully.".to_owned(),
        OutboxStatus::RetryWait => "Outbox event republish failed and was rescheduled for retry.".to_owned(),
        OutboxStatus::DeadLetter => "Outbox event republish failed and remains dead-lettered.".to_owned(),
        _ => format!("Outbox event retry finished with status {status}."),
    };
    Ok(ok(OutboxReprocessResponse {
        event_id: row.id,
        aggregate_id: aggregate,
        event_type: row.event_type,
        action: "RETRY_DEAD_LETTER",
        result: status,
        previous_status: OutboxStatus::DeadLetter.as_str(),
        current_status: status,
        retry_count: row.retry_count,
        failure_code: row.failure_code.map(|c| c.as_str()),
        failure_reason: row.failure_reason,
        message,
        next_attempt_at: row.next_attempt_at.map(view::local),
        last_attempt_at: row.last_attempt_at.map(view::local),
        published_at: row.published_at.map(view::local),
        dead_lettered_at: row.dead_lettered_at.map(view::local),
    }))
}
