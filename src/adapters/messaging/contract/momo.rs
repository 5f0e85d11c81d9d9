//! `momo` (RabbitMQ; docs/spec.md §12): the meetup platform `momo-spring-project/momo-backend`,
//! whose payment module this service replaces. Inbound, as its `PaymentEventConsumer` reads
//! them: an `EventWrapper` `{"uuId", "type", "data"}` whose data is one of its
//! `MeetingEvents` records, read with Spring's Jackson defaults (unknown fields ignored,
//! numbers given as decimal text taken as numbers, boxed fields may be null). Its policy,
//! kept: a null `data` or a blank `uuId` is acknowledged and dropped; a wrong type, data that
//! does not decode, or a missing `meetingId` / `userId` goes to the DLQ at once.
//!
//! Not used by the service yet: the outbound half and the fee source are still to come
//! (docs/migrating.md).

use serde_json::Value;

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

/// A Java `Long` as Jackson reads one: a JSON integer, or decimal text; `null` is absent.
fn long(data: &Value, field: &str) -> Result<Option<i64>, String> {
    match &data[field] {
        Value::Null => Ok(None),
        Value::Number(n) => n.as_i64().map(Some).ok_or_else(|| format!("data.{field}: not a long")),
        Value::String(s) => s.trim().parse().map(Some).map_err(|_| format!("data.{field}: not a long")),
        _ => Err(format!("data.{field}: not a long")),
    }
}

fn required(data: &Value, field: &str) -> Result<i64, String> {
    long(data, field)?.ok_or_else(|| format!("data.{field} is missing"))
}

fn text(data: &Value, field: &str) -> Result<Option<String>, String> {
    match &data[field] {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(format!("data.{field}: not text")),
    }
}

/// Reads a message from the queue that takes `expected` (one of the three types).
///
/// # Errors
/// Why it goes to the DLQ.
pub fn read(expected: &str, body: &[u8]) -> Result<MomoRead, String> {
    let wrapper: Value = serde_json::from_slice(body).map_err(|e| format!("not an EventWrapper: {e}"))?;
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
                    .map(|id| {
                        long(&serde_json::json!({ "id": id }), "id")?
                            .ok_or("data.userIdList: a null id".into())
                    })
                    .collect::<Result<_, String>>()?,
                _ => return Err("data.userIdList: not a list".into()),
            },
        },
        other => return Err(format!("no queue takes {other}")),
    };
    Ok(MomoRead::Message(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the platform's meeting service sends: `EventWrapper.of(type, data)` through
    /// Spring's `Jackson2JsonMessageConverter` (records' fields in declaration order).
    fn wrapper(kind: &str, data: &str) -> Vec<u8> {
        format!(r#"{{"uuId":"5c0f6a58-3b0e-4f7e-9d1e-0f1b2c3d4e5f","type":"{kind}","data":{data}}}"#)
            .into_bytes()
    }

    #[test]
    fn the_platforms_three_messages_are_read() {
        assert_eq!(
            read(REGISTER, &wrapper(REGISTER, r#"{"meetingId":12,"userId":7}"#)).unwrap(),
            MomoRead::Message(MomoInbound::Register {
                uu_id: "5c0f6a58-3b0e-4f7e-9d1e-0f1b2c3d4e5f".into(),
                meeting_id: 12,
                user_id: 7
            })
        );
        let cancel = r#"{"meetingId":12,"userId":7,"hostUserId":3,"participantNickname":"민수","refundRequired":true,"amount":15000}"#;
        assert!(matches!(
            read(CANCEL, &wrapper(CANCEL, cancel)).unwrap(),
            MomoRead::Message(MomoInbound::Cancel { refund_required: true, amount: Some(15000), .. })
        ));
        // Both shapes of one deletion.
        for data in [
            r#"{"meetingId":12,"meetingName":"독서 모임","userIdList":[7,8,9]}"#,
            r#"{"hostUserId":3,"meetingId":12,"meetingName":"독서 모임","userIdList":[7,8,9]}"#,
        ] {
            assert!(matches!(
                read(DELETE, &wrapper(DELETE, data)).unwrap(),
                MomoRead::Message(MomoInbound::Delete { meeting_id: 12, ref user_ids, .. }) if user_ids == &[7, 8, 9]
            ));
        }
        // Jackson's leniency: ids as decimal text, unknown fields.
        assert!(matches!(
            read(REGISTER, &wrapper(REGISTER, r#"{"meetingId":"12","userId":"7","extra":true}"#)).unwrap(),
            MomoRead::Message(MomoInbound::Register { meeting_id: 12, user_id: 7, .. })
        ));
    }

    #[test]
    fn the_platforms_policy_for_what_it_cannot_take() {
        // Acknowledged and dropped.
        assert_eq!(read(REGISTER, &wrapper(REGISTER, "null")).unwrap(), MomoRead::Dropped("null data"));
        let blank =
            br#"{"uuId":" ","type":"meeting.participant.register","data":{"meetingId":1,"userId":2}}"#;
        assert_eq!(read(REGISTER, blank).unwrap(), MomoRead::Dropped("blank uuId"));
        // To the DLQ, with the reason.
        for (kind, body, why) in [
            (REGISTER, wrapper(CANCEL, r#"{"meetingId":1,"userId":2}"#), "wrong type"),
            (REGISTER, wrapper(REGISTER, r#"{"meetingId":1}"#), "userId is missing"),
            (REGISTER, wrapper(REGISTER, r#"{"meetingId":1.5,"userId":2}"#), "meetingId"),
            (
                CANCEL,
                wrapper(CANCEL, r#"{"meetingId":1,"userId":2,"refundRequired":true,"amount":3000000000}"#),
                "amount",
            ),
            (DELETE, wrapper(DELETE, r#"{"meetingName":"x"}"#), "meetingId is missing"),
            (REGISTER, b"not json".to_vec(), "EventWrapper"),
        ] {
            let refused = read(kind, &body).unwrap_err();
            assert!(refused.contains(why), "{refused}");
        }
    }
}
