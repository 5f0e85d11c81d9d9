//! Declares a contract's [`Topology`] on a channel: its exchanges, then each queue with its
//! arguments (typed as the contract says) and its binding, in order. Idempotent: a
//! declaration equivalent to the broker's is a no-op; one that is not is refused (406).

use amqprs::channel::{Channel, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments};
use amqprs::{FieldTable, FieldValue};

use super::connection::AmqpError;
use crate::adapters::messaging::contract::topology::{Argument, Topology};

/// An AMQP field name (a header's, an argument's).
///
/// # Errors
/// `Invalid` for a name AMQP cannot carry (longer than 255 bytes).
pub(super) fn field_name(text: &str) -> Result<amqprs::FieldName, AmqpError> {
    text.try_into().map_err(|_| AmqpError::Invalid(format!("invalid field name {text}")))
}

fn field(name: &str, value: &Argument) -> Result<(amqprs::FieldName, FieldValue), AmqpError> {
    let key = field_name(name)?;
    let value = match value {
        Argument::Text(text) => FieldValue::S(
            text.as_str().try_into().map_err(|_| AmqpError::Invalid(format!("invalid value {text}")))?,
        ),
        Argument::Int(n) => FieldValue::I(*n),
        Argument::Long(n) => FieldValue::l(*n),
    };
    Ok((key, value))
}

/// Declares `topology` on `channel`.
///
/// # Errors
/// The broker refused a declaration (one that is not equivalent to its own: 406).
pub async fn declare(channel: &Channel, topology: &Topology) -> Result<(), AmqpError> {
    for exchange in &topology.exchanges {
        channel
            .exchange_declare(
                ExchangeDeclareArguments::new(&exchange.name, exchange.kind).durable(true).finish(),
            )
            .await
            .map_err(AmqpError::broker(format!("declare {}", exchange.name)))?;
    }
    for queue in &topology.queues {
        let mut arguments = FieldTable::new();
        for (name, value) in &queue.arguments {
            let (key, value) = field(name, value)?;
            arguments.insert(key, value);
        }
        channel
            .queue_declare(
                QueueDeclareArguments::new(&queue.name).durable(true).arguments(arguments).finish(),
            )
            .await
            .map_err(AmqpError::broker(format!("declare {}", queue.name)))?;
        let (exchange, routing_key) = &queue.binding;
        channel
            .queue_bind(QueueBindArguments::new(&queue.name, exchange, routing_key))
            .await
            .map_err(AmqpError::broker(format!("bind {}", queue.name)))?;
    }
    Ok(())
}
