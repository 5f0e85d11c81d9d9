//! The delivery workers' unit tests against mock ports: what an answer makes of a message and
//! its endpoint, which secrets sign, and a lost claim.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tokio::sync::Notify;

use super::{Deliveries, DeliverySettings};
use crate::application::meter::Meter;
use crate::application::ports::{
    DeliveryRecord, DueMessage, EndpointChange, EndpointSecrets, MockClock, MockSecretBox,
    MockWebhookDeliveryStore, MockWebhookSender, PostAnswer, PostError, Recorded, Sealed,
};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{EventId, MerchantId, WebhookEndpointId};
use crate::domain::webhook::{DisabledReason, Endpoint, EventFilter, MessageStatus, Schedule};
use crate::domain::webhook_message::Message;

/// What a mock saw, for the test to read.
type Shared<T> = Arc<Mutex<Vec<T>>>;

fn at(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + s, 0).single().unwrap_or_default()
}

fn sealed(name: &str) -> Sealed {
    Sealed { key_id: "k".into(), data: name.into() }
}

fn due(previous_until: Option<DateTime<Utc>>) -> DueMessage {
    let endpoint = Endpoint {
        id: WebhookEndpointId::new(),
        merchant_id: MerchantId::new(),
        url: "https://erp.example/h".into(),
        description: String::new(),
        filter: EventFilter::All,
        disabled: None,
        created_at: at(0),
        last_success_at: None,
        failing_since: None,
    };
    DueMessage {
        message: Message::new(endpoint.id, EventId::new(), "order.completed", at(1)),
        secrets: EndpointSecrets {
            current: sealed("whsec_new"),
            previous: previous_until.map(|until| (sealed("whsec_old"), until)),
        },
        endpoint,
        body: "{}".into(),
        claimed_until: at(30),
        reclaimed: false,
    }
}

/// The workers on mocks: the clock at `at(10)`, secrets opened as their sealed text, the
/// sender answering `status`, the store handing out `due` once and keeping what is recorded.
fn deliveries(
    due: DueMessage,
    status: Result<u16, PostError>,
    answer: Recorded,
) -> (Arc<Deliveries>, Shared<DeliveryRecord>, Shared<Vec<String>>) {
    let signed: Shared<Vec<String>> = Arc::default();
    let mut sender = MockWebhookSender::new();
    let seen = signed.clone();
    sender.expect_post().returning(move |post| {
        seen.lock().unwrap().push(post.secrets.clone());
        PostAnswer { status, retry_after: None, body: "answer".into(), duration: Duration::from_millis(3) }
    });
    let mut store = MockWebhookDeliveryStore::new();
    let once = Mutex::new(Some(due));
    store
        .expect_claim_due()
        .returning(move |_, _, _, _, _| Ok(once.lock().unwrap().take().into_iter().collect()));
    let recorded: Shared<DeliveryRecord> = Arc::default();
    let kept = recorded.clone();
    store.expect_record().returning(move |records| {
        kept.lock().unwrap().extend(records.iter().cloned());
        Ok(vec![answer; records.len()])
    });
    (Arc::new(on_mocks(store, sender)), recorded, signed)
}

/// The workers on `store` and `sender`: the clock at `at(10)`, secrets opened as their
/// sealed text, 4 claimed at once.
fn on_mocks(store: MockWebhookDeliveryStore, sender: MockWebhookSender) -> Deliveries {
    let mut clock = MockClock::new();
    clock.expect_now().returning(|| at(10));
    let mut secrets = MockSecretBox::new();
    secrets.expect_open().returning(|s| Ok(s.data.clone().into_bytes()));
    let settings = DeliverySettings {
        schedule: Schedule(vec![Duration::from_secs(5), Duration::from_secs(300)]),
        timeout: Duration::from_secs(15),
        max_in_flight: 8,
        disable_after: Duration::from_secs(5 * 24 * 3600),
        workers: 4,
    };
    Deliveries::new(
        Arc::new(store),
        Arc::new(sender),
        Arc::new(secrets),
        Arc::new(clock),
        Meter::default(),
        settings,
        Arc::new(Notify::new()),
    )
}

#[tokio::test]
async fn a_gone_answer_fails_the_message_and_disables_the_endpoint_with_its_event_and_audit() {
    let (workers, recorded, _) = deliveries(due(None), Ok(410), Recorded::Done { disabled: true });
    assert_eq!(workers.deliver_due().await.unwrap(), 1);
    let recorded = recorded.lock().unwrap();
    let [record] = &recorded[..] else { panic!("one record: {recorded:?}") };
    assert_eq!((record.message.status, record.message.attempts), (MessageStatus::Failed, 1));
    assert_eq!((record.attempt.status.as_str(), record.attempt.response.as_str()), ("410", "answer"));
    let EndpointChange::Disabled { reason, event, audit } = &record.endpoint else {
        panic!("disabled: {:?}", record.endpoint)
    };
    assert_eq!(*reason, DisabledReason::Gone);
    assert_eq!(event.event_type, "webhook.endpoint.disabled");
    assert!(event.payload.contains(&record.message.endpoint_id.to_string()), "{}", event.payload);
    assert_eq!(audit.action, AuditAction::WebhookEndpointDisabled);
    assert_eq!(record.exhausted, None, "a 410 is no exhaustion");
}

#[tokio::test]
async fn a_failure_is_retried_on_the_schedule_and_a_timeout_is_named() {
    let (workers, recorded, _) =
        deliveries(due(None), Err(PostError::Timeout), Recorded::Done { disabled: false });
    workers.deliver_due().await.unwrap();
    let recorded = recorded.lock().unwrap();
    let record = &recorded[0];
    assert_eq!(record.message.status, MessageStatus::Pending);
    let next = record.message.next_attempt_at.unwrap();
    assert!(
        next >= at(10) + chrono::TimeDelta::milliseconds(4_500)
            && next <= at(10) + chrono::TimeDelta::milliseconds(5_500)
    );
    assert_eq!(record.attempt.status, "TIMEOUT");
    assert_eq!(record.endpoint, EndpointChange::Failed);
}

#[tokio::test]
async fn both_secrets_sign_during_the_overlap_and_only_the_new_after_it() {
    let (workers, _, signed) = deliveries(due(Some(at(60))), Ok(204), Recorded::Done { disabled: false });
    workers.deliver_due().await.unwrap();
    let (after, _, signed_after) = deliveries(due(Some(at(5))), Ok(204), Recorded::Done { disabled: false });
    after.deliver_due().await.unwrap();
    assert_eq!(signed.lock().unwrap()[0], vec!["whsec_new", "whsec_old"]);
    assert_eq!(signed_after.lock().unwrap()[0], vec!["whsec_new"]);
}

#[tokio::test]
async fn a_lost_claim_is_no_error() {
    let (workers, recorded, _) = deliveries(due(None), Ok(200), Recorded::ClaimLost);
    assert_eq!(
        workers.deliver_due().await.unwrap(),
        1,
        "attempted; its record gave way to the other worker's"
    );
    assert_eq!(recorded.lock().unwrap()[0].endpoint, EndpointChange::Succeeded);
}

/// `webhooks.max_rate` 3 with `workers` 4: a claim asks for what the budget allows, a round
/// over it claims nothing (the messages stay due), and what a claim did not find is given
/// back to the budget.
#[tokio::test(start_paused = true)]
async fn claims_stay_within_the_budget_and_give_back_what_they_did_not_find() {
    let mut sender = MockWebhookSender::new();
    sender.expect_post().returning(|_| PostAnswer {
        status: Ok(204),
        retry_after: None,
        body: String::new(),
        duration: Duration::from_millis(1),
    });
    let limits: Shared<u32> = Arc::default();
    let backlog = Arc::new(Mutex::new(4u32));
    let mut store = MockWebhookDeliveryStore::new();
    let (seen, left) = (limits.clone(), backlog.clone());
    store.expect_claim_due().returning(move |_, _, limit, _, _| {
        seen.lock().unwrap().push(limit);
        let mut left = left.lock().unwrap();
        let n = limit.min(*left);
        *left -= n;
        Ok((0..n).map(|_| due(None)).collect())
    });
    store.expect_record().returning(|records| Ok(vec![Recorded::Done { disabled: false }; records.len()]));
    let workers = Arc::new(on_mocks(store, sender).with_budget(Arc::new(super::Budget::new(3))));

    assert_eq!(workers.deliver_due().await.unwrap(), 3, "the budget's 3 of the 4 a claim takes");
    assert_eq!(workers.deliver_due().await.unwrap(), 0, "over the budget: no claim at all");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(workers.deliver_due().await.unwrap(), 1, "the last of the backlog");
    assert_eq!(workers.deliver_due().await.unwrap(), 0, "the 2 not found were given back, and found nothing");
    assert_eq!(*limits.lock().unwrap(), vec![3, 3, 2]);
}
