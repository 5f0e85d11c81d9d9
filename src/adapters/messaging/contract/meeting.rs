//! The meeting service's messages as each contract reads them (docs/spec.md §7, §11, §12),
//! whichever broker brought them: one [`read`] for both consumers, and one decoding per
//! contract — our own body ([`decode`]), the platform's `EventWrapper` (`momo`, through
//! [`super::momo::read`]), a CloudEvent unwrapped to our own body. Each body is parsed once:
//! its size, its duplicate keys and its control characters checked on that one parse.

use std::borrow::Cow;

use serde::Deserialize;

use super::momo::{self, MomoInbound, MomoRead};
use super::{Broker, Contract};
use crate::application::inbound::{
    MeetingDeleted, ParticipantCancelled, ParticipantRegistered, RegistrationAtFee,
};
use crate::application::input::{JsonError, check_json_text, parse_json};
use crate::domain::text;

/// Largest message body accepted; larger ones are dead-lettered unread.
pub const MAX_MESSAGE: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Register,
    Cancel,
    Deleted,
}

impl Kind {
    pub fn label(&self) -> &'static str {
        match self {
            Kind::Register => "participant-register",
            Kind::Cancel => "participant-cancel",
            Kind::Deleted => "meeting-deleted",
        }
    }
}

impl Kind {
    /// The kind an event type names (an AMQP routing key, a Kafka `event_type`).
    pub fn of_type(event_type: &str) -> Option<Kind> {
        match event_type {
            "meeting.participant.registered" => Some(Kind::Register),
            "meeting.participant.cancelled" => Some(Kind::Cancel),
            "meeting.deleted" => Some(Kind::Deleted),
            _ => None,
        }
    }
}

// ---- wire formats ------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RegisteredWire {
    event_id: String,
    meeting_id: String,
    user_id: String,
    amount: i64,
    currency: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelledWire {
    event_id: String,
    meeting_id: String,
    user_id: String,
    refund_required: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeletedWire {
    event_id: String,
    meeting_id: String,
}

/// A decoded, validated message.
#[derive(Debug, Clone)]
pub enum Inbound {
    Register(ParticipantRegistered),
    /// A registration whose fee is the meeting's (`momo`).
    RegisterAtFee(RegistrationAtFee),
    Cancel(ParticipantCancelled),
    Deleted(MeetingDeleted),
}

fn field(name: &str, value: &str, max: usize) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err(format!("{name}: must not be empty"));
    }
    text::check(name, value, max).map_err(|e| e.to_string())
}

/// A message's body parsed, the one time it is: at most [`MAX_MESSAGE`] bytes, JSON whose
/// keys are each given once (never act on either of two values given for one key, issue 27)
/// and whose strings carry no control character (docs/spec.md §5). `what`: what it should
/// have been, for the reason.
///
/// # Errors
/// Why it goes to the DLQ at once.
pub fn parse(body: &[u8], what: &str) -> Result<serde_json::Value, String> {
    if body.len() > MAX_MESSAGE {
        return Err(format!("body of {} bytes exceeds {MAX_MESSAGE}", body.len()));
    }
    let raw = parse_json(body).map_err(|e| match e {
        JsonError::Malformed(e) => format!("not {what}: {e}"),
        JsonError::DuplicateKey(key) => format!("{key}: given more than once"),
    })?;
    check_json_text(&raw).map_err(|e| e.to_string())?;
    Ok(raw)
}

/// What the message says, whatever its whitespace or key order (a map's keys serialise
/// sorted): the inbox keeps it to tell a conflicting redelivery from a duplicate.
fn digest(raw: &serde_json::Value) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(raw.to_string().as_bytes());
    hash.iter().map(|b| format!("{b:02x}")).collect::<String>()
}

/// A message as a broker received it, before the contract reads it.
pub struct Received<'a> {
    /// The kind its queue takes (RabbitMQ: a queue per kind); `None` where the message
    /// itself says (a Kafka topic carries every kind).
    pub queue: Option<Kind>,
    pub content_type: Option<&'a str>,
    /// A header's text: `Err` when present but unreadable (not text, given twice).
    pub header: &'a dyn Fn(&str) -> Result<Option<String>, String>,
    pub body: &'a [u8],
}

/// A message, as the contract reads it.
pub enum Delivery {
    /// The meeting service's message of `kind`, with the correlation id the contract
    /// carried, if any.
    Decoded { kind: Kind, inbound: Inbound, correlation_id: Option<String> },
    /// A message the contract's platform drops (acknowledged, logged).
    Dropped(Kind),
    /// Dead-lettered at once, with the reason; its kind when known.
    Malformed(Option<Kind>, String),
}

impl Delivery {
    /// The `consumer` label of its metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Delivery::Decoded { kind, .. } | Delivery::Dropped(kind) | Delivery::Malformed(Some(kind), _) => {
                kind.label()
            }
            Delivery::Malformed(None, _) => "unknown",
        }
    }
}

/// Reads a delivery under `contract`, whichever broker brought it (the one decode call of
/// both consumers): the platform's `EventWrapper` (`momo`, read per queue), a CloudEvent
/// whose type names the kind (and must be the queue's), or our own body, whose kind is the
/// queue's or the record's `event_type` (docs/spec.md §7, §11, §12). `currency`: the
/// platform's fees' (`meetings.currency`; `momo`'s registrations carry none).
pub fn read(contract: &Contract, broker: Broker, currency: &str, message: &Received<'_>) -> Delivery {
    let queue = message.queue;
    if matches!(contract, Contract::Momo(_)) {
        let Some(kind) = queue else {
            return Delivery::Malformed(None, "momo messages are read per queue".to_owned());
        };
        return match decode_momo(kind, message.body, currency) {
            Err(why) => Delivery::Malformed(Some(kind), why),
            Ok(None) => Delivery::Dropped(kind),
            Ok(Some(inbound)) => Delivery::Decoded { kind, inbound, correlation_id: None },
        };
    }
    let text = |name: &str| (message.header)(name).ok().flatten();
    let (kind, body, correlation_id) =
        match contract.read_inbound(broker, message.content_type, &text, message.body) {
            Err(why) => return Delivery::Malformed(queue, why),
            Ok(None) => match queue {
                Some(kind) => (kind, Cow::Borrowed(message.body), None),
                None => return read_untyped(message),
            },
            Ok(Some(read)) => match (Kind::of_type(&read.event_type), queue) {
                // The queue says the kind; the contract's type must say the same.
                (found, Some(queue)) if found != Some(queue) => {
                    let why = format!("type {} is not what queue {} takes", read.event_type, queue.label());
                    return Delivery::Malformed(Some(queue), why);
                }
                (Some(kind), _) => (kind, Cow::Owned(read.body), read.correlation_id),
                (None, _) => {
                    let why = format!("type `{}` is not a meeting-service event", read.event_type);
                    return Delivery::Malformed(None, why);
                }
            },
        };
    match decode(kind, &body) {
        Ok(inbound) => Delivery::Decoded { kind, inbound, correlation_id },
        Err(why) => Delivery::Malformed(Some(kind), why),
    }
}

/// Our own body of a record no queue says the kind of (a Kafka topic carries every kind),
/// parsed once: its kind from the record ([`kind_of`]), then the message read from that parse.
fn read_untyped(message: &Received<'_>) -> Delivery {
    let header = match (message.header)("event_type") {
        Ok(header) => header,
        Err(why) => return Delivery::Malformed(None, why),
    };
    let what = header
        .as_deref()
        .and_then(Kind::of_type)
        .map_or_else(|| "a meeting-service message".to_owned(), |k| format!("a valid {} message", k.label()));
    let parsed = parse(message.body, &what);
    // A body that cannot be read names no type: its decoding refuses it, with its reason.
    let in_body = parsed.as_ref().ok().and_then(|raw| raw.get("type")?.as_str().map(str::to_owned));
    let kind = match kind_of(header, in_body) {
        Ok(kind) => kind,
        Err(why) => return Delivery::Malformed(None, why),
    };
    match parsed.and_then(|raw| decode_value(kind, raw)) {
        Ok(inbound) => Delivery::Decoded { kind, inbound, correlation_id: None },
        Err(why) => Delivery::Malformed(Some(kind), why),
    }
}

/// A record's kind where no queue says it: its `event_type` header, else its body's `type`;
/// when both are there they must agree (a header that silently wins over the body is a
/// record read two ways).
fn kind_of(header: Option<String>, in_body: Option<String>) -> Result<Kind, String> {
    let event_type = match (header, in_body) {
        (Some(header), Some(body)) if header != body => {
            return Err(format!("event_type: the header `{header}` disagrees with the body's type `{body}`"));
        }
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => return Err("no event_type header and no `type` in the body".to_owned()),
    };
    Kind::of_type(&event_type)
        .ok_or_else(|| format!("event_type: `{event_type}` is not a meeting-service event"))
}

/// Reads a message of the meetup platform (`momo`, docs/spec.md §12) from the queue of
/// `kind`: what it asks for, or `Ok(None)` for one the platform's policy drops (a blank
/// `uuId`, null `data`; named in the log). Its `uuId` is the inbox key. `currency`: the
/// platform's fees' (`meetings.currency`).
///
/// # Errors
/// Why it goes to the DLQ at once.
fn decode_momo(kind: Kind, body: &[u8], currency: &str) -> Result<Option<Inbound>, String> {
    // Our rules for every message hold here too: a key given twice or a control character
    // in a string is malformed, never read one way of two.
    let raw = parse(body, "an EventWrapper")?;
    let expected = match kind {
        Kind::Register => momo::REGISTER,
        Kind::Cancel => momo::CANCEL,
        Kind::Deleted => momo::DELETE,
    };
    let message = match momo::read(expected, &raw)? {
        MomoRead::Dropped(why) => {
            tracing::warn!(consumer = kind.label(), why, "momo message dropped, as the platform drops it");
            return Ok(None);
        }
        MomoRead::Message(message) => message,
    };
    let digest = digest(&raw);
    let event_id = |uu_id: String| -> Result<String, String> {
        field("uuId", &uu_id, text::limits::EVENT_ID)?;
        Ok(uu_id)
    };
    Ok(Some(match message {
        MomoInbound::Register { uu_id, meeting_id, user_id } => Inbound::RegisterAtFee(RegistrationAtFee {
            event_id: event_id(uu_id)?,
            meeting_id: meeting_id.to_string(),
            user_id: user_id.to_string(),
            currency: currency.to_owned(),
            digest,
        }),
        // The refund is the balance left of the participant's payment: the message's
        // `amount` is the platform's copy of it, not an instruction.
        MomoInbound::Cancel { uu_id, meeting_id, user_id, refund_required, participant_nickname, .. } => {
            Inbound::Cancel(ParticipantCancelled {
                event_id: event_id(uu_id)?,
                meeting_id: meeting_id.to_string(),
                user_id: user_id.to_string(),
                refund_required,
                reason: Some(momo::cancel_reason(participant_nickname.as_deref())),
                digest,
            })
        }
        // Every paid participant is refunded: the list names who the platform knew of.
        MomoInbound::Delete { uu_id, meeting_id, meeting_name, .. } => Inbound::Deleted(MeetingDeleted {
            event_id: event_id(uu_id)?,
            meeting_id: meeting_id.to_string(),
            reason: Some(momo::deletion_reason(meeting_name.as_deref())),
            digest,
        }),
    }))
}

/// Reads our own body of a message of `kind` (the native contract's, and a CloudEvent's
/// data): what it asks for, its fields checked.
///
/// # Errors
/// Why it goes to the DLQ at once.
pub fn decode(kind: Kind, body: &[u8]) -> Result<Inbound, String> {
    decode_value(kind, parse(body, &format!("a valid {} message", kind.label()))?)
}

/// [`decode`] of a body already parsed ([`parse`]).
fn decode_value(kind: Kind, raw: serde_json::Value) -> Result<Inbound, String> {
    let json = |e: serde_json::Error| format!("not a valid {} message: {e}", kind.label());
    let digest = digest(&raw);
    let body = raw;
    Ok(match kind {
        Kind::Register => {
            let w: RegisteredWire = serde_json::from_value(body).map_err(json)?;
            field("eventId", &w.event_id, text::limits::EVENT_ID)?;
            field("meetingId", &w.meeting_id, text::limits::ID)?;
            field("userId", &w.user_id, text::limits::ID)?;
            if w.amount <= 0 {
                // docs/spec.md §7: free meetings never reach payment.
                return Err("amount: must be greater than 0".into());
            }
            Inbound::Register(ParticipantRegistered {
                event_id: w.event_id,
                meeting_id: w.meeting_id,
                user_id: w.user_id,
                amount: w.amount,
                currency: w.currency,
                digest,
            })
        }
        Kind::Cancel => {
            let w: CancelledWire = serde_json::from_value(body).map_err(json)?;
            field("eventId", &w.event_id, text::limits::EVENT_ID)?;
            field("meetingId", &w.meeting_id, text::limits::ID)?;
            field("userId", &w.user_id, text::limits::ID)?;
            Inbound::Cancel(ParticipantCancelled {
                event_id: w.event_id,
                meeting_id: w.meeting_id,
                user_id: w.user_id,
                refund_required: w.refund_required,
                reason: None,
                digest,
            })
        }
        Kind::Deleted => {
            let w: DeletedWire = serde_json::from_value(body).map_err(json)?;
            field("eventId", &w.event_id, text::limits::EVENT_ID)?;
            field("meetingId", &w.meeting_id, text::limits::ID)?;
            Inbound::Deleted(MeetingDeleted {
                event_id: w.event_id,
                meeting_id: w.meeting_id,
                reason: None,
                digest,
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_decode_or_name_what_is_wrong() {
        let ok =
            br#"{"eventId":"e1","meetingId":"m1","userId":"u1","amount":5000,"currency":"KRW","extra":true}"#;
        assert!(matches!(decode(Kind::Register, ok), Ok(Inbound::Register(_))));
        for (kind, bad) in [
            (
                Kind::Register,
                &br#"{"eventId":"e1","meetingId":"m1","userId":"u1","amount":"5000","currency":"KRW"}"#[..],
            ),
            (Kind::Register, br#"{"eventId":"e1","meetingId":"m1","userId":"u1","currency":"KRW"}"#),
            (Kind::Register, br#"{"eventId":"","meetingId":"m1","userId":"u1","amount":1,"currency":"KRW"}"#),
            (
                Kind::Register,
                br#"{"eventId":"e","meetingId":"m1","userId":"u1","amount":-1,"currency":"KRW"}"#,
            ),
            (
                Kind::Register,
                br#"{"eventId":"e","meetingId":"m1","userId":"u1","amount":0,"currency":"KRW"}"#,
            ),
            (
                Kind::Register,
                br#"{"eventId":"e","meetingId":"m1","userId":"u\u0000","amount":1,"currency":"KRW"}"#,
            ),
            (
                Kind::Register,
                br#"{"eventId":"e","meetingId":"m1","userId":"u1","amount":1,"currency":"KR\u007f"}"#,
            ),
            (Kind::Cancel, br#"{"eventId":"e1","meetingId":"m1","userId":"u1","refundRequired":"yes"}"#),
            (Kind::Deleted, b"not json"),
            (Kind::Deleted, br#"[]"#),
        ] {
            assert!(decode(kind, bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(decode(Kind::Deleted, &vec![b' '; MAX_MESSAGE + 1]).is_err());
    }

    /// A header reader, as a consumer hands it to [`read`].
    type Headers<'a> = &'a dyn Fn(&str) -> Result<Option<String>, String>;

    /// (contract, broker, the queue's kind, headers, body, the label and outcome expected).
    type Case<'a> = (&'a Contract, Broker, Option<Kind>, Headers<'a>, &'a [u8], &'a str, &'a str);

    /// What the one decode call makes of a delivery, per contract and per broker.
    #[test]
    fn one_read_for_both_brokers_names_the_kind_or_why_not() {
        let momo = Contract::Momo(momo::MomoOut { timezone: chrono_tz::Asia::Seoul });
        let ours: &[u8] = br#"{"eventId":"e1","meetingId":"m1","userId":"u1","refundRequired":true}"#;
        let wrapped = format!(
            r#"{{"uuId":"u-1","type":"{}","data":{{"meetingId":12,"userId":7,"refundRequired":true}}}}"#,
            momo::CANCEL
        );
        let typed: &[u8] = br#"{"type":"meeting.deleted","eventId":"e2","meetingId":"m2"}"#;
        let none = |_: &str| Ok(None);
        let cancel_header =
            |name: &str| Ok((name == "event_type").then(|| "meeting.participant.cancelled".into()));
        let twice = |_: &str| Err("event_type: given more than once".to_owned());
        let read_as = |contract: &Contract, broker, queue, header: Headers<'_>, body: &[u8]| {
            let delivery =
                read(contract, broker, "KRW", &Received { queue, content_type: None, header, body });
            let outcome = match &delivery {
                Delivery::Decoded { kind, inbound, .. } => {
                    format!("{kind:?} {}", matches!(inbound, Inbound::Cancel(_) | Inbound::Deleted(_)))
                }
                Delivery::Dropped(kind) => format!("dropped {kind:?}"),
                Delivery::Malformed(_, why) => why.clone(),
            };
            (delivery.label(), outcome)
        };
        let (amqp, kafka, native, cancel) =
            (Broker::Amqp, Broker::Kafka, &Contract::Native, Some(Kind::Cancel));
        let disagree = "event_type: the header `meeting.participant.cancelled` disagrees with the body's type `meeting.deleted`";
        let cases: [Case<'_>; 7] = [
            (native, amqp, cancel, &none, ours, "participant-cancel", "Cancel true"),
            (native, kafka, None, &cancel_header, ours, "participant-cancel", "Cancel true"),
            (native, kafka, None, &none, typed, "meeting-deleted", "Deleted true"),
            (native, kafka, None, &cancel_header, typed, "unknown", disagree),
            (native, kafka, None, &twice, ours, "unknown", "event_type: given more than once"),
            (&momo, amqp, cancel, &none, wrapped.as_bytes(), "participant-cancel", "Cancel true"),
            (&momo, kafka, None, &none, wrapped.as_bytes(), "unknown", "momo messages are read per queue"),
        ];
        for (contract, broker, queue, header, body, label, outcome) in cases {
            let read = read_as(contract, broker, queue, header, body);
            assert_eq!(read, (label, outcome.to_owned()), "{queue:?} {broker:?}");
        }
        let blank = br#"{"uuId":" ","type":"meeting.participant.cancel","data":{"meetingId":1,"userId":2}}"#;
        let (label, outcome) = read_as(&momo, amqp, cancel, &none, blank);
        assert_eq!(
            (label, outcome.as_str()),
            ("participant-cancel", "dropped Cancel"),
            "a blank uuId is dropped"
        );
    }

    /// Issue 57: a refund the platform asks for carries the platform's own reason, as its
    /// `PaymentEventConsumer` words it (a null name as Java's `String.format` writes it).
    #[test]
    fn the_platforms_refunds_carry_its_own_reasons() {
        let wrap = |kind: &str, data: &str| format!(r#"{{"uuId":"u-1","type":"{kind}","data":{data}}}"#);
        let cancel = wrap(
            momo::CANCEL,
            r#"{"meetingId":12,"userId":7,"hostUserId":3,"participantNickname":"민수","refundRequired":true,"amount":15000}"#,
        );
        let Ok(Some(Inbound::Cancel(msg))) = decode_momo(Kind::Cancel, cancel.as_bytes(), "KRW") else {
            panic!("a cancellation")
        };
        assert_eq!(msg.reason.as_deref(), Some("사용자 민수님의 참가 취소"));
        let unnamed = wrap(momo::CANCEL, r#"{"meetingId":12,"userId":7,"refundRequired":true}"#);
        let Ok(Some(Inbound::Cancel(msg))) = decode_momo(Kind::Cancel, unnamed.as_bytes(), "KRW") else {
            panic!("a cancellation")
        };
        assert_eq!(msg.reason.as_deref(), Some("사용자 null님의 참가 취소"));
        let delete =
            wrap(momo::DELETE, r#"{"hostUserId":3,"meetingId":15,"meetingName":"송년회","userIdList":[21]}"#);
        let Ok(Some(Inbound::Deleted(msg))) = decode_momo(Kind::Deleted, delete.as_bytes(), "KRW") else {
            panic!("a deletion")
        };
        assert_eq!(msg.reason.as_deref(), Some("모임 '송년회' 삭제로 인한 자동 환불"));
        // Our own messages carry none: the refund names the event.
        let ours = br#"{"eventId":"e1","meetingId":"m1","userId":"u1","refundRequired":true}"#;
        let Ok(Inbound::Cancel(msg)) = decode(Kind::Cancel, ours) else { panic!("a cancellation") };
        assert_eq!(msg.reason, None);
    }

    #[test]
    fn a_key_given_twice_is_malformed_not_last_one_wins() {
        // Issue 27 item 5: `amount` twice charged the second.
        let twice =
            br#"{"eventId":"e1","meetingId":"m1","userId":"u1","amount":15000,"amount":1,"currency":"KRW"}"#;
        let err = decode(Kind::Register, twice).unwrap_err();
        assert!(err.contains("amount"), "{err}");
    }
}
