//! Messaging adapters: the `log` publisher of the embedded default, RabbitMQ (amqprs) and
//! Kafka (rdkafka): connections, the confirming publishers, the meeting service's consumers
//! (their decoding and failure policy shared in `meeting`).

pub mod amqp;
pub mod contract;
pub mod kafka;
mod log_publisher;
mod meeting;
mod publishing;

pub use log_publisher::LogEventPublisher;
