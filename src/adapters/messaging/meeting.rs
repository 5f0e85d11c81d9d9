//! The meeting service's events (docs/spec.md §7) whatever broker brings them, once a
//! contract has read them (`contract::meeting`): the failure policy — malformed or
//! mistyped -> dead-lettered at once; business outcomes -> acknowledged; system failures ->
//! retried with backoff, then dead-lettered. The AMQP and the Kafka consumers differ only in
//! how they receive, acknowledge and dead-letter a message.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use crate::adapters::messaging::contract::meeting::{
    Delivery, Inbound, Kind, MAX_MESSAGE, Received, read,
};
use crate::application::AppError;
use crate::application::error::Chain;
use crate::application::inbound::{Handled, MeetingEvents};
use crate::application::meter::Meter;
use crate::application::ports::Scenario;
use crate::domain::text;

/// What to do with a message once handled: the label is the `outcome` of
/// `consumer_messages_total`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Settle it: its effects (or its business failure) are committed, or it was a duplicate.
    Ack(&'static str),
    /// Dead-letter it, with the reason.
    Reject(&'static str, String),
}

/// Runs `session` until `stop`, starting it again after each failure with a backoff (200 ms
/// doubling to 30 s; a session that ran a minute was healthy, so the backoff starts afresh),
/// logging the first failure and then each power of two. `session` returns `Ok` when
/// stopped.
pub async fn reconnecting<E, F, Fut>(what: &str, stop: &CancellationToken, mut session: F)
where
    E: std::error::Error + 'static,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
{
    let mut failures = 0u32;
    while !stop.is_cancelled() {
        let began = tokio::time::Instant::now();
        match session().await {
            Ok(()) => break,
            Err(err) => {
                if began.elapsed() > Duration::from_secs(60) {
                    failures = 0;
                }
                failures = failures.saturating_add(1);
                if failures == 1 || failures.is_power_of_two() {
                    tracing::error!(error = %Chain(&err), failures, "{what} failed; starting again");
                }
                // 200 ms doubling, at most 200 ms · 2⁷.
                let pause = crate::domain::backoff::doubled_pause(
                    Duration::from_millis(200),
                    failures,
                    Duration::from_millis(200 << 7),
                );
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}

/// Hands decoded messages to the use cases with the §7 failure policy.
pub struct MeetingHandler {
    pub events: Arc<MeetingEvents>,
    pub retries: u32,
    pub retry_backoff: Duration,
    /// Honour the `x-mock-scenario` header (mock providers only).
    pub honour_mock_scenario: bool,
    pub meter: Meter,
}

impl MeetingHandler {
    /// A handler recording its metrics nowhere until given the app's `meter`.
    pub fn new(
        events: Arc<MeetingEvents>,
        retries: u32,
        retry_backoff: Duration,
        honour_mock_scenario: bool,
    ) -> Self {
        MeetingHandler { events, retries, retry_backoff, honour_mock_scenario, meter: Meter::default() }
    }

    /// A message of `kind`, as [`read`] decoded it, to its use case, retrying a system
    /// failure `retries` times with backoff. `scenario`: the message's `x-mock-scenario`
    /// header as the broker gave it (`Err` when present but not text).
    pub async fn handle(
        &self,
        kind: Kind,
        inbound: Inbound,
        scenario: Result<Option<String>, String>,
        correlation_id: Option<String>,
    ) -> Verdict {
        // Another system's correlation id is kept, not trusted: one with control characters
        // is dropped, a long one cut to fit (never a reason to lose the message).
        let correlation_id = correlation_id
            .filter(|c| !c.is_empty() && !c.chars().any(text::is_refused_control))
            .map(|c| text::excerpt(&c, text::limits::CORRELATION_ID));
        let scenario = match (self.honour_mock_scenario, scenario) {
            (true, Err(why)) => return Verdict::Reject("malformed", why),
            (true, Ok(Some(text))) => match Scenario::parse(&text) {
                Ok(s) => s,
                Err(e) => return Verdict::Reject("malformed", format!("x-mock-scenario: {e}")),
            },
            _ => Scenario::default(),
        };
        let mut attempt = 0;
        loop {
            let result = match inbound.clone() {
                Inbound::Register(m) => {
                    self.events.participant_registered(m, scenario, correlation_id.clone()).await
                }
                Inbound::RegisterAtFee(m) => {
                    self.events.participant_registered_at_fee(m, scenario, correlation_id.clone()).await
                }
                Inbound::Cancel(m) => self.events.participant_cancelled(m, scenario).await,
                Inbound::Deleted(m) => self.events.meeting_deleted(m, scenario).await,
            };
            match result {
                Ok(Handled::Processed) => return Verdict::Ack("processed"),
                Ok(Handled::Duplicate) => return Verdict::Ack("duplicate"),
                Ok(Handled::ConflictingDuplicate) => return Verdict::Ack("conflicting_duplicate"),
                Ok(Handled::BusinessFailure(why)) => {
                    tracing::info!(consumer = kind.label(), %why, "business failure acknowledged");
                    return Verdict::Ack("business_failure");
                }
                Err(AppError::Validation { field, message }) => {
                    return Verdict::Reject("malformed", format!("{field}: {message}"));
                }
                Err(err) if attempt < self.retries => {
                    let pause =
                        crate::domain::backoff::doubled_pause(self.retry_backoff, attempt, Duration::MAX);
                    tracing::warn!(consumer = kind.label(), error = %Chain(&err), attempt, "system failure; retrying");
                    self.meter.record(|| {
                        metrics::counter!("consumer_messages_total", "consumer" => kind.label(), "outcome" => "retried")
                            .increment(1)
                    });
                    attempt += 1;
                    tokio::time::sleep(pause).await;
                }
                Err(err) => {
                    return Verdict::Reject(
                        "dead_lettered",
                        format!("system failure after {attempt} retries: {}", Chain(&err)),
                    );
                }
            }
        }
    }
}
