//! Messaging adapters: the `log` publisher of the embedded default and RabbitMQ (amqprs):
//! connection handling, the confirming publisher.

pub mod amqp;
mod log_publisher;

pub use log_publisher::LogEventPublisher;
