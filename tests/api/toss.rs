//! The Toss adapter against the fake Toss API (`fake-toss`, over real HTTP): docs/spec.md §10's
//! calls and answers, idempotency as Toss keeps it, and a fault per call kind (the effect
//! happens at Toss, the answer is lost) ending in records that match Toss's, the effect made
//! once.

use std::time::Duration;

use fake_toss::{FakeSettings, RunningFake};
use orchestrator::adapters::Secret;
use orchestrator::adapters::providers::toss::{Meaning, TossStatus};
use orchestrator::adapters::providers::{TossClient, TossError, TossPaymentGateway, TossSettings};
use orchestrator::application::ports::{
    ApprovalOutcome, ApprovePayment, BillingKey, CancelError, CancelPayment, GatewayError, LookupOutcome,
    PaymentAuthorization, PaymentGateway, Scenario,
};
use orchestrator::domain::ids::{OrderId, PaymentId};
use orchestrator::domain::money::Money;
use serde_json::{Value, json};

pub(crate) const SECRET: &str = "test_sk_fake_for_the_adapter_tests";

pub(crate) struct Fake {
    pub running: RunningFake,
    http: reqwest::Client,
}

impl Fake {
    pub(crate) async fn start() -> Fake {
        let settings = FakeSettings { secret_key: SECRET.into(), ..FakeSettings::default() };
        let running = fake_toss::start("127.0.0.1:0", settings).expect("the fake binds a free port");
        Fake { running, http: reqwest::Client::new() }
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> Value {
        let response =
            self.http.post(format!("{}{path}", self.running.base_url)).json(&body).send().await.unwrap();
        assert!(response.status().is_success(), "{path}: {}", response.status());
        response.json().await.unwrap_or(Value::Null)
    }

    /// The widget's part of a checkout: a `paymentKey` for `order_id` and `amount`.
    pub(crate) async fn checkout(&self, order_id: &str, amount: i64, decline: Option<&str>) -> String {
        let session = self
            .post("/__fake/checkout", json!({ "orderId": order_id, "amount": amount, "decline": decline }))
            .await;
        session["paymentKey"].as_str().unwrap().to_owned()
    }

    pub(crate) async fn fault(&self, operation: &str, kind: &str, delay_ms: u64, times: u32) {
        let body = json!({ "operation": operation, "kind": kind, "delayMs": delay_ms, "times": times });
        let response = self
            .http
            .post(format!("{}/__fake/faults", self.running.base_url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
    }

    async fn counts(&self, kind: &str, operation: &str) -> u64 {
        let calls: Value = self
            .http
            .get(format!("{}/__fake/calls", self.running.base_url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        calls[kind][operation].as_u64().unwrap_or(0)
    }

    /// How often `operation` took effect at the fake.
    pub(crate) async fn effects(&self, operation: &str) -> u64 {
        self.counts("effects", operation).await
    }

    /// How often `operation` was called.
    pub(crate) async fn calls(&self, operation: &str) -> u64 {
        self.counts("calls", operation).await
    }
}

/// The app with `payment.provider = toss` against `fake` (on the manual clock if `manual`).
pub(crate) async fn spawn_on(
    backend: crate::helpers::Backend,
    fake: &Fake,
    extra: &[(&str, &str)],
    manual: bool,
) -> Option<crate::helpers::TestApp> {
    let mut env = vec![
        ("APP__PAYMENT__PROVIDER", "toss"),
        ("APP__PAYMENT__TOSS__SECRET_KEY", SECRET),
        ("APP__PAYMENT__TOSS__BASE_URL", fake.running.base_url.as_str()),
    ];
    env.extend_from_slice(extra);
    if manual {
        crate::helpers::TestApp::spawn_on_manual_clock(backend, &env).await
    } else {
        crate::helpers::TestApp::spawn_with(backend, &env).await
    }
}

fn settings(fake: &Fake, secret: &str, retries: u32, timeout: Duration) -> TossSettings {
    TossSettings {
        base_url: fake.running.base_url.clone(),
        secret_key: Secret::new(secret),
        timeout,
        ledger_timeout: Duration::from_secs(60),
        retries,
        retry_backoff: Duration::from_millis(100),
    }
}

fn gateway(fake: &Fake, retries: u32) -> TossPaymentGateway {
    TossPaymentGateway::new(TossClient::new(settings(fake, SECRET, retries, Duration::from_secs(5))).unwrap())
}

fn krw(amount: i64) -> Money {
    Money::new(amount, "KRW".parse().unwrap()).unwrap()
}

fn charge(request_id: &str, amount: i64, authorization: PaymentAuthorization) -> ApprovePayment {
    ApprovePayment {
        order_id: OrderId::new(),
        customer_id: "alice".into(),
        payment_request_id: request_id.into(),
        amount: krw(amount),
        order_name: "TICKET-STD and 1 more".into(),
        authorization: Some(authorization),
        scenario: Scenario::default(),
    }
}

fn request_id() -> String {
    format!("pay-{}-1", uuid::Uuid::new_v4())
}

fn cancel(payment_key: &str, key: &str, amount: i64, balance: i64) -> CancelPayment {
    CancelPayment {
        payment_id: PaymentId::new(),
        payment_request_id: "unused-by-toss".into(),
        provider_transaction_id: payment_key.into(),
        idempotency_key: key.into(),
        amount: krw(amount),
        balance: krw(balance),
        reason: "one ticket of two".into(),
        scenario: Scenario::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkout_is_confirmed_once_however_often_it_is_asked() {
    let fake = Fake::start().await;
    let toss = gateway(&fake, 2);
    let id = request_id();
    let payment_key = fake.checkout(&id, 30000, None).await;
    let request = charge(&id, 30000, PaymentAuthorization::Checkout { payment_key: payment_key.clone() });
    let first = toss.approve(&request).await.unwrap();
    assert_eq!(first, ApprovalOutcome::Approved { provider_transaction_id: payment_key.clone() });
    // The same key: Toss replays its first answer, nothing is charged again.
    assert_eq!(toss.approve(&request).await.unwrap(), first);
    assert_eq!(fake.effects("confirm").await, 1);
    assert_eq!(
        toss.lookup(&id, &Scenario::default()).await.unwrap(),
        LookupOutcome::Approved { provider_transaction_id: payment_key }
    );
    // An order Toss never saw: not taken, safe to charge with the same key.
    assert_eq!(toss.lookup(&request_id(), &Scenario::default()).await.unwrap(), LookupOutcome::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_decline_with_tosss_code_and_our_own_mistakes_never_do() {
    let fake = Fake::start().await;
    let toss = gateway(&fake, 1);
    // The card refused: DECLINED with Toss's code.
    let id = request_id();
    let refused = fake.checkout(&id, 5000, Some("REJECT_CARD_PAYMENT")).await;
    let outcome =
        toss.approve(&charge(&id, 5000, PaymentAuthorization::Checkout { payment_key: refused })).await;
    assert_eq!(
        outcome.unwrap(),
        ApprovalOutcome::Declined { code: "REJECT_CARD_PAYMENT".into(), provider_transaction_id: None }
    );
    // A checkout Toss no longer has (the session ran out): PAYMENT_WINDOW_EXPIRED.
    let id = request_id();
    let gone = PaymentAuthorization::Checkout { payment_key: "tgen_never_issued".into() };
    assert_eq!(
        toss.approve(&charge(&id, 5000, gone)).await.unwrap(),
        ApprovalOutcome::Declined { code: "PAYMENT_WINDOW_EXPIRED".into(), provider_transaction_id: None }
    );
    // An amount other than the widget's: Toss calls the request invalid. The customer
    // authorized something else (issue 43 items 3, 10): declined, nothing charged.
    let id = request_id();
    let key = fake.checkout(&id, 5000, None).await;
    let outcome =
        toss.approve(&charge(&id, 4000, PaymentAuthorization::Checkout { payment_key: key })).await.unwrap();
    assert_eq!(
        outcome,
        ApprovalOutcome::Declined { code: "AUTHORIZATION_MISMATCH".into(), provider_transaction_id: None }
    );
    // A wrong secret key: the same, and the key is in no error.
    let wrong = TossPaymentGateway::new(
        TossClient::new(settings(&fake, "test_sk_not_the_right_one", 1, Duration::from_secs(5))).unwrap(),
    );
    let id = request_id();
    let key = fake.checkout(&id, 5000, None).await;
    let outcome =
        wrong.approve(&charge(&id, 5000, PaymentAuthorization::Checkout { payment_key: key })).await.unwrap();
    let ApprovalOutcome::Unknown { reason } = outcome else { panic!("{outcome:?}") };
    assert!(reason.starts_with("TOSS_CONFIGURATION") && reason.contains("UNAUTHORIZED_KEY"), "{reason}");
    assert!(!reason.contains("test_sk_not_the_right_one") && !reason.contains(SECRET), "{reason}");
    let looked_up = wrong.lookup(&id, &Scenario::default()).await.unwrap_err();
    assert!(!looked_up.to_string().contains("test_sk_"), "{looked_up}");
    assert_eq!(fake.effects("confirm").await, 0, "nothing was charged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_whose_answer_was_lost_took_effect_once_and_is_found() {
    let fake = Fake::start().await;
    // The effect happens, the answer is a 500: the same key again replays the charge made.
    let toss = gateway(&fake, 2);
    let id = request_id();
    let key = fake.checkout(&id, 12000, None).await;
    fake.fault("confirm", "effect_then_500", 0, 1).await;
    let outcome =
        toss.approve(&charge(&id, 12000, PaymentAuthorization::Checkout { payment_key: key.clone() })).await;
    assert_eq!(outcome.unwrap(), ApprovalOutcome::Approved { provider_transaction_id: key });
    assert_eq!(fake.effects("confirm").await, 1);

    // With no retry left, the outcome is unknown; the look-up by orderId finds the charge.
    let once = gateway(&fake, 0);
    let id = request_id();
    let key = fake.checkout(&id, 12000, None).await;
    fake.fault("confirm", "effect_then_500", 0, 1).await;
    let outcome =
        once.approve(&charge(&id, 12000, PaymentAuthorization::Checkout { payment_key: key.clone() })).await;
    assert!(matches!(outcome, Ok(ApprovalOutcome::Unknown { .. })), "{outcome:?}");
    assert_eq!(
        once.lookup(&id, &Scenario::default()).await.unwrap(),
        LookupOutcome::Approved { provider_transaction_id: key }
    );
    assert_eq!(fake.effects("confirm").await, 2, "one charge per order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_an_unknown_outcome_and_the_key_in_flight_is_waited_for() {
    let fake = Fake::start().await;
    let slow = TossPaymentGateway::new(
        TossClient::new(settings(&fake, SECRET, 0, Duration::from_millis(300))).unwrap(),
    );
    let id = request_id();
    let key = fake.checkout(&id, 8000, None).await;
    let request = charge(&id, 8000, PaymentAuthorization::Checkout { payment_key: key.clone() });
    fake.fault("confirm", "delay", 1500, 1).await;
    let first = slow.approve(&request).await.unwrap();
    assert!(
        matches!(&first, ApprovalOutcome::Unknown { reason } if reason.contains("timed out")),
        "{first:?}"
    );
    // While the first is still running at Toss, its key answers 409: the same key again after
    // a pause, until the first answer is there to replay.
    let patient = TossPaymentGateway::new(
        TossClient::new(TossSettings {
            retries: 10,
            retry_backoff: Duration::from_millis(50),
            ..settings(&fake, SECRET, 10, Duration::from_secs(5))
        })
        .unwrap(),
    );
    assert_eq!(
        patient.approve(&request).await.unwrap(),
        ApprovalOutcome::Approved { provider_transaction_id: key }
    );
    assert_eq!(fake.effects("confirm").await, 1);
    assert!(fake.calls("confirm").await >= 3, "the patient call was answered 409 at least once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_card_is_charged_and_refunded_in_parts_by_tosss_arithmetic() {
    let fake = Fake::start().await;
    let toss = gateway(&fake, 1);
    let client = toss.client();
    let customer_key = uuid::Uuid::new_v4().to_string();
    let auth = fake.post("/__fake/billing-auth", json!({ "customerKey": customer_key })).await;
    let auth_key = auth["authKey"].as_str().unwrap();
    let billing =
        client.issue_billing_key(auth_key, &customer_key, &format!("card-{customer_key}")).await.unwrap();
    assert!(billing.card_number.as_deref().is_some_and(|n| n.contains('*')), "a masked number: {billing:?}");
    assert!(!format!("{billing:?}").contains(&billing.billing_key), "the billing key is never printed");
    // An authKey is good once; another customer's key does not match it.
    let again = client.issue_billing_key(auth_key, &customer_key, "card-again").await.unwrap_err();
    assert_eq!(again.meaning(), Some(Meaning::NotFound), "{again}");

    let id = request_id();
    let saved = PaymentAuthorization::SavedCard {
        billing_key: BillingKey(billing.billing_key.clone()),
        customer_key: customer_key.clone(),
    };
    let ApprovalOutcome::Approved { provider_transaction_id: payment_key } =
        toss.approve(&charge(&id, 10000, saved)).await.unwrap()
    else {
        panic!("the saved card is charged")
    };
    assert_eq!(fake.effects("billing_charge").await, 1);

    // One ticket of two: 3 000 of 10 000, with its own key.
    let first = toss.cancel(&cancel(&payment_key, "refund-1", 3000, 10000)).await.unwrap();
    assert_eq!(first.balance_after, Some(7000));
    let first_key = first.transaction_key.clone().unwrap();
    // The same key again: Toss replays it, nothing more is refunded.
    assert_eq!(toss.cancel(&cancel(&payment_key, "refund-1", 3000, 10000)).await.unwrap(), first);
    // Our balance out of date (another refund we have not recorded): Toss refuses.
    let stale = toss.cancel(&cancel(&payment_key, "refund-2", 3000, 10000)).await.unwrap_err();
    assert!(
        matches!(&stale, CancelError::StaleBalance { message } if message.starts_with("NOT_MATCHES_REFUNDABLE_AMOUNT")),
        "{stale:?}"
    );
    // More than is left: refused.
    let over = toss.cancel(&cancel(&payment_key, "refund-3", 8000, 7000)).await.unwrap_err();
    assert!(
        matches!(&over, CancelError::Gateway(GatewayError::Rejected { code, .. }) if code == "NOT_CANCELABLE_AMOUNT"),
        "{over:?}"
    );
    // The rest: the whole balance (no cancelAmount), and the payment is CANCELED.
    let rest = toss.cancel(&cancel(&payment_key, "refund-4", 7000, 7000)).await.unwrap();
    assert_eq!(rest.balance_after, Some(0));
    assert_ne!(rest.transaction_key.as_deref(), Some(first_key.as_str()));
    let (read, whole) = client.payment(&payment_key).await.unwrap();
    assert_eq!((read.status, read.total_amount, read.balance_amount), (TossStatus::Canceled, 10000, 0));
    assert_eq!(whole["cancels"].as_array().map(Vec::len), Some(2), "{whole}");
    assert_eq!(fake.effects("cancel").await, 2);
    // Cancelled already, under a key Toss never carried out (one it did would replay its
    // answer): refused as the typed `AlreadyCancelled` (issue 47: no provider code reaches the
    // application), and the refund's caller records what the look-up shows.
    let done = toss.cancel(&cancel(&payment_key, "refund-5", 1, 1)).await.unwrap_err();
    assert!(
        matches!(&done, CancelError::AlreadyCancelled { code, .. } if code == "ALREADY_CANCELED_PAYMENT"),
        "{done:?}"
    );
    assert!(matches!(toss.lookup(&id, &Scenario::default()).await.unwrap(), LookupOutcome::Cancelled { .. }));

    // The ledger: the approval and both cancels, paged by startingAfter.
    let today = (chrono::Utc::now() + chrono::Duration::hours(9)).format("%Y-%m-%d").to_string();
    let (start, end) = (format!("{today}T00:00:00"), format!("{today}T23:59:59"));
    let readable = |rows: Vec<Result<_, _>>| rows.into_iter().collect::<Result<Vec<_>, _>>().unwrap();
    let page: Vec<orchestrator::adapters::providers::toss::TossTransaction> =
        readable(client.transactions(&start, &end, None, 2).await.unwrap());
    assert_eq!(page.len(), 2);
    let next = readable(client.transactions(&start, &end, Some(&page[1].transaction_key), 2).await.unwrap());
    assert_eq!(next.len(), 1);
    let amounts: Vec<i64> = page.iter().chain(&next).map(|t| t.amount).collect();
    assert_eq!(amounts, [10000, 3000, 7000]);
    assert!(page.iter().chain(&next).all(|t| t.payment_key == payment_key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_whose_answer_was_lost_took_effect_once_and_the_same_key_tells_what_it_did() {
    let fake = Fake::start().await;
    let toss = gateway(&fake, 2);
    let id = request_id();
    let key = fake.checkout(&id, 20000, None).await;
    toss.approve(&charge(&id, 20000, PaymentAuthorization::Checkout { payment_key: key.clone() }))
        .await
        .unwrap();
    fake.fault("cancel", "effect_then_500", 0, 1).await;
    // A 5xx to a cancel may hide a cancel made: open (the refund's look-up settles it), not
    // retried blindly.
    let lost = toss.cancel(&cancel(&key, "refund-lost", 5000, 20000)).await.unwrap_err();
    assert!(matches!(lost, CancelError::Gateway(GatewayError::Unavailable(_))), "{lost:?}");
    let LookupOutcome::PartlyCancelled { provider_transaction_id, balance: 15000, cancels } =
        toss.lookup(&id, &Scenario::default()).await.unwrap()
    else {
        panic!("a partial cancel at Toss");
    };
    assert_eq!(provider_transaction_id, key);
    assert_eq!(cancels.len(), 1);
    assert_eq!(cancels[0].amount, 5000);
    // The same key again: Toss's first answer, with the cancel's key and the balance.
    let receipt = toss.cancel(&cancel(&key, "refund-lost", 5000, 20000)).await.unwrap();
    assert_eq!(receipt.balance_after, Some(15000));
    assert_eq!(receipt.transaction_key.as_ref(), Some(&cancels[0].transaction_key));
    assert_eq!(fake.effects("cancel").await, 1);
}

#[test]
fn an_error_names_no_secret() {
    let error = TossError::Answered {
        status: 401,
        code: "UNAUTHORIZED_KEY".into(),
        message: "인증되지 않은 시크릿 키".into(),
        meaning: Meaning::OurConfiguration,
    };
    assert!(!error.to_string().contains("test_sk"));
}

/// The key-in API as the meetup platform's test payments call it: `POST /v1/payments/key-in`
/// with the card's number, once per idempotency key; a refusal is Toss's code, a payment
/// it never made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_keyed_in_is_charged_once_and_a_refused_one_is_not_charged() {
    use orchestrator::adapters::providers::toss::KeyIn;
    let fake = Fake::start().await;
    let client = TossClient::new(settings(&fake, SECRET, 1, Duration::from_secs(5))).unwrap();
    let order = request_id();
    let card = |number| KeyIn {
        amount: 15000,
        order_id: &order,
        order_name: "토요 등산 참가비",
        card_number: number,
        card_expiration_year: "29",
        card_expiration_month: "12",
        card_password: Some("12"),
        customer_identity_number: "880101",
        customer_email: Some("test@example.com"),
        customer_name: Some("테스트"),
    };
    let paid = client.key_in(&card("4242424242424242"), &format!("keyin-{order}")).await.unwrap();
    assert_eq!(
        (paid.status, paid.total_amount, paid.order_id.as_str()),
        (TossStatus::Done, 15000, order.as_str())
    );
    // Asked again under the same key: Toss replays its answer, nothing is charged again.
    let again = client.key_in(&card("4242424242424242"), &format!("keyin-{order}")).await.unwrap();
    assert_eq!(again.payment_key, paid.payment_key);
    assert_eq!(fake.effects("key_in").await, 1);
    // The payment is Toss's like any other: found by its key.
    let (found, _) = client.payment(&paid.payment_key).await.unwrap();
    assert_eq!(found.status, TossStatus::Done);
    // A card the company refuses: Toss's code, read as a refusal; no payment for the order.
    let refused_order = request_id();
    let refused = KeyIn { order_id: &refused_order, ..card(fake_toss::KEY_IN_DECLINED_CARD) };
    match client.key_in(&refused, &format!("keyin-{refused_order}")).await {
        Err(TossError::Answered { code, meaning: Meaning::Refused, .. }) => {
            assert_eq!(code, "REJECT_CARD_PAYMENT")
        }
        other => panic!("a refusal: {other:?}"),
    }
    assert_eq!(fake.effects("key_in").await, 1);
}
