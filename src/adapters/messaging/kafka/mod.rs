//! Kafka over rdkafka (librdkafka): the outbox's idempotent producer and the meeting
//! service's consumer group (docs/spec.md §11, docs/messages.md).

mod client;
mod consumer;
mod dead_letter;
mod publisher;

pub use client::{KafkaConnection, KafkaFailure, Observed};
pub use consumer::{KafkaConsumerSettings, KafkaMeetingConsumer};
pub use publisher::{KafkaEventPublisher, KafkaPublisherSettings, producer_config, record_headers};
