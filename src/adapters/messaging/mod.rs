//! Messaging adapters: the `log` publisher of the embedded default (and, later, AMQP).

mod log_publisher;

pub use log_publisher::LogEventPublisher;
