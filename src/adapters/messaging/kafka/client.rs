//! What the Kafka producer and consumer share: how to reach the cluster (the bootstrap list,
//! the client id, the security settings passed through), what the client's own callbacks say
//! of it, and the topics this service creates when they are missing.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::adapters::secret::Secret;

/// What could not be done with the cluster, and the client's error.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct KafkaFailure {
    pub what: String,
    #[source]
    pub source: KafkaError,
}

impl KafkaFailure {
    /// Maps a client error of `what` (`.map_err(KafkaFailure::of("subscribe"))`).
    pub fn of(what: impl Into<String>) -> impl FnOnce(KafkaError) -> KafkaFailure {
        let what = what.into();
        move |source| KafkaFailure { what, source }
    }
}

/// How to reach the cluster.
#[derive(Debug, Clone)]
pub struct KafkaConnection {
    /// `host:port[,host:port...]`.
    pub brokers: String,
    pub client_id: String,
    /// `security.*`, `ssl.*`, `sasl.*` settings, passed as they are.
    pub properties: Vec<(String, Secret)>,
    /// How long connecting, a metadata request or creating a topic may take.
    pub connect_timeout: Duration,
}

impl KafkaConnection {
    /// A client configuration with the connection's settings; the caller adds its own.
    pub(super) fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("client.id", &self.client_id)
            .set("socket.connection.setup.timeout.ms", millis(self.connect_timeout))
            // Reconnect quickly after a cut, at most every 2 s.
            .set("reconnect.backoff.ms", "100")
            .set("reconnect.backoff.max.ms", "2000");
        for (key, value) in &self.properties {
            config.set(key, value.expose());
        }
        config
    }

    /// Creates each of `topics` that does not exist, with `partitions` partitions and the
    /// cluster's default replication; a topic that exists is left as it is.
    ///
    /// # Errors
    /// The cluster could not be reached in time, or refused to create a topic.
    pub async fn ensure_topics(&self, topics: &[&str], partitions: i32) -> Result<(), KafkaError> {
        let admin: AdminClient<DefaultClientContext> = self.config().create()?;
        let new: Vec<NewTopic<'_>> =
            topics.iter().map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(-1))).collect();
        let options = AdminOptions::new().request_timeout(Some(self.connect_timeout));
        for result in admin.create_topics(&new, &options).await? {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => return Err(KafkaError::AdminOp(code)),
            }
        }
        Ok(())
    }
}

pub(super) fn millis(d: Duration) -> String {
    d.as_millis().clamp(1, i32::MAX as u128).to_string()
}

/// The client's callbacks: its log lines go to `tracing`, and an "all brokers down" error
/// marks the cluster unreachable until something is delivered or read again.
#[derive(Default)]
pub struct Observed {
    down: AtomicBool,
    why: Mutex<Option<String>>,
}

impl Observed {
    /// Why the cluster is unreachable, when the client says so.
    pub fn down(&self) -> Option<String> {
        if !self.down.load(Ordering::SeqCst) {
            return None;
        }
        Some(self.why.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default())
    }

    /// The cluster answered.
    pub fn up(&self) {
        if self.down.swap(false, Ordering::SeqCst) {
            tracing::info!("kafka reachable again");
        }
    }

    fn mark_down(&self, why: String) {
        *self.why.lock().unwrap_or_else(|e| e.into_inner()) = Some(unreachable_reason(&why));
        if !self.down.swap(true, Ordering::SeqCst) {
            tracing::warn!(reason = %self.down().unwrap_or_default(), "kafka unreachable: all brokers down");
        }
    }
}

/// What readiness says of a cluster the client reaches no broker of. librdkafka's own
/// reason counts brokers in a way that reads as a contradiction ("0/2 brokers are down",
/// its bootstrap entry counted apart): that count is left out, any other reason kept.
fn unreachable_reason(client_says: &str) -> String {
    let counted = client_says.split_once(" brokers are down").is_some_and(|(count, _)| {
        count.split('/').all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    if counted || client_says.trim().is_empty() {
        "no broker of the cluster answers".to_owned()
    } else {
        format!("no broker of the cluster answers ({})", crate::domain::text::excerpt(client_says, 200))
    }
}

impl ClientContext for Observed {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::warn!(target: "kafka", facility, "{message}"),
            _ => tracing::debug!(target: "kafka", facility, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.mark_down(reason.to_owned());
        } else {
            tracing::debug!(target: "kafka", %error, reason, "client error");
        }
    }
}

/// A client's callbacks sharing one [`Observed`] (a consumer and its dead-letter producer).
#[derive(Clone, Default)]
pub struct Watch(pub std::sync::Arc<Observed>);

impl ClientContext for Watch {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.0.log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.0.error(error, reason);
    }
}

impl rdkafka::consumer::ConsumerContext for Watch {}

#[cfg(test)]
mod reason_tests {
    use super::unreachable_reason;

    #[test]
    fn an_unreachable_cluster_is_said_plainly() {
        assert_eq!(unreachable_reason("0/2 brokers are down"), "no broker of the cluster answers");
        assert_eq!(unreachable_reason("2/2 brokers are down"), "no broker of the cluster answers");
        assert_eq!(
            unreachable_reason("Failed to resolve 'kafka:9092'"),
            "no broker of the cluster answers (Failed to resolve 'kafka:9092')"
        );
    }
}
