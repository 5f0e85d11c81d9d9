//! The fan-out (docs/spec.md §16): its own cursor over the outbox, apart from the relay, so
//! that an endpoint's trouble never reaches the relay or the saga. Each committed event of
//! ours is read once; for each enabled endpoint of the event's merchant that asks for it and
//! existed when it was written, one `PENDING` message is made — all of a batch with the
//! cursor's move, in one transaction, so a crash makes each message once or not yet.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::budget::Budget;
use crate::application::AppError;
use crate::application::jobs::PeriodicJob;
use crate::application::meter::Meter;
use crate::application::ports::{Clock, FanoutBatch, OutboxEventView, WebhookEvent, WebhookFanoutStore};
use crate::domain::ids::MerchantId;
use crate::domain::merchant::default_merchant_id;
use crate::domain::webhook::{EVENT_TYPES, Endpoint};
use crate::domain::webhook_message::Message;

/// Events read per batch.
const BATCH: u32 = 500;
/// Batches per round at most (a backlog is worked through over a few rounds, each short).
const BATCHES_PER_ROUND: usize = 20;

pub struct FanOut {
    store: Arc<dyn WebhookFanoutStore>,
    clock: Arc<dyn Clock>,
    meter: Meter,
    /// The delivery workers of this process, woken when messages were made.
    deliveries: Arc<Notify>,
    interval: Duration,
    /// `webhooks.max_rate`: messages made a second at most.
    budget: Arc<Budget>,
    /// Messages an event made in the last batch that made any (at least 1): how many events
    /// the budget's room is.
    per_event: AtomicUsize,
}

/// An event read from its envelope: its merchant, the endpoint it is about (our own
/// delivery events), and the body the endpoints get.
#[derive(Debug, Clone, PartialEq)]
struct Read {
    merchant: MerchantId,
    about_endpoint: Option<String>,
    body: String,
}

/// Reads an envelope (docs/spec.md §6); `None` when it is not one. An event naming no
/// merchant (written before merchants) is `DEFAULT`'s.
fn read_envelope(view: &OutboxEventView) -> Option<Read> {
    let envelope: Value = serde_json::from_str(&view.envelope).ok()?;
    let data = envelope.get("payload")?.clone();
    let merchant = match data.get("merchantId").and_then(Value::as_str) {
        Some(id) => id.parse::<uuid::Uuid>().ok().map(MerchantId::from_uuid)?,
        None => default_merchant_id(),
    };
    let about_endpoint = data.get("endpointId").and_then(Value::as_str).map(str::to_owned);
    let body = json!({
        "type": view.event_type,
        "timestamp": envelope.get("occurredAt").cloned().unwrap_or(Value::Null),
        "data": data,
    });
    Some(Read { merchant, about_endpoint, body: body.to_string() })
}

/// The messages `view` makes: one per endpoint that takes it, existed when it was written,
/// and is not the endpoint the event is about.
fn messages_for(
    view: &OutboxEventView,
    read: &Read,
    endpoints: &[Endpoint],
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<Message> {
    endpoints
        .iter()
        .filter(|e| e.takes(read.merchant, &view.event_type) && e.created_at <= view.created_at)
        .filter(|e| read.about_endpoint.as_deref() != Some(e.id.to_string().as_str()))
        .map(|e| Message::new(e.id, view.event_id, &view.event_type, now))
        .collect()
}

impl FanOut {
    pub fn new(
        store: Arc<dyn WebhookFanoutStore>,
        clock: Arc<dyn Clock>,
        meter: Meter,
        deliveries: Arc<Notify>,
        interval: Duration,
    ) -> Self {
        FanOut {
            store,
            clock,
            meter,
            deliveries,
            interval,
            budget: Arc::new(Budget::new(0)),
            per_event: AtomicUsize::new(1),
        }
    }

    /// Makes at most `budget`'s messages a second; the events past it wait in the outbox.
    #[must_use]
    pub fn with_budget(mut self, budget: Arc<Budget>) -> Self {
        self.budget = budget;
        self
    }

    /// Fans out what has been committed since the last round: how many messages were made.
    ///
    /// # Errors
    /// `Unavailable` when the database fails (the cursor stays; the next round reads again).
    pub async fn run_once(&self) -> Result<usize, AppError> {
        let mut made = 0;
        // The last event read while more were waiting (how far behind the round left the
        // cursor), once a batch was read: a round the budget let read nothing leaves the
        // gauge as the last one set it.
        let mut behind = None;
        let mut read_any = false;
        for _ in 0..BATCHES_PER_ROUND {
            let room = self.budget.available();
            if room == 0 {
                break;
            }
            let per_event = self.per_event.load(Ordering::Relaxed).max(1);
            let limit = u32::try_from(room / per_event).unwrap_or(BATCH).clamp(1, BATCH);
            let batch = self.store.next_events(EVENT_TYPES, limit).await?;
            let full = batch.events.len() >= limit as usize;
            read_any = true;
            behind = batch.events.last().filter(|_| full).map(|e| e.created_at);
            let read = batch.events.len();
            let Some(messages) = self.fan_out_batch(batch).await? else {
                // Another fan-out moved the cursor: its messages stand, read again next round.
                break;
            };
            made += messages;
            self.budget.spend(messages);
            if messages > 0 {
                self.per_event.store(messages.div_ceil(read.max(1)), Ordering::Relaxed);
                self.meter.record(|| metrics::counter!("webhook_messages_total").increment(messages as u64));
                self.deliveries.notify_one();
            }
            if !full {
                break;
            }
        }
        if read_any {
            let behind =
                behind.map_or(0.0, |at| (self.clock.now() - at).num_milliseconds().max(0) as f64 / 1000.0);
            self.meter.record(|| metrics::gauge!("webhook_fanout_behind_seconds").set(behind));
        }
        Ok(made)
    }

    /// One batch's messages made and the cursor moved past it, in one transaction: how many
    /// messages, or `None` when another fan-out moved the cursor first.
    async fn fan_out_batch(&self, batch: FanoutBatch) -> Result<Option<usize>, AppError> {
        let reads: Vec<(OutboxEventView, Read)> = batch
            .events
            .into_iter()
            .filter_map(|view| {
                let read = read_envelope(&view);
                if read.is_none() {
                    tracing::warn!(event_id = %view.event_id, "an outbox event is no envelope: not fanned out");
                }
                read.map(|r| (view, r))
            })
            .collect();
        let merchants: BTreeSet<MerchantId> = reads.iter().map(|(_, r)| r.merchant).collect();
        let merchants: Vec<MerchantId> = merchants.into_iter().collect();
        let endpoints =
            if merchants.is_empty() { Vec::new() } else { self.store.enabled_endpoints(&merchants).await? };
        let now = self.clock.now();
        let mut events = Vec::new();
        let mut messages = Vec::new();
        for (view, read) in &reads {
            let made = messages_for(view, read, &endpoints, now);
            if !made.is_empty() {
                events.push(WebhookEvent {
                    event_id: view.event_id,
                    merchant_id: read.merchant,
                    event_type: view.event_type.clone(),
                    body: read.body.clone(),
                    created_at: view.created_at,
                });
                messages.extend(made);
            }
        }
        let moved = self.store.fan_out(&batch.read, &batch.next, &events, &messages).await?;
        Ok(moved.then_some(messages.len()))
    }
}

#[async_trait]
impl PeriodicJob for FanOut {
    fn name(&self) -> &'static str {
        "webhook fan-out"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    async fn round(&self) -> Result<Option<String>, AppError> {
        let made = self.run_once().await?;
        Ok((made > 0).then(|| format!("{made} webhook messages made")))
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::domain::ids::{EventId, WebhookEndpointId};
    use crate::domain::webhook::EventFilter;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn endpoint(merchant: MerchantId, filter: EventFilter, created: i64) -> Endpoint {
        Endpoint {
            id: WebhookEndpointId::new(),
            merchant_id: merchant,
            url: "https://erp.example/h".into(),
            description: String::new(),
            filter,
            disabled: None,
            created_at: at(created),
            last_success_at: None,
            failing_since: None,
        }
    }

    fn view(event_type: &str, payload: Value, created: i64) -> OutboxEventView {
        let event_id = EventId::new();
        let envelope = json!({
            "eventId": event_id.to_string(), "eventType": event_type, "occurredAt": "2026-12-06T00:00:00.000000Z",
            "payload": payload,
        });
        OutboxEventView {
            event_id,
            event_type: event_type.into(),
            envelope: envelope.to_string(),
            created_at: at(created),
        }
    }

    #[test]
    fn an_event_goes_to_its_merchants_endpoints_that_ask_for_it_and_existed() {
        let (a, b) = (MerchantId::new(), MerchantId::new());
        let all = endpoint(a, EventFilter::All, 10);
        let completed_only = endpoint(a, EventFilter::Only(vec!["order.completed".into()]), 10);
        let later = endpoint(a, EventFilter::All, 100);
        let others = endpoint(b, EventFilter::All, 10);
        let endpoints = [all.clone(), completed_only.clone(), later, others];
        let v = view("order.failed", json!({ "merchantId": a.to_string(), "orderId": "o" }), 50);
        let read = read_envelope(&v).unwrap();
        let made = messages_for(&v, &read, &endpoints, at(60));
        assert_eq!(made.iter().map(|m| m.endpoint_id).collect::<Vec<_>>(), vec![all.id]);
        let v = view("order.completed", json!({ "merchantId": a.to_string() }), 50);
        let made = messages_for(&v, &read_envelope(&v).unwrap(), &endpoints, at(60));
        assert_eq!(made.iter().map(|m| m.endpoint_id).collect::<Vec<_>>(), vec![all.id, completed_only.id]);
        assert!(made.iter().all(|m| m.event_id == v.event_id), "webhook-id is the event's id");
        let body: Value = serde_json::from_str(&read.body).unwrap();
        assert_eq!(
            body,
            json!({ "type": "order.failed", "timestamp": "2026-12-06T00:00:00.000000Z",
            "data": { "merchantId": a.to_string(), "orderId": "o" } })
        );
    }

    #[test]
    fn no_merchant_is_default_and_an_endpoint_never_hears_about_itself() {
        let v = view("payment.failed", json!({ "meetingId": "m" }), 5);
        assert_eq!(read_envelope(&v).unwrap().merchant, default_merchant_id());
        let a = MerchantId::new();
        let (one, two) = (endpoint(a, EventFilter::All, 0), endpoint(a, EventFilter::All, 0));
        let v = view(
            "webhook.endpoint.disabled",
            json!({ "merchantId": a.to_string(), "endpointId": one.id.to_string() }),
            5,
        );
        let made = messages_for(&v, &read_envelope(&v).unwrap(), &[one, two.clone()], at(6));
        assert_eq!(made.iter().map(|m| m.endpoint_id).collect::<Vec<_>>(), vec![two.id]);
        let garbage = OutboxEventView { envelope: "not json".into(), ..view("order.failed", json!({}), 0) };
        assert_eq!(read_envelope(&garbage), None);
    }

    /// `webhooks.max_rate` 100 with five endpoints taking every event, and a backlog: the
    /// first round reads a second's worth of events as if each made one message, makes five
    /// times that (a debt), and the next rounds read nothing until the debt is paid; then
    /// they read as many events as their room over five.
    #[tokio::test(start_paused = true)]
    async fn the_budget_bounds_the_messages_made_and_the_backlog_waits_in_the_outbox() {
        use std::sync::Mutex;

        use crate::application::ports::{FanoutBatch, MockClock, MockWebhookFanoutStore};
        let merchant = MerchantId::new();
        let endpoints: Vec<Endpoint> = (0..5).map(|_| endpoint(merchant, EventFilter::All, 0)).collect();
        let limits: Arc<Mutex<Vec<u32>>> = Arc::default();
        let mut store = MockWebhookFanoutStore::new();
        let seen = limits.clone();
        store.expect_next_events().returning(move |_, limit| {
            seen.lock().unwrap().push(limit);
            let events = (0..limit)
                .map(|_| view("order.completed", json!({ "merchantId": merchant.to_string() }), 1))
                .collect();
            Ok(FanoutBatch { events, ..FanoutBatch::default() })
        });
        store.expect_enabled_endpoints().returning(move |_| Ok(endpoints.clone()));
        store.expect_fan_out().returning(|_, _, _, _| Ok(true));
        let mut clock = MockClock::new();
        clock.expect_now().returning(|| at(10));
        let fanout = FanOut::new(
            Arc::new(store),
            Arc::new(clock),
            Meter::default(),
            Arc::default(),
            Duration::from_millis(250),
        )
        .with_budget(Arc::new(Budget::new(100)));

        assert_eq!(fanout.run_once().await.unwrap(), 500, "100 events read, five messages each");
        assert_eq!(fanout.run_once().await.unwrap(), 0, "400 owed: nothing read");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(fanout.run_once().await.unwrap(), 100, "the room (100) over five: 20 events");
        assert_eq!(*limits.lock().unwrap(), vec![100, 20]);
    }
}
