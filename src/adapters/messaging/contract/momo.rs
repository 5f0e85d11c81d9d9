//! `momo` (RabbitMQ; docs/spec.md §12): the meetup platform `momo-spring-project/momo-backend`,
//! whose payment module this service replaces. Inbound, as its `PaymentEventConsumer` reads
//! them: an `EventWrapper` `{"uuId", "type", "data"}` whose data is one of its
//! `MeetingEvents` records, read with Spring's Jackson defaults (unknown fields ignored,
//! numbers given as decimal text taken as numbers, boxed fields may be null). Its policy,
//! kept: a null `data` or a blank `uuId` is acknowledged and dropped; a wrong type, data that
//! does not decode, or a missing `meetingId` / `userId` goes to the DLQ at once.
//!
//! Outbound, as its meeting service's `MeetingEventConsumer` reads them: an `EventWrapper`
//! whose data is one of its `PaymentEventMessages` records (`Completed`, `Failed`,
//! `Refunded`), with the field names, Java types and `LocalDateTime` (local wall time, no
//! offset) Jackson reads; the `uuId` of the meeting service's message that caused it (it
//! matches replies by it), else the event's own id (deterministic: a retry sends the same
//! bytes); the properties and headers its `PaymentEventProducer` sets. Which of our events
//! answers a registration: `order.completed` → `payment.completed`; `payment.declined`,
//! `order.failed` (other than a decline, which `payment.declined` answered) and a refused
//! registration → `payment.failed`; each `payment.refunded` → `payment.refunded`. All of a
//! meeting order's (`MEETING`, or `MOMO`: keyed in through the momo dialect); every other
//! event goes out native.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod topology;

pub use topology::PAYMENT_EVENTS;

use super::{Encoded, HeaderValue, WireMessage};
use crate::adapters::jackson;
use crate::application::ports::OutboxRecord;
use crate::domain::order::OrderSource;

/// The three types the platform's payment module takes, one per queue.
pub const REGISTER: &str = "meeting.participant.register";
pub const CANCEL: &str = "meeting.participant.cancel";
pub const DELETE: &str = "meeting.delete";

/// A meeting-service message as the platform sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MomoInbound {
    Register {
        uu_id: String,
        meeting_id: i64,
        user_id: i64,
    },
    Cancel {
        uu_id: String,
        meeting_id: i64,
        user_id: i64,
        host_user_id: Option<i64>,
        participant_nickname: Option<String>,
        refund_required: bool,
        amount: Option<i32>,
    },
    /// Both shapes the platform sends for one deletion (with and without `hostUserId`).
    Delete {
        uu_id: String,
        meeting_id: i64,
        meeting_name: Option<String>,
        user_ids: Vec<i64>,
    },
}

/// What becomes of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MomoRead {
    Message(MomoInbound),
    /// Acknowledged and dropped, as the platform does (logged and counted by the consumer).
    Dropped(&'static str),
}

/// `data.<field>`, a `Long` (Jackson's reading, [`jackson::long`]).
fn long(data: &Value, field: &str) -> Result<Option<i64>, String> {
    jackson::long(data.get(field)).map_err(|_| format!("data.{field}: not a long"))
}

fn required(data: &Value, field: &str) -> Result<i64, String> {
    long(data, field)?.ok_or_else(|| format!("data.{field} is missing"))
}

/// `data.<field>`, a `String` (Jackson's reading, [`jackson::string`]).
fn text(data: &Value, field: &str) -> Result<Option<String>, String> {
    jackson::string(data.get(field)).map_err(|_| format!("data.{field}: not text"))
}

/// Reads a message from the queue that takes `expected` (one of the three types), its body
/// already parsed once (`wrapper`).
///
/// # Errors
/// Why it goes to the DLQ.
pub fn read(expected: &str, wrapper: &Value) -> Result<MomoRead, String> {
    if !wrapper.is_object() {
        return Err("not an EventWrapper: not an object".into());
    }
    let data = &wrapper["data"];
    if data.is_null() {
        return Ok(MomoRead::Dropped("null data"));
    }
    let uu_id = match &wrapper["uuId"] {
        Value::String(id) if !id.trim().is_empty() => id.clone(),
        _ => return Ok(MomoRead::Dropped("blank uuId")),
    };
    let kind = wrapper["type"].as_str().unwrap_or_default();
    if kind != expected {
        return Err(format!("wrong type: {kind} (this queue takes {expected})"));
    }
    if !data.is_object() {
        return Err("data: not an object".into());
    }
    let message = match expected {
        REGISTER => MomoInbound::Register {
            uu_id,
            meeting_id: required(data, "meetingId")?,
            user_id: required(data, "userId")?,
        },
        CANCEL => MomoInbound::Cancel {
            uu_id,
            meeting_id: required(data, "meetingId")?,
            user_id: required(data, "userId")?,
            host_user_id: long(data, "hostUserId")?,
            participant_nickname: text(data, "participantNickname")?,
            refund_required: match &data["refundRequired"] {
                Value::Bool(b) => *b,
                // A null Boolean unboxed by the platform's `if (!ev.refundRequired())` fails
                // there: a message it could not handle either.
                Value::Null => return Err("data.refundRequired is missing".into()),
                _ => return Err("data.refundRequired: not a boolean".into()),
            },
            amount: long(data, "amount")?
                .map(|a| i32::try_from(a).map_err(|_| "data.amount: not an int".to_owned()))
                .transpose()?,
        },
        DELETE => MomoInbound::Delete {
            uu_id,
            meeting_id: required(data, "meetingId")?,
            meeting_name: text(data, "meetingName")?,
            user_ids: match &data["userIdList"] {
                Value::Null => Vec::new(),
                Value::Array(ids) => ids
                    .iter()
                    .map(|id| match jackson::long(Some(id)) {
                        Ok(Some(id)) => Ok(id),
                        Ok(None) => Err("data.userIdList: a null id".to_owned()),
                        Err(_) => Err("data.userIdList: not a long".to_owned()),
                    })
                    .collect::<Result<_, String>>()?,
                _ => return Err("data.userIdList: not a list".into()),
            },
        },
        other => return Err(format!("no queue takes {other}")),
    };
    Ok(MomoRead::Message(message))
}

/// A cancellation's refund reason as the platform's `PaymentEventConsumer` words it
/// (`String.format("사용자 %s님의 참가 취소", participantNickname)`: Java writes a null as
/// `null`, and so do we, so that both sides' records read the same).
pub fn cancel_reason(nickname: Option<&str>) -> String {
    format!("사용자 {}님의 참가 취소", nickname.unwrap_or("null"))
}

/// A deletion's refund reason as the platform words it
/// (`String.format("모임 '%s' 삭제로 인한 자동 환불", meetingName)`).
pub fn deletion_reason(meeting_name: Option<&str>) -> String {
    format!("모임 '{}' 삭제로 인한 자동 환불", meeting_name.unwrap_or("null"))
}

/// The Java class Spring's `Jackson2JsonMessageConverter` names in `__TypeId__`.
pub const TYPE_ID: &str = "com.example.momo.global.rabbitmq.dto.common.EventWrapper";

/// What the meeting service ignores rather than removes the participant for (its consumer
/// skips a `failReason` containing `이미 결제가`).
pub const ALREADY_PAID: &str = "이미 결제가 완료된 사용자입니다.";

/// The replies' types.
pub const COMPLETED: &str = "payment.completed";
pub const FAILED: &str = "payment.failed";
pub const REFUNDED: &str = "payment.refunded";

/// Why a registration did not complete, as the platform's `failReason`: short Korean text
/// with our code; an already registered pair exactly as the platform words it.
pub fn fail_reason(code: &str) -> String {
    let what = match code {
        "ALREADY_REGISTERED" => return ALREADY_PAID.to_owned(),
        "NO_PAYMENT_METHOD" => "결제 수단 없음",
        "MEETING_NOT_FOUND" => "모임 없음",
        "FREE_MEETING" => "무료 모임",
        "SETTLEMENT_FAILED" => "정산 실패",
        "NOTIFICATION_FAILED" => "알림 실패",
        "PAYMENT_WINDOW_EXPIRED" => "결제 시간 초과",
        _ => "결제 실패",
    };
    format!("{what} ({code})")
}

/// The stored envelope's fields a reply is made of (docs/messages.md), read in one pass and
/// borrowed from the stored text; each optional, so an event that lacks one is refused
/// with its name, not misread.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored<'a> {
    #[serde(borrow)]
    event_id: Cow<'a, str>,
    #[serde(borrow)]
    occurred_at: Cow<'a, str>,
    #[serde(borrow)]
    payload: Payload<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Payload<'a> {
    #[serde(borrow)]
    source: Option<Cow<'a, str>>,
    #[serde(borrow)]
    order_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    customer_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    meeting_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    user_id: Option<Cow<'a, str>>,
    total_amount: Option<i64>,
    amount: Option<i64>,
    payment_number: Option<i64>,
    #[serde(borrow)]
    decline_code: Option<Cow<'a, str>>,
    #[serde(borrow)]
    failure_reason: Option<Cow<'a, str>>,
    #[serde(borrow)]
    refund_reason: Option<Cow<'a, str>>,
    #[serde(borrow)]
    reason: Option<Cow<'a, str>>,
    #[serde(borrow)]
    causation_id: Option<Cow<'a, str>>,
}

/// The outbound half: the platform's reply an event is, if it is one.
#[derive(Debug, Clone)]
pub struct MomoOut {
    /// `meetings.timezone`: the zone of the platform's `LocalDateTime`s.
    pub timezone: Tz,
}

/// A platform id (a Java `Long`) from our decimal text.
fn platform_id(field: &str, value: Option<&str>) -> Result<i64, String> {
    let value = value.ok_or_else(|| format!("the event has no {field}"))?;
    value.parse().map_err(|_| format!("{field} {value:?} is not a platform id (a long)"))
}

/// A Java `Integer` amount: never truncated.
fn int_amount(value: Option<i64>) -> Result<i32, String> {
    let amount = value.ok_or("the event has no amount")?;
    i32::try_from(amount).map_err(|_| format!("amount {amount} does not fit the platform's Integer"))
}

/// Its `EventWrapper(uuId, type, data)`, as Jackson writes it: fields in declaration order,
/// no spaces.
#[derive(Serialize)]
struct EventWrapper<'a> {
    #[serde(rename = "uuId")]
    uu_id: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    data: Data<'a>,
}

/// One of its `PaymentEventMessages` records.
#[derive(Serialize)]
#[serde(untagged)]
enum Data<'a> {
    Completed(Completed<'a>),
    Failed(Failed),
    Refunded(Refunded<'a>),
}

/// `PaymentEventMessages.Completed(paymentId, userId, meetingId, amount, orderId, outboxId,
/// occurredAt)`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Completed<'a> {
    payment_id: i64,
    user_id: i64,
    meeting_id: i64,
    amount: i32,
    order_id: &'a str,
    /// Always null: its producer sends the outbox id as a header.
    outbox_id: Option<i64>,
    occurred_at: String,
}

/// `PaymentEventMessages.Failed(paymentId, userId, meetingId, failReason, outboxId,
/// occurredAt)`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Failed {
    payment_id: Option<i64>,
    user_id: i64,
    meeting_id: i64,
    fail_reason: String,
    outbox_id: Option<i64>,
    occurred_at: String,
}

/// `PaymentEventMessages.Refunded(paymentId, userId, meetingId, amount, refundReason,
/// outboxId, occurredAt)`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Refunded<'a> {
    payment_id: i64,
    user_id: i64,
    meeting_id: i64,
    amount: i32,
    refund_reason: Option<&'a str>,
    outbox_id: Option<i64>,
    occurred_at: String,
}

impl MomoOut {
    /// `occurredAt` as the platform's `LocalDateTime`: wall time in `meetings.timezone`,
    /// `yyyy-MM-ddTHH:mm:ss[.fraction]`, no offset (its parser refuses one).
    ///
    /// # Errors
    /// `occurred_at` is not RFC 3339.
    pub fn local_time(&self, occurred_at: &str) -> Result<String, String> {
        let at = DateTime::parse_from_rfc3339(occurred_at)
            .map_err(|e| format!("occurredAt {occurred_at:?}: {e}"))?
            .with_timezone(&Utc)
            .with_timezone(&self.timezone)
            .naive_local();
        // As Java's `LocalDateTime.toString()` (and chrono's `%.f`): the fraction in 3, 6 or
        // 9 digits, none when whole.
        Ok(at.format("%Y-%m-%dT%H:%M:%S%.f").to_string())
    }

    /// The message `record` goes out as, or `Native`.
    ///
    /// # Errors
    /// A reply the platform could not read (an id that is not a long, an amount over an
    /// Integer): the event is dead-lettered with the reason, never sent truncated.
    pub fn encode(&self, record: &OutboxRecord) -> Result<Encoded, String> {
        let kind = record.event_type.as_str();
        if !matches!(
            kind,
            "order.completed" | "order.failed" | "payment.declined" | "payment.refunded" | "payment.failed"
        ) {
            return Ok(Encoded::Native);
        }
        let stored: Stored<'_> = serde_json::from_str(&record.payload)
            .map_err(|e| format!("the stored envelope cannot be read: {e}"))?;
        let p = &stored.payload;
        // A refused registration (no order) is the registration's; the rest, a meeting order's.
        let refused = kind == "payment.failed";
        let meeting_order = p.source.as_deref().and_then(OrderSource::parse).is_some_and(|s| s.is_meeting());
        // An order failed by a decline was answered by its `payment.declined`, with the
        // provider's code.
        let answered = kind == "order.failed" && p.failure_reason.as_deref() == Some("PAYMENT_DECLINED");
        // A keyed-in card's refusal is answered to the member over HTTP; the platform's
        // refused key-in left no payment and sent nothing (its WebClient error rolled back).
        let keyed_in_refusal =
            kind == "payment.declined" && p.source.as_deref() == Some(OrderSource::Momo.as_str());
        // A pair that holds a live order already: the platform sends nothing for a
        // duplicate (its `ALREADY_PAID` "이벤트/아웃박스 미발행"); the live order's own
        // outcome is the one answer the meeting service gets.
        let duplicate = refused && p.reason.as_deref() == Some("ALREADY_REGISTERED");
        if !refused && !meeting_order || answered || keyed_in_refusal || duplicate {
            return Ok(Encoded::Native);
        }
        let user = if refused { p.user_id.as_deref() } else { p.customer_id.as_deref() };
        let occurred_at = self.local_time(&stored.occurred_at)?;
        let (user_id, meeting_id) =
            (platform_id("userId", user)?, platform_id("meetingId", p.meeting_id.as_deref())?);
        let (reply, data) = match kind {
            "order.completed" => (
                COMPLETED,
                Data::Completed(Completed {
                    payment_id: p.payment_number.ok_or("order.completed has no paymentNumber")?,
                    user_id,
                    meeting_id,
                    amount: int_amount(p.total_amount)?,
                    order_id: p.order_id.as_deref().ok_or("the event has no orderId")?,
                    outbox_id: None,
                    occurred_at,
                }),
            ),
            "payment.refunded" => (
                REFUNDED,
                Data::Refunded(Refunded {
                    payment_id: p.payment_number.ok_or("payment.refunded has no paymentNumber")?,
                    user_id,
                    meeting_id,
                    amount: int_amount(p.amount)?,
                    refund_reason: p.refund_reason.as_deref(),
                    outbox_id: None,
                    occurred_at,
                }),
            ),
            _ => {
                let code = match kind {
                    "payment.declined" => p.decline_code.as_deref().unwrap_or("PAYMENT_DECLINED"),
                    "payment.failed" => p.reason.as_deref().unwrap_or("REFUSED"),
                    _ => p.failure_reason.as_deref().unwrap_or("ORDER_FAILED"),
                };
                let failed = Failed {
                    payment_id: p.payment_number,
                    user_id,
                    meeting_id,
                    fail_reason: fail_reason(code),
                    outbox_id: None,
                    occurred_at,
                };
                (FAILED, Data::Failed(failed))
            }
        };
        let uu_id = p.causation_id.as_deref().unwrap_or(&stored.event_id);
        let wrapper = EventWrapper { uu_id, kind: reply, data };
        let body = serde_json::to_vec(&wrapper).map_err(|e| format!("the reply cannot be written: {e}"))?;
        Ok(Encoded::Messages(vec![WireMessage {
            destination: Some(PAYMENT_EVENTS.to_owned()),
            key: format!("{reply}.key"),
            body,
            content_type: Some("application/json".into()),
            content_encoding: Some("UTF-8".into()),
            kafka_content_type_header: false,
            // The platform's producer: `message_id` = the outbox row's number, matched by its
            // confirm and return callbacks.
            message_id: Some(record.id.to_string()),
            amqp_type: None,
            correlation_id: None,
            headers: vec![
                ("x-outbox-id", HeaderValue::Long(record.id)),
                ("x-correlation-id", HeaderValue::Text(uu_id.to_owned())),
                ("__TypeId__", HeaderValue::Text(TYPE_ID.to_owned())),
            ],
        }]))
    }
}

#[cfg(test)]
mod tests;
