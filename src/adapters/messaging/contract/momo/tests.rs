//! The momo contract's unit tests: the platform's messages read, and every reply byte for byte as its meeting service reads it.

use super::*;

/// The platform's bytes read as the consumer reads them: parsed once, then read.
fn read(expected: &str, body: &[u8]) -> Result<MomoRead, String> {
    super::read(expected, &super::super::meeting::parse(body, "an EventWrapper")?)
}

/// What the platform's meeting service sends: `EventWrapper.of(type, data)` through
/// Spring's `Jackson2JsonMessageConverter` (records' fields in declaration order).
fn wrapper(kind: &str, data: &str) -> Vec<u8> {
    format!(r#"{{"uuId":"5c0f6a58-3b0e-4f7e-9d1e-0f1b2c3d4e5f","type":"{kind}","data":{data}}}"#).into_bytes()
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
    let blank = br#"{"uuId":" ","type":"meeting.participant.register","data":{"meetingId":1,"userId":2}}"#;
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

fn outbox(event_type: &str, payload: serde_json::Value) -> OutboxRecord {
    let envelope = serde_json::json!({
        "eventId": "3f1c0e52-7f0e-4b8e-9a52-0d4c5b1f2e11", "eventType": event_type,
        "aggregateType": "order", "aggregateId": "8d7e6f50-1a2b-4c3d-9e8f-001122334455",
        "correlationId": null, "occurredAt": "2026-12-04T15:30:00.123456Z", "payload": payload,
    });
    OutboxRecord {
        id: 4711,
        event_type: event_type.into(),
        routing_key: event_type.into(),
        payload: envelope.to_string(),
        ..super::super::tests::record()
    }
}

fn momo() -> MomoOut {
    MomoOut { timezone: chrono_tz::Asia::Seoul }
}

fn meeting_order(extra: serde_json::Value) -> serde_json::Value {
    let mut payload = serde_json::json!({
        "orderId": "8d7e6f50-1a2b-4c3d-9e8f-001122334455", "orderNumber": 12, "customerId": "7",
        "source": "MEETING", "meetingId": "12", "currency": "KRW", "totalAmount": 15000,
        "paymentNumber": 31, "causationId": "5c0f6a58-3b0e-4f7e-9d1e-0f1b2c3d4e5f",
    });
    payload.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    payload
}

fn one(encoded: Encoded) -> WireMessage {
    match encoded {
        Encoded::Messages(mut messages) if messages.len() == 1 => messages.remove(0),
        other => panic!("expected one message, got {other:?}"),
    }
}

#[test]
fn a_completed_registration_is_the_platforms_payment_completed_byte_for_byte() {
    let m = one(momo().encode(&outbox("order.completed", meeting_order(serde_json::json!({})))).unwrap());
    assert_eq!(
        String::from_utf8(m.body).unwrap(),
        r#"{"uuId":"5c0f6a58-3b0e-4f7e-9d1e-0f1b2c3d4e5f","type":"payment.completed","data":{"paymentId":31,"userId":7,"meetingId":12,"amount":15000,"orderId":"8d7e6f50-1a2b-4c3d-9e8f-001122334455","outboxId":null,"occurredAt":"2026-12-05T00:30:00.123456"}}"#
    );
    assert_eq!((m.destination.as_deref(), m.key.as_str()), (Some(PAYMENT_EVENTS), "payment.completed.key"));
    assert_eq!(m.message_id.as_deref(), Some("4711"));
    assert_eq!(
        (m.content_type.as_deref(), m.content_encoding.as_deref()),
        (Some("application/json"), Some("UTF-8"))
    );
    assert_eq!(
        m.headers,
        vec![
            ("x-outbox-id", HeaderValue::Long(4711)),
            ("x-correlation-id", HeaderValue::Text("5c0f6a58-3b0e-4f7e-9d1e-0f1b2c3d4e5f".into())),
            ("__TypeId__", HeaderValue::Text(TYPE_ID.into())),
        ]
    );
}

#[test]
fn a_keyed_in_payment_completed_goes_out_under_the_events_own_id() {
    // A key-in (source MOMO) has no meeting-service message behind it: the event's own id.
    let payload = meeting_order(serde_json::json!({ "source": "MOMO", "causationId": null }));
    let m = one(momo().encode(&outbox("order.completed", payload)).unwrap());
    let body = String::from_utf8(m.body).unwrap();
    assert!(
        body.starts_with(r#"{"uuId":"3f1c0e52-7f0e-4b8e-9a52-0d4c5b1f2e11","type":"payment.completed","data":{"paymentId":31,"userId":7,"meetingId":12,"amount":15000,"#),
        "{body}"
    );
    // An order of another source stays native.
    let api = meeting_order(serde_json::json!({ "source": "API" }));
    assert_eq!(momo().encode(&outbox("order.completed", api)).unwrap(), Encoded::Native);
}

#[test]
fn each_way_a_registration_ends_otherwise_is_one_payment_failed() {
    let declined =
        outbox("payment.declined", meeting_order(serde_json::json!({"declineCode": "REJECT_CARD_PAYMENT"})));
    let body = String::from_utf8(one(momo().encode(&declined).unwrap()).body).unwrap();
    assert!(body.contains(r#""type":"payment.failed""#), "{body}");
    assert!(
        body.contains(
            r#""paymentId":31,"userId":7,"meetingId":12,"failReason":"결제 실패 (REJECT_CARD_PAYMENT)""#
        ),
        "{body}"
    );
    // The decline's order.failed is not a second answer.
    let failed =
        outbox("order.failed", meeting_order(serde_json::json!({"failureReason": "PAYMENT_DECLINED"})));
    assert_eq!(momo().encode(&failed).unwrap(), Encoded::Native);
    let settlement =
        outbox("order.failed", meeting_order(serde_json::json!({"failureReason": "SETTLEMENT_FAILED"})));
    let body = String::from_utf8(one(momo().encode(&settlement).unwrap()).body).unwrap();
    assert!(body.contains(r#""failReason":"정산 실패 (SETTLEMENT_FAILED)""#), "{body}");
    // Refused before any order: the registration's own, no payment.
    let refused = outbox(
        "payment.failed",
        serde_json::json!({"meetingId": "12", "userId": "7", "registrationEventId": "u-1", "causationId": "u-1", "reason": "NO_PAYMENT_METHOD"}),
    );
    let m = one(momo().encode(&refused).unwrap());
    let body = String::from_utf8(m.body).unwrap();
    assert!(body.starts_with(r#"{"uuId":"u-1","type":"payment.failed","data":{"paymentId":null,"userId":7,"meetingId":12,"failReason":"결제 수단 없음 (NO_PAYMENT_METHOD)","outboxId":null,"occurredAt":"2026-12-05T00:30:00.123456"}}"#), "{body}");
    assert_eq!(m.key, "payment.failed.key");
    // A duplicate of a pair with a live order: the platform sends nothing (its ALREADY_PAID
    // "이벤트/아웃박스 미발행"); the live order's outcome is the meeting service's one answer.
    let duplicate = outbox(
        "payment.failed",
        serde_json::json!({"meetingId": "12", "userId": "7", "registrationEventId": "u-2", "causationId": "u-2", "reason": "ALREADY_REGISTERED"}),
    );
    assert_eq!(momo().encode(&duplicate).unwrap(), Encoded::Native);
    // A keyed-in card's refusal is the member's HTTP answer: no reply (the platform's refused
    // key-in rolled back and sent nothing).
    let keyed = outbox(
        "payment.declined",
        meeting_order(serde_json::json!({"source": "MOMO", "declineCode": "REJECT_CARD_PAYMENT"})),
    );
    assert_eq!(momo().encode(&keyed).unwrap(), Encoded::Native);
}

#[test]
fn a_refund_is_payment_refunded_with_its_own_cause() {
    let refund = outbox(
        "payment.refunded",
        meeting_order(
            serde_json::json!({"amount": 5000, "refundReason": "participant cancelled", "causationId": "c-9"}),
        ),
    );
    let body = String::from_utf8(one(momo().encode(&refund).unwrap()).body).unwrap();
    assert_eq!(
        body,
        r#"{"uuId":"c-9","type":"payment.refunded","data":{"paymentId":31,"userId":7,"meetingId":12,"amount":5000,"refundReason":"participant cancelled","outboxId":null,"occurredAt":"2026-12-05T00:30:00.123456"}}"#
    );
    // Without a cause (asked for over HTTP): the event's own id, the same on every retry.
    let mut api = meeting_order(serde_json::json!({"amount": 5000, "refundReason": "r"}));
    api.as_object_mut().unwrap().remove("causationId");
    let first = one(momo().encode(&outbox("payment.refunded", api.clone())).unwrap());
    assert!(
        String::from_utf8_lossy(&first.body).starts_with(r#"{"uuId":"3f1c0e52-7f0e-4b8e-9a52-0d4c5b1f2e11""#)
    );
    assert_eq!(first, one(momo().encode(&outbox("payment.refunded", api)).unwrap()));
}

#[test]
fn what_the_platform_could_not_read_is_refused_never_cut() {
    let big = outbox("order.completed", meeting_order(serde_json::json!({"totalAmount": 3_000_000_000i64})));
    assert!(momo().encode(&big).unwrap_err().contains("Integer"));
    let named = outbox("order.completed", meeting_order(serde_json::json!({"customerId": "alice"})));
    assert!(momo().encode(&named).unwrap_err().contains("userId"));
    // Not a meeting's, or not a reply: native.
    let api = outbox("order.completed", meeting_order(serde_json::json!({"source": "API"})));
    assert_eq!(momo().encode(&api).unwrap(), Encoded::Native);
    let approved = outbox("payment.approved", meeting_order(serde_json::json!({})));
    assert_eq!(momo().encode(&approved).unwrap(), Encoded::Native);
}

#[test]
fn local_time_has_no_offset_and_keeps_the_fraction() {
    assert_eq!(momo().local_time("2026-12-04T15:30:00Z").unwrap(), "2026-12-05T00:30:00");
    assert_eq!(momo().local_time("2026-12-04T15:30:00.5+00:00").unwrap(), "2026-12-05T00:30:00.500");
    let utc = MomoOut { timezone: chrono_tz::UTC };
    assert_eq!(utc.local_time("2026-12-04T15:30:00.000001Z").unwrap(), "2026-12-04T15:30:00.000001");
}
