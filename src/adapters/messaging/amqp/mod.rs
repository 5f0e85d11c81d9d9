//! RabbitMQ over amqprs.

mod confirms;
mod connection;
mod consumers;
mod publisher;
mod topology;

pub use connection::{AmqpEndpoint, AmqpError, AmqpNodes, Redacted, connect};
pub use consumers::{ConsumerSettings, MeetingConsumers};
pub use publisher::{AmqpEventPublisher, AmqpPublisherSettings, message_properties};
pub use topology::declare;
