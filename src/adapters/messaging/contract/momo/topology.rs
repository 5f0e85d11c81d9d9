//! The meetup platform's RabbitMQ topology (`momo-spring-project/momo-backend`; docs/spec.md
//! §12, `momo`), as its payment module declares it, so that whichever side starts first,
//! the other's declarations are equivalent (RabbitMQ answers a different one with 406 and
//! closes the channel). From its `PaymentExchangeConfig`, `PaymentQueueConfig`,
//! `MeetingExchangeConfig` and the constants they name:
//! - exchanges, durable: `momo.payment.events` (topic), `momo.dlx.payment` (direct), and the
//!   meeting service's `momo.participant.events` and `momo.meeting.events` (topic);
//! - queues, durable, each with exactly `x-dead-letter-exchange = momo.dlx.payment` and
//!   `x-dead-letter-routing-key = payment.dlq` (Java strings: AMQP long strings);
//! - `payment.dlq.queue` with exactly `x-message-ttl = 604800000` — a Java `Integer` there,
//!   which the Java client writes as a signed 32-bit int (`I`); we write the same bytes
//!   (RabbitMQ 3.10 would also take a long as equivalent for a TTL: tried, not relied on).

use super::super::topology::{Argument, Exchange, Queue, Topology};

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

/// The platform's payment topology, equivalent to its own declarations.
pub fn topology() -> Topology {
    let exchanges = [
        (PAYMENT_EVENTS, "topic"),
        (PAYMENT_DLX, "direct"),
        (PARTICIPANT_EVENTS, "topic"),
        (MEETING_EVENTS, "topic"),
    ]
    .map(|(name, kind)| Exchange { name: name.to_owned(), kind });
    let dead_letter = || {
        vec![
            ("x-dead-letter-exchange", Argument::Text(PAYMENT_DLX.to_owned())),
            ("x-dead-letter-routing-key", Argument::Text(DLQ_ROUTING_KEY.to_owned())),
        ]
    };
    let mut queues: Vec<Queue> = QUEUES
        .iter()
        .map(|(queue, exchange, key)| Queue {
            name: (*queue).to_owned(),
            arguments: dead_letter(),
            binding: ((*exchange).to_owned(), (*key).to_owned()),
        })
        .collect();
    queues.push(Queue {
        name: DLQ.to_owned(),
        arguments: vec![("x-message-ttl", Argument::Int(DLQ_TTL_MS))],
        binding: (PAYMENT_DLX.to_owned(), DLQ_ROUTING_KEY.to_owned()),
    });
    Topology { exchanges: exchanges.into(), queues, inbound: QUEUES.map(|(queue, _, _)| queue.to_owned()) }
}
