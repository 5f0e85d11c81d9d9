//! `/api/merchants/{id}/webhook-endpoints/{endpointId}/messages…` and `…/recover` (docs/spec.md
//! §16): an endpoint's messages and each one's attempts (read by anyone let in under the
//! merchant's path), a resend of one and a recover of every failed one since a time (an
//! `OPERATOR`).

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::adapters::http::HttpState;
use crate::adapters::http::auth::{InMerchant, Reads, Then, Writes};
use crate::adapters::http::body::JsonBody;
use crate::adapters::http::problem::{ApiError, Problem};
use crate::adapters::http::query_param;
use crate::application::ports::{AttemptRecord, MessageView};
use crate::domain::ids::{EventId, WebhookEndpointId};
use crate::domain::webhook::MessageStatus;
use crate::domain::webhook_message::Message;

fn unprocessable(field: &str, message: &str) -> ApiError {
    ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, message)
}

/// An id that is no id names nothing: a fresh one finds nothing.
fn endpoint_id(raw: &str) -> WebhookEndpointId {
    raw.parse().unwrap_or_default()
}

fn event_id(raw: &str) -> EventId {
    raw.parse().unwrap_or_default()
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageResponse {
    pub endpoint_id: String,
    /// The event's id: `webhook-id` on every attempt.
    pub event_id: String,
    pub event_type: String,
    /// `PENDING`, `DELIVERED` or `FAILED`.
    pub status: String,
    pub attempts: u32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The last attempt's HTTP status or error class (`TIMEOUT`, `CONNECT`, `REFUSED_ADDRESS`).
    pub last_status: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl MessageResponse {
    fn of(m: &Message, last_status: Option<String>, last_attempt_at: Option<DateTime<Utc>>) -> Self {
        MessageResponse {
            endpoint_id: m.endpoint_id.to_string(),
            event_id: m.event_id.to_string(),
            event_type: m.event_type.clone(),
            status: m.status.as_str().to_owned(),
            attempts: m.attempts,
            next_attempt_at: m.next_attempt_at,
            last_status,
            last_attempt_at,
            created_at: m.created_at,
        }
    }
}

impl From<&MessageView> for MessageResponse {
    fn from(v: &MessageView) -> Self {
        MessageResponse::of(&v.message, v.last_status.clone(), v.last_attempt_at)
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessagePageResponse {
    pub items: Vec<MessageResponse>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptResponse {
    /// 1 for the first.
    pub attempt: u32,
    pub at: DateTime<Utc>,
    /// The HTTP status, or `TIMEOUT`, `CONNECT`, `REFUSED_ADDRESS`.
    pub status: String,
    pub duration_ms: u64,
    /// The answer's first 4 KiB.
    pub response: String,
}

impl From<&AttemptRecord> for AttemptResponse {
    fn from(a: &AttemptRecord) -> Self {
        AttemptResponse {
            attempt: a.attempt,
            at: a.at,
            status: a.status.clone(),
            duration_ms: a.duration_ms,
            response: a.response.clone(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageAttemptsResponse {
    pub message: MessageResponse,
    pub attempts: Vec<AttemptResponse>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct MessagesQuery {
    /// `PENDING`, `DELIVERED` or `FAILED`.
    status: Option<String>,
    /// 1 to 200, default 50.
    limit: Option<String>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
}

/// `<created, RFC 3339>_<event id>`.
fn cursor_text(created: DateTime<Utc>, event: EventId) -> String {
    format!("{}_{event}", created.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
}

fn parse_cursor(text: &str) -> Option<(DateTime<Utc>, EventId)> {
    let (at, event) = text.split_once('_')?;
    Some((DateTime::parse_from_rfc3339(at).ok()?.to_utc(), event.parse().ok()?))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecoverRequest {
    /// Every message made at or after this instant that is `FAILED` is tried once more.
    #[schema(example = "2026-12-06T00:00:00Z")]
    pub since: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverResponse {
    /// How many failed messages were resent.
    pub recovered: usize,
}

/// The endpoint's messages, newest first.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/webhook-endpoints/{endpointId}/messages",
    tag = "merchants",
    operation_id = "merchant_webhook_messages",
    params(("id" = String, Path, description = "Merchant id"), ("endpointId" = String, Path, description = "Endpoint id"), MessagesQuery),
    responses(
        (status = 200, body = MessagePageResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad status, limit or cursor", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn messages(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
    path: web::Path<(String, String)>,
    query: web::Query<MessagesQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = query.into_inner();
    let status = query_param("status", q.status, 16)?
        .map(|s| {
            MessageStatus::parse(&s).ok_or_else(|| unprocessable("status", "PENDING, DELIVERED or FAILED"))
        })
        .transpose()?;
    let limit = query_param("limit", q.limit, 16)?
        .map(|l| l.parse::<u32>().map_err(|_| unprocessable("limit", "must be a number between 1 and 200")))
        .transpose()?
        .unwrap_or(50);
    let cursor = query_param("cursor", q.cursor, 100)?
        .map(|c| parse_cursor(&c).ok_or_else(|| unprocessable("cursor", "not a cursor from this API")))
        .transpose()?;
    let page = state.webhook_messages.list(&caller, endpoint_id(&path.1), status, limit, cursor).await?;
    Ok(HttpResponse::Ok().json(MessagePageResponse {
        items: page.messages.iter().map(MessageResponse::from).collect(),
        next_cursor: page.next.map(|(at, event)| cursor_text(at, event)),
    }))
}

/// A message's attempts, in order.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/webhook-endpoints/{endpointId}/messages/{eventId}/attempts",
    tag = "merchants",
    operation_id = "merchant_webhook_message_attempts",
    params(("id" = String, Path, description = "Merchant id"), ("endpointId" = String, Path, description = "Endpoint id"), ("eventId" = String, Path, description = "Event id (webhook-id)")),
    responses(
        (status = 200, body = MessageAttemptsResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn attempts(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (message, attempts) =
        state.webhook_messages.attempts(&caller, endpoint_id(&path.1), event_id(&path.2)).await?;
    let last = attempts.last();
    Ok(HttpResponse::Ok().json(MessageAttemptsResponse {
        message: MessageResponse::of(&message, last.map(|a| a.status.clone()), last.map(|a| a.at)),
        attempts: attempts.iter().map(AttemptResponse::from).collect(),
    }))
}

/// One more attempt of a message, now, under the same `webhook-id` (an `OPERATOR`).
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/webhook-endpoints/{endpointId}/messages/{eventId}/resend",
    tag = "merchants",
    operation_id = "merchant_resend_webhook_message",
    params(("id" = String, Path, description = "Merchant id"), ("endpointId" = String, Path, description = "Endpoint id"), ("eventId" = String, Path, description = "Event id (webhook-id)")),
    responses(
        (status = 202, body = MessageResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "WEBHOOK_MESSAGE_BUSY: an attempt is in flight", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn resend(
    state: web::Data<HttpState>,
    caller: InMerchant<Writes>,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let message = state.webhook_messages.resend(&caller, endpoint_id(&path.1), event_id(&path.2)).await?;
    Ok(HttpResponse::Accepted().json(MessageResponse::of(&message, None, None)))
}

/// Every failed message of the endpoint since a time, tried once more (an `OPERATOR`).
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/webhook-endpoints/{endpointId}/recover",
    tag = "merchants",
    operation_id = "merchant_recover_webhook_messages",
    params(("id" = String, Path, description = "Merchant id"), ("endpointId" = String, Path, description = "Endpoint id")),
    request_body = RecoverRequest,
    responses(
        (status = 202, body = RecoverResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn recover(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    Then(caller, body): Then<InMerchant<Writes>, JsonBody<RecoverRequest>>,
) -> Result<HttpResponse, ApiError> {
    let recovered = state.webhook_messages.recover(&caller, endpoint_id(&path.1), body.value.since).await?;
    Ok(HttpResponse::Accepted().json(RecoverResponse { recovered }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back() {
        let at = DateTime::parse_from_rfc3339("2026-12-06T01:02:03.456789Z").unwrap().to_utc();
        let event = EventId::new();
        assert_eq!(parse_cursor(&cursor_text(at, event)), Some((at, event)));
        assert_eq!(parse_cursor("nonsense"), None);
    }
}
