//! RabbitMQ over amqprs.

mod confirms;
mod connection;
mod consumers;
pub mod momo;
mod publisher;

pub use connection::{AmqpEndpoint, AmqpError, AmqpNodes, Redacted, connect};
pub use consumers::{ConsumerSettings, MeetingConsumers, MeetingTopology, QueueType, declare_topology};
pub use publisher::{AmqpEventPublisher, AmqpPublisherSettings, message_properties};
