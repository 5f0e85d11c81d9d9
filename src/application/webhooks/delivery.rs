//! Delivery (docs/spec.md §16): workers claim the messages due, at most
//! `webhooks.max_in_flight` of an endpoint at once in this process, each attempt its own
//! task — a slow or dead endpoint holds its own slots and nobody else's. An attempt is signed
//! now (the timestamp is the attempt's, so a receiver's replay window holds), sent under the
//! event's id, and its outcome — the domain's — written with the attempt in one transaction,
//! conditional on the claim still being held.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::budget::Budget;
use super::outcomes::{delivery_event, endpoint_change, first_4k};
use crate::application::AppError;
use crate::application::meter::Meter;
use crate::application::ports::{
    AttemptRecord, Clock, DeliveryRecord, DueMessage, EndpointChange, EndpointSecrets, PostAnswer, Recorded,
    SecretBox, WebhookDeliveryStore, WebhookPost, WebhookSender,
};
use crate::domain::ids::WebhookEndpointId;
use crate::domain::webhook::{Answer, Schedule};
use crate::domain::webhook_message::{Attempted, Message};

/// How long a worker waits for work when nobody wakes it.
const POLL: Duration = Duration::from_millis(500);
/// Attempts in flight per worker process, as a multiple of `webhooks.workers` (a bound on
/// sockets and memory; each endpoint's own slots are the bound that matters).
const IN_FLIGHT_PER_WORKER: usize = 16;
/// Attempts written per transaction at most.
const RECORD_BATCH: usize = 256;
/// How long a made attempt may wait to be written (a crash in between sends it again).
const RECORD_EVERY: Duration = Duration::from_millis(20);
/// How long workers over `webhooks.max_rate` wait before claiming again, at least (a claim
/// then takes what the budget gathered meanwhile, not one message at a time).
const BUDGET_PAUSE: Duration = Duration::from_millis(50);
/// A claim outlives the attempt's timeout by this much.
const CLAIM_MARGIN: Duration = Duration::from_secs(5);

/// `webhooks.*` as delivery reads them.
#[derive(Debug, Clone)]
pub struct DeliverySettings {
    pub schedule: Schedule,
    /// How long an attempt waits for its answer.
    pub timeout: Duration,
    /// Attempts in flight to one endpoint at once (per worker process).
    pub max_in_flight: u32,
    /// An endpoint failing this long with no success is turned off.
    pub disable_after: Duration,
    /// Messages claimed at once (per worker process); in flight at most 16 times that.
    pub workers: u32,
}

pub struct Deliveries {
    store: Arc<dyn WebhookDeliveryStore>,
    sender: Arc<dyn WebhookSender>,
    secrets: Arc<dyn SecretBox>,
    clock: Arc<dyn Clock>,
    meter: Meter,
    settings: DeliverySettings,
    /// Attempts in flight per endpoint.
    busy: Mutex<HashMap<WebhookEndpointId, u32>>,
    wake: Arc<Notify>,
    /// Attempts made and not yet written, written in batches by [`Self::flush`].
    unrecorded: Mutex<Vec<DeliveryRecord>>,
    recorded: Notify,
    /// `webhooks.max_rate`: attempts a second at most.
    budget: Arc<Budget>,
}

/// One of an endpoint's slots, given back when the attempt ends however it ends.
struct Slot {
    deliveries: Arc<Deliveries>,
    endpoint: WebhookEndpointId,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut busy = self.deliveries.busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = busy.get_mut(&self.endpoint) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                busy.remove(&self.endpoint);
            }
        }
    }
}

/// A draw in `[-1, 1]` for the schedule's jitter (0 when the system has no randomness).
fn jitter() -> f64 {
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.0;
    }
    f64::from(u32::from_le_bytes(bytes)) / f64::from(u32::MAX) * 2.0 - 1.0
}

impl Deliveries {
    pub fn new(
        store: Arc<dyn WebhookDeliveryStore>,
        sender: Arc<dyn WebhookSender>,
        secrets: Arc<dyn SecretBox>,
        clock: Arc<dyn Clock>,
        meter: Meter,
        settings: DeliverySettings,
        wake: Arc<Notify>,
    ) -> Self {
        Deliveries {
            store,
            sender,
            secrets,
            clock,
            meter,
            settings,
            busy: Mutex::default(),
            wake,
            unrecorded: Mutex::default(),
            recorded: Notify::new(),
            budget: Arc::new(Budget::new(0)),
        }
    }

    /// Attempts at most `budget`'s messages a second; the rest stay due.
    #[must_use]
    pub fn with_budget(mut self, budget: Arc<Budget>) -> Self {
        self.budget = budget;
        self
    }

    /// A slot of `endpoint`, if it has one free.
    fn slot(self: &Arc<Self>, endpoint: WebhookEndpointId) -> Option<Slot> {
        let mut busy = self.busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = busy.entry(endpoint).or_default();
        if *n >= self.settings.max_in_flight {
            return None;
        }
        *n += 1;
        Some(Slot { deliveries: self.clone(), endpoint })
    }

    /// Claims at most `limit` due messages, each with a slot of its endpoint; those beyond an
    /// endpoint's free slots are given back.
    async fn claim(self: &Arc<Self>, limit: u32) -> Result<Vec<(DueMessage, Slot)>, AppError> {
        let allowed = self.budget.take(limit as usize);
        if allowed == 0 {
            return Ok(Vec::new());
        }
        let claimed = self.claim_within(u32::try_from(allowed).unwrap_or(limit)).await;
        let used = claimed.as_ref().map_or(0, Vec::len);
        self.budget.give_back(allowed - used);
        claimed
    }

    /// [`Self::claim`] within the budget's `limit`.
    async fn claim_within(self: &Arc<Self>, limit: u32) -> Result<Vec<(DueMessage, Slot)>, AppError> {
        let full: Vec<WebhookEndpointId> = {
            let busy = self.busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            busy.iter().filter(|(_, n)| **n >= self.settings.max_in_flight).map(|(e, _)| *e).collect()
        };
        let now = self.clock.now();
        let hold =
            chrono::Duration::from_std(self.settings.timeout + CLAIM_MARGIN).unwrap_or(chrono::Duration::MAX);
        let until = now + hold;
        let due = self.store.claim_due(now, until, limit, self.settings.max_in_flight, &full).await?;
        let mut claimed = Vec::with_capacity(due.len());
        let mut extra = Vec::new();
        for d in due {
            match self.slot(d.endpoint.id) {
                Some(slot) => claimed.push((d, slot)),
                None => extra.push((d.endpoint.id, d.message.event_id)),
            }
        }
        if !extra.is_empty() {
            self.store.release(&extra, until).await?;
        }
        Ok(claimed)
    }

    /// Claims what is due and attempts all of it before returning: how many were attempted
    /// (the tests' and the operator's one round; workers run [`Self::run_until_stopped`]).
    ///
    /// # Errors
    /// `Unavailable` when the claim fails.
    pub async fn deliver_due(self: &Arc<Self>) -> Result<usize, AppError> {
        let claimed = self.claim(self.settings.workers).await?;
        let n = claimed.len();
        futures_util::future::join_all(claimed.into_iter().map(|(due, slot)| self.deliver(due, slot))).await;
        self.flush().await?;
        Ok(n)
    }

    /// Writes the attempts made so far, a batch per transaction: how many.
    ///
    /// # Errors
    /// `Unavailable` when the database fails (the batch is kept for the next flush).
    pub async fn flush(&self) -> Result<usize, AppError> {
        let mut written = 0;
        loop {
            let batch: Vec<DeliveryRecord> = {
                let mut pending = self.unrecorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let n = pending.len().min(RECORD_BATCH);
                pending.drain(..n).collect()
            };
            if batch.is_empty() {
                return Ok(written);
            }
            let answers = match self.store.record(&batch).await {
                Ok(answers) => answers,
                Err(err) => {
                    let mut pending =
                        self.unrecorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    pending.splice(0..0, batch);
                    return Err(err.into());
                }
            };
            written += batch.len();
            for (record, answer) in batch.iter().zip(answers) {
                self.count_recorded(record, answer);
            }
        }
    }

    fn count_recorded(&self, record: &DeliveryRecord, answer: Recorded) {
        match (answer, &record.endpoint) {
            (Recorded::Done { disabled: true }, EndpointChange::Disabled { reason, .. }) => {
                let reason = reason.as_str();
                self.meter.record(|| {
                    metrics::counter!("webhook_endpoints_disabled_total", "reason" => reason).increment(1)
                });
                tracing::warn!(endpoint = %record.message.endpoint_id, reason, "a webhook endpoint was disabled");
            }
            // The claim ran out mid-attempt and another worker took the message: its attempt
            // stands; this one was a duplicate, as the specification allows.
            (Recorded::ClaimLost, _) => {
                self.meter.record(|| metrics::counter!("webhook_claims_lost_total").increment(1));
            }
            _ => {}
        }
    }

    /// Writes attempts as they come, until `stop` and the last one written.
    async fn recorder(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let stopping = tokio::select! {
                _ = stop.cancelled() => true,
                _ = self.recorded.notified() => false,
                _ = tokio::time::sleep(RECORD_EVERY) => false,
            };
            if let Err(err) = self.flush().await {
                tracing::warn!(error = %crate::application::error::Chain(&err), "webhook attempts not recorded yet");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            if stopping
                && self.unrecorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty()
            {
                return;
            }
        }
    }

    /// The delivery workers: claim as slots free up, each attempt its own task, until `stop`;
    /// then the attempts in flight finish (each bounded by the timeout).
    ///
    /// A claim takes at most `workers` messages, and is made once a quarter of them have
    /// finished, when nothing is in flight, or every [`POLL`]. In flight there may be
    /// [`IN_FLIGHT_PER_WORKER`] × `workers`: only an endpoint's own slots bound what is sent to
    /// it, so slow endpoints waiting on their answers never hold the claims of the others.
    pub async fn run_until_stopped(self: Arc<Self>, stop: CancellationToken) {
        let recording = CancellationToken::new();
        let recorder = tokio::spawn(self.clone().recorder(recording.clone()));
        let mut tasks = tokio::task::JoinSet::new();
        let batch = self.settings.workers as usize;
        let cap = batch.saturating_mul(IN_FLIGHT_PER_WORKER);
        let mut finished = batch;
        let mut last = tokio::time::Instant::now();
        loop {
            while tasks.try_join_next().is_some() {
                finished += 1;
            }
            let room = cap.saturating_sub(tasks.len()).min(batch);
            let mut pause = POLL;
            let due = finished >= batch.div_ceil(4) || tasks.is_empty() || last.elapsed() >= POLL;
            if room > 0 && due {
                (finished, last) = (0, tokio::time::Instant::now());
                match self.claim(u32::try_from(room).unwrap_or(u32::MAX)).await {
                    Ok(claimed) => {
                        for (due, slot) in claimed {
                            let me = self.clone();
                            tasks.spawn(async move { me.deliver(due, slot).await });
                        }
                    }
                    Err(err) => {
                        tracing::warn!(error = %crate::application::error::Chain(&err), "webhook claim failed");
                        pause = Duration::from_secs(1);
                    }
                }
            }
            // Over the budget: the next claim once it has room for a few at least.
            let over = self.budget.wait();
            if !over.is_zero() {
                pause = over.max(BUDGET_PAUSE);
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.wake.notified() => finished = batch,
                _ = tokio::time::sleep(pause) => if !over.is_zero() { finished = batch },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => finished += 1,
            }
        }
        while tasks.join_next().await.is_some() {}
        recording.cancel();
        let _ = recorder.await;
    }

    async fn deliver(&self, due: DueMessage, slot: Slot) {
        let (endpoint, event) = (due.endpoint.id, due.message.event_id);
        match self.attempt(due).await {
            Ok(record) => {
                let mut pending = self.unrecorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                pending.push(record);
                if pending.len() >= RECORD_BATCH {
                    self.recorded.notify_one();
                }
            }
            Err(err) => {
                tracing::warn!(%endpoint, %event, error = %crate::application::error::Chain(&err), "a webhook attempt was not made");
            }
        }
        drop(slot);
    }

    /// The secrets that sign now: the current one, and the previous one until its end.
    fn signing(&self, secrets: &EndpointSecrets, now: DateTime<Utc>) -> Result<Vec<String>, AppError> {
        let open = |sealed| {
            let plain = self.secrets.open(sealed).map_err(|e| AppError::internal(e.to_string()))?;
            String::from_utf8(plain).map_err(|_| AppError::internal("a sealed secret is not text"))
        };
        let mut out = vec![open(&secrets.current)?];
        if let Some((previous, until)) = &secrets.previous
            && *until > now
        {
            out.push(open(previous)?);
        }
        Ok(out)
    }

    /// What an attempt writes: the message, its attempt, its endpoint's change and our events.
    fn record_of(
        &self,
        due: &DueMessage,
        message: Message,
        outcome: Attempted,
        answer: &PostAnswer,
        status: String,
        at: DateTime<Utc>,
    ) -> DeliveryRecord {
        let mut endpoint = due.endpoint.clone();
        let change = endpoint_change(&mut endpoint, outcome, at, self.settings.disable_after);
        let exhausted = (outcome == Attempted::Exhausted).then(|| {
            let extra = json!({
                "eventId": message.event_id.to_string(),
                "eventType": message.event_type,
                "attempts": message.attempts,
                "lastStatus": status,
            });
            delivery_event("webhook.message.exhausted", &endpoint, extra, at)
        });
        DeliveryRecord {
            attempt: AttemptRecord {
                endpoint_id: endpoint.id,
                event_id: message.event_id,
                attempt: message.attempts,
                at,
                status,
                duration_ms: u64::try_from(answer.duration.as_millis()).unwrap_or(u64::MAX),
                response: first_4k(&answer.body),
            },
            message,
            claimed_until: due.claimed_until,
            endpoint: change,
            exhausted,
        }
    }

    /// One attempt: signed now, sent, and what it makes of the message and its endpoint.
    async fn attempt(&self, due: DueMessage) -> Result<DeliveryRecord, AppError> {
        if due.reclaimed {
            self.meter.record(|| metrics::counter!("webhook_reclaimed_total").increment(1));
        }
        let now = self.clock.now();
        let post = WebhookPost {
            url: due.endpoint.url.clone(),
            id: due.message.event_id.to_string(),
            timestamp: now.timestamp(),
            body: due.body.clone(),
            secrets: self.signing(&due.secrets, now)?,
        };
        let answer = self.sender.post(&post).await;
        let at = self.clock.now();
        let (read, status) = match answer.status {
            Ok(code) => (Answer::of_status(code, answer.retry_after), code.to_string()),
            Err(e) => (Answer::Failure { retry_after: None }, e.as_str().to_owned()),
        };
        let mut message: Message = due.message.clone();
        let outcome = message
            .attempted(read, &self.settings.schedule, jitter(), at)
            .map_err(|e| AppError::internal(e.to_string()))?;
        let record = self.record_of(&due, message, outcome, &answer, status, at);
        let label = outcome_label(outcome);
        let seconds = answer.duration.as_secs_f64();
        self.meter.record(|| {
            metrics::counter!("webhook_attempts_total", "outcome" => label).increment(1);
            metrics::histogram!("webhook_attempt_duration_seconds").record(seconds);
        });
        Ok(record)
    }
}

fn outcome_label(outcome: Attempted) -> &'static str {
    match outcome {
        Attempted::Delivered => "delivered",
        Attempted::RetryAt(_) => "retry",
        Attempted::Exhausted => "exhausted",
        Attempted::Failed => "failed",
        Attempted::Gone => "gone",
    }
}
