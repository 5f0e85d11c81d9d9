//! The meetup platform's RabbitMQ topology (`momo-spring-project/momo-backend`; docs/spec.md
//! §12, `momo`), declared as its payment module declares it, so that whichever side starts
//! first, the other's declarations are equivalent (RabbitMQ answers a different one with
//! 406 and closes the channel). From its `PaymentExchangeConfig`, `PaymentQueueConfig`,
//! `MeetingExchangeConfig` and the constants they name:
//! - exchanges, durable: `momo.payment.events` (topic), `momo.dlx.payment` (direct), and the
//!   meeting service's `momo.participant.events` and `momo.meeting.events` (topic);
//! - queues, durable, each with exactly `x-dead-letter-exchange = momo.dlx.payment` and
//!   `x-dead-letter-routing-key = payment.dlq` (Java strings: AMQP long strings);
//! - `payment.dlq.queue` with exactly `x-message-ttl = 604800000` — a Java `Integer` there,
//!   which the Java client writes as a signed 32-bit int (`I`); we write the same bytes
//!   (RabbitMQ 3.10 would also take a long as equivalent for a TTL: tried, not relied on).
//!
//! Not used by the service yet: the `momo` contract is not complete (docs/migrating.md).

use amqprs::channel::{Channel, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments};
use amqprs::{FieldTable, FieldValue};

use super::connection::AmqpError;

pub const PAYMENT_EVENTS: &str = "momo.payment.events";
pub const PAYMENT_DLX: &str = "momo.dlx.payment";
pub const PARTICIPANT_EVENTS: &str = "momo.participant.events";
pub const MEETING_EVENTS: &str = "momo.meeting.events";
pub const DLQ: &str = "payment.dlq.queue";
pub const DLQ_ROUTING_KEY: &str = "payment.dlq";
/// Seven days, as the platform's DLQ keeps a message.
pub const DLQ_TTL_MS: i32 = 604_800_000;

/// The inbound queues: (queue, exchange, routing key).
pub const QUEUES: [(&str, &str, &str); 3] = [
    ("payment.participant.registered.queue", PARTICIPANT_EVENTS, "participant.registered.key"),
    ("payment.participant.canceled.queue", PARTICIPANT_EVENTS, "participant.canceled.key"),
    ("payment.meeting.deleted.queue", MEETING_EVENTS, "meeting.deleted.key"),
];

fn table(entries: &[(&str, FieldValue)]) -> Result<FieldTable, AmqpError> {
    let mut table = FieldTable::new();
    for (name, value) in entries {
        let key = (*name).try_into().map_err(|_| AmqpError::Invalid(format!("invalid field name {name}")))?;
        table.insert(key, value.clone());
    }
    Ok(table)
}

fn text(value: &str) -> Result<FieldValue, AmqpError> {
    Ok(FieldValue::S(value.try_into().map_err(|_| AmqpError::Invalid(format!("invalid value {value}")))?))
}

/// Declares the platform's payment topology, equivalently to the platform's own.
///
/// # Errors
/// The broker refused a declaration (one that is not equivalent: 406).
pub async fn declare(channel: &Channel) -> Result<(), AmqpError> {
    for (exchange, kind) in [
        (PAYMENT_EVENTS, "topic"),
        (PAYMENT_DLX, "direct"),
        (PARTICIPANT_EVENTS, "topic"),
        (MEETING_EVENTS, "topic"),
    ] {
        channel
            .exchange_declare(ExchangeDeclareArguments::new(exchange, kind).durable(true).finish())
            .await
            .map_err(AmqpError::broker(format!("declare {exchange}")))?;
    }
    let dead_letter = table(&[
        ("x-dead-letter-exchange", text(PAYMENT_DLX)?),
        ("x-dead-letter-routing-key", text(DLQ_ROUTING_KEY)?),
    ])?;
    for (queue, exchange, routing_key) in QUEUES {
        channel
            .queue_declare(
                QueueDeclareArguments::new(queue).durable(true).arguments(dead_letter.clone()).finish(),
            )
            .await
            .map_err(AmqpError::broker(format!("declare {queue}")))?;
        channel
            .queue_bind(QueueBindArguments::new(queue, exchange, routing_key))
            .await
            .map_err(AmqpError::broker(format!("bind {queue}")))?;
    }
    let ttl = table(&[("x-message-ttl", FieldValue::I(DLQ_TTL_MS))])?;
    channel
        .queue_declare(QueueDeclareArguments::new(DLQ).durable(true).arguments(ttl).finish())
        .await
        .map_err(AmqpError::broker(format!("declare {DLQ}")))?;
    channel
        .queue_bind(QueueBindArguments::new(DLQ, PAYMENT_DLX, DLQ_ROUTING_KEY))
        .await
        .map_err(AmqpError::broker(format!("bind {DLQ}")))?;
    Ok(())
}
