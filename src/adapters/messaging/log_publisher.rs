//! The `log` broker of the embedded default: each event becomes one JSON log line and is
//! confirmed at once. A newcomer sees the events the service would publish without
//! running RabbitMQ.

use std::sync::Arc;

use async_trait::async_trait;

use crate::application::health::HealthProbe;
use crate::application::ports::{BrokerUnavailable, EventPublisher, OutboxRecord, PublishOutcome};

pub struct LogEventPublisher;

#[async_trait]
impl EventPublisher for LogEventPublisher {
    async fn ready(&self) -> Result<(), BrokerUnavailable> {
        Ok(())
    }

    async fn publish(&self, batch: &[Arc<OutboxRecord>]) -> Vec<PublishOutcome> {
        batch
            .iter()
            .map(|event| {
                tracing::info!(
                    target: "outbox.publish",
                    event_id = %event.event_id,
                    event_type = %event.event_type,
                    routing_key = %event.routing_key,
                    correlation_id = event.correlation_id.as_deref().unwrap_or(""),
                    envelope = %event.payload,
                    "event published"
                );
                PublishOutcome::Confirmed
            })
            .collect()
    }
}

#[async_trait]
impl HealthProbe for LogEventPublisher {
    fn name(&self) -> &'static str {
        "broker"
    }

    /// The log is always there.
    async fn is_healthy(&self) -> bool {
        true
    }
}
