//! What both confirming publishers (RabbitMQ, Kafka) do alike: the one encoding step that
//! turns a batch into its messages under the contract (with each record's publish span), a
//! failed outcome, and the rule that reads a batch's verdicts as a broker that takes
//! messages or one that took none.

use std::sync::Arc;

use crate::adapters::messaging::contract::{Broker, Contract, Encoded, WireMessage};
use crate::application::ports::{OutboxRecord, PublishOutcome};
use crate::domain::outbox::FailureCode;

/// A message of a record, as a publisher sends it.
pub(super) enum Message {
    /// The native message (docs/messages.md): the publisher's own fast path, its
    /// properties or headers made from the record, with the publish span's `traceparent`.
    Native { traceparent: Option<String> },
    /// A message the contract encoded.
    Contract(WireMessage),
}

/// One message of a batch, with its record; `Err`: the record cannot be sent, and why.
pub(super) struct Outgoing<'r> {
    pub record: &'r Arc<OutboxRecord>,
    pub message: Result<Message, PublishOutcome>,
}

/// A batch as its messages, in order; `groups[i]`: how many record `i` went out as (the
/// publishers' verdicts are per message, `per_record` folds them back).
pub(super) struct EncodedBatch<'r> {
    pub messages: Vec<Outgoing<'r>>,
    pub groups: Vec<usize>,
}

/// The one encoding step of both publishers: each record of `batch` through `contract` for
/// `broker`. With traces on, each record gets a publish span to `topic` (`None`: the
/// record's routing key) in the trace of the request that wrote the event, whose context its messages carry on. A record
/// the contract cannot encode is one `UNENCODABLE` outcome (dead-lettered with the reason).
pub(super) fn encode_batch<'r>(
    contract: &Contract,
    broker: Broker,
    batch: &'r [Arc<OutboxRecord>],
    topic: Option<&str>,
) -> EncodedBatch<'r> {
    let mut messages = Vec::with_capacity(batch.len());
    let mut groups = Vec::with_capacity(batch.len());
    for record in batch {
        let traceparent = publish_traceparent(record, topic.unwrap_or(&record.routing_key));
        match contract.encode(record, traceparent.as_deref(), broker) {
            Ok(Encoded::Native) => {
                groups.push(1);
                messages.push(Outgoing { record, message: Ok(Message::Native { traceparent }) });
            }
            Ok(Encoded::Messages(encoded)) => {
                groups.push(encoded.len());
                messages.extend(
                    encoded.into_iter().map(|m| Outgoing { record, message: Ok(Message::Contract(m)) }),
                );
            }
            Err(why) => {
                groups.push(1);
                messages.push(Outgoing { record, message: Err(failed(FailureCode::Unencodable, why)) });
            }
        }
    }
    EncodedBatch { messages, groups }
}

pub(super) fn failed(code: FailureCode, reason: impl Into<String>) -> PublishOutcome {
    PublishOutcome::Failed { code, reason: reason.into() }
}

/// With traces on: a publish span for `record` to `destination` in the trace of the request
/// that wrote the event; its context (`traceparent`), which the message carries on to its
/// consumers. `None` with traces off.
fn publish_traceparent(record: &OutboxRecord, destination: &str) -> Option<String> {
    if !crate::telemetry::tracing_enabled() {
        return None;
    }
    let span = tracing::info_span!(
        "outbox.publish",
        otel.name = %format!("{destination} publish"),
        event_type = %record.event_type,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    crate::telemetry::continue_trace(&span, record.traceparent.as_deref());
    span.in_scope(crate::telemetry::current_traceparent)
}

/// What a batch's verdicts say of the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// A message was confirmed: the broker takes messages.
    Flowing,
    /// Nothing answered in time: the broker took nothing (blocked, unreachable). Every
    /// outcome is now `BROKER_UNAVAILABLE`, which spends no retry (docs/spec.md §6).
    Stalled,
    /// Some refused, none confirmed: the verdicts stand as they are.
    Unsure,
}

/// The broker-stalled rule: a non-empty batch whose every outcome `timed_out` took nothing,
/// so each becomes `BROKER_UNAVAILABLE` (with `reason`, or its own where `None`).
pub(super) fn read_flow(
    outcomes: &mut [PublishOutcome],
    timed_out: impl Fn(&FailureCode) -> bool,
    reason: Option<&str>,
) -> Flow {
    if outcomes.iter().any(|o| matches!(o, PublishOutcome::Confirmed)) {
        return Flow::Flowing;
    }
    let all_timed_out = !outcomes.is_empty()
        && outcomes.iter().all(|o| matches!(o, PublishOutcome::Failed { code, .. } if timed_out(code)));
    if !all_timed_out {
        return Flow::Unsure;
    }
    for outcome in outcomes.iter_mut() {
        if let PublishOutcome::Failed { reason: own, .. } = outcome {
            let why = reason.map_or_else(|| std::mem::take(own), str::to_owned);
            *outcome = failed(FailureCode::BrokerUnavailable, why);
        }
    }
    Flow::Stalled
}

#[cfg(test)]
mod tests {
    use super::*;

    fn late() -> PublishOutcome {
        failed(FailureCode::ConfirmTimeout, "late")
    }

    fn is_unavailable(o: &PublishOutcome, why: &str) -> bool {
        matches!(o, PublishOutcome::Failed { code: FailureCode::BrokerUnavailable, reason } if reason == why)
    }

    #[test]
    fn a_batch_of_which_nothing_answered_in_time_is_a_stalled_broker() {
        let timed_out = |c: &FailureCode| matches!(c, FailureCode::ConfirmTimeout);
        let mut all = vec![late(), late()];
        assert_eq!(read_flow(&mut all, timed_out, None), Flow::Stalled);
        assert!(all.iter().all(|o| is_unavailable(o, "late")), "each keeps its own reason");
        let mut named = vec![late()];
        assert_eq!(read_flow(&mut named, timed_out, Some("blocked")), Flow::Stalled);
        assert!(is_unavailable(&named[0], "blocked"));

        let mut some = vec![PublishOutcome::Confirmed, late()];
        assert_eq!(read_flow(&mut some, timed_out, None), Flow::Flowing);
        assert!(matches!(some[1], PublishOutcome::Failed { code: FailureCode::ConfirmTimeout, .. }));

        let mut refused = vec![failed(FailureCode::Nacked, "no"), late()];
        assert_eq!(read_flow(&mut refused, timed_out, None), Flow::Unsure);
        assert!(matches!(refused[1], PublishOutcome::Failed { code: FailureCode::ConfirmTimeout, .. }));

        assert_eq!(read_flow(&mut [], timed_out, None), Flow::Unsure, "nothing sent says nothing");
    }
}
