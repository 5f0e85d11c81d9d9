//! RabbitMQ over amqprs.

mod connection;
mod publisher;

pub use connection::{AmqpEndpoint, connect};
pub use publisher::{AmqpEventPublisher, AmqpPublisherSettings};
