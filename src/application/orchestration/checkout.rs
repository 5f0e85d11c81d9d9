//! The checkout of a provider that needs the customer's authorization first (Toss,
//! docs/spec.md §10): an HTTP order waits `AWAITING_PAYMENT`; the customer's payment widget
//! authorizes the charge and the client hands us its `paymentKey` ([`Orchestrator::pay_order`]),
//! whose intent is committed before the saga's payment step confirms it; an order left unpaid
//! past the window fails `PAYMENT_WINDOW_EXPIRED` ([`Orchestrator::expire_unpaid`]).
//!
//! The window counts from the order's creation and applies only while the order is
//! `AWAITING_PAYMENT` with no authorization committed: once the customer's key is recorded,
//! the charge is the saga's (and, if its outcome is unknown, reconciliation's), never the
//! window's.

use chrono::{DateTime, Utc};

use super::orchestrator::Orchestrator;
use super::outcome::Moved;
use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::error::broken_invariant;
use crate::application::ports::{AuditRecord, Changes, OrderRecord};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{
    FailureReason, FailureStage, Order, OrderStart, OrderStatus, SagaStep, StepStatus,
};
use crate::domain::payment::{AUTHORIZATION_MISMATCH, Payment, payment_request_id};
use crate::domain::text;

/// What the customer's payment widget gave back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayOrder {
    /// The widget's `paymentKey`.
    pub payment_key: String,
    /// The amount the widget charged; must be the order's total.
    pub amount: i64,
}

/// What the client needs to open the payment widget for an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// The provider's `orderId`: the first payment attempt's request id.
    pub order_id: String,
    pub order_name: String,
    pub amount: i64,
    /// The customer's key at the provider (random-looking, stable, never the customer id).
    pub customer_key: Option<String>,
}

/// `paymentKey`: Toss documents up to 200 characters; keys are `[A-Za-z0-9_-]` (we also let
/// `=` and `.` through, never a character that could change a URL path).
fn check_payment_key(key: &str) -> Result<(), AppError> {
    text::check("paymentKey", key, 200).map_err(|e| AppError::validation(e.field(), e.message()))?;
    if text::is_provider_key(key, 200) {
        Ok(())
    } else {
        Err(AppError::validation("paymentKey", "must be 1-200 of [A-Za-z0-9_-=.]"))
    }
}

/// What became of an authorization under the lease.
enum Authorized {
    /// Committed, and the saga ran as far as it goes now.
    Ran(OrderRecord),
    /// The order had moved on before the lease was ours: resumed as it stands.
    Moved(OrderRecord),
}

/// What a widget's authorization may do to an order, decided from the order as it stands.
#[derive(Debug)]
enum Admission {
    /// Commit it as the payment attempt's intent, and run the payment step.
    Authorize,
    /// The same key again: the order as it stands, its saga resumed.
    Resume,
    Refuse(AppError),
    /// Past the window: the order fails, the authorization is refused.
    Expire,
    /// Not the order's total: refused, audited, nothing called.
    WrongAmount(Box<AuditRecord>),
}

/// Whether `actor` may pay `record` with `cmd` now.
fn admit_payment(
    record: &OrderRecord,
    actor: &Actor,
    cmd: &PayOrder,
    window: chrono::Duration,
    now: DateTime<Utc>,
) -> Admission {
    let order = &record.order;
    if !actor.may_access(order) {
        return Admission::Refuse(AppError::Forbidden {
            code: "FORBIDDEN",
            message: "only the order's customer or an admin may pay for it".into(),
        });
    }
    let same_key = record.payment.as_ref().and_then(|p| p.provider_transaction_id.as_deref())
        == Some(cmd.payment_key.as_str());
    if same_key {
        return Admission::Resume;
    }
    if order.failure_reason == Some(FailureReason::PaymentWindowExpired) {
        return Admission::Refuse(window_expired());
    }
    if order.status != OrderStatus::AwaitingPayment || record.payment.is_some() {
        return Admission::Refuse(AppError::Conflict {
            code: "PAYMENT_NOT_EXPECTED",
            message: format!("the order is {} and waits for no payment", order.status),
        });
    }
    if now >= order.created_at + window {
        return Admission::Expire;
    }
    if cmd.amount != order.total.minor() {
        let why = format!("amount {} is not the order's total {}", cmd.amount, order.total.minor());
        let audit =
            audit::record(AuditAction::PaymentRejected, entity::ORDER, order.id, actor, Some(why), now);
        return Admission::WrongAmount(Box::new(audit));
    }
    Admission::Authorize
}

/// The intent: the customer's key as the first payment attempt, numbered `number`, with the
/// order's version (so that the window's expiry cannot pass it) and its audit row.
fn intent(
    record: &OrderRecord,
    payment_key: String,
    number: i64,
    actor: &Actor,
    now: DateTime<Utc>,
) -> (Changes, Order, Payment) {
    let mut order = record.order.clone();
    order.updated_at = now;
    let mut payment = Payment::request_authorized(order.id, 1, order.total, payment_key, now);
    payment.number = number;
    let mut changes = Changes::default();
    changes.update_order(&mut order);
    changes.insert_payment(&mut payment);
    let detail = format!(
        "the customer authorized {}; confirming with Idempotency-Key {}",
        order.total, payment.payment_request_id
    );
    changes.audit.push(audit::record(
        AuditAction::PaymentAuthorized,
        entity::ORDER,
        order.id,
        actor,
        Some(detail),
        now,
    ));
    (changes, order, payment)
}

/// The widget's `paymentKey` was committed for another payment already (docs/spec.md §10).
pub const PAYMENT_KEY_USED: &str = "PAYMENT_KEY_USED";

fn window_expired() -> AppError {
    AppError::Conflict {
        code: "PAYMENT_WINDOW_EXPIRED",
        message: "the order waited longer than the payment window; place it again".into(),
    }
}

impl Orchestrator {
    /// The widget's parameters for an order still waiting for its payment.
    pub fn checkout_of(&self, record: &OrderRecord) -> Option<Checkout> {
        (record.order.status == OrderStatus::AwaitingPayment).then(|| Checkout {
            order_id: payment_request_id(record.order.id, 1),
            order_name: record.order.name(),
            amount: record.order.total.minor(),
            customer_key: self.customers.as_ref().map(|c| c.customer_key(&record.order.customer_id)),
        })
    }

    /// The customer authorized the payment in the widget: its key is committed as the payment
    /// attempt's intent, then the saga confirms it with the provider and goes on.
    ///
    /// # Errors
    /// `NotFound`; `Forbidden` unless the caller is the order's customer or an admin;
    /// `Validation` for a bad `paymentKey`; `Unprocessable` `AMOUNT_MISMATCH` when `amount`
    /// is not the order's total (nothing called); `Conflict` `PAYMENT_WINDOW_EXPIRED` past the
    /// window, `PAYMENT_NOT_EXPECTED` for an order that is not waiting for one (or a provider
    /// that takes none), `ORDER_BUSY` while another runner holds the order; `Unavailable`
    /// when the database fails.
    pub async fn pay_order(
        &self,
        actor: &Actor,
        order_id: OrderId,
        cmd: PayOrder,
    ) -> Result<OrderRecord, AppError> {
        let Some(settings) = self.settings.checkout else {
            return Err(AppError::Conflict {
                code: "PAYMENT_NOT_EXPECTED",
                message: "this payment provider charges orders when they are placed".into(),
            });
        };
        check_payment_key(&cmd.payment_key)?;
        let record = self.load(order_id).await?;
        let now = self.clock.now();
        match admit_payment(&record, actor, &cmd, settings.window, now) {
            Admission::Authorize => self.authorize(actor, order_id, cmd).await,
            // The same authorization again (a retried request): the order as it stands, its
            // saga resumed if a run died half-way.
            Admission::Resume => self.resume(record, actor).await,
            Admission::Refuse(err) => Err(err),
            Admission::Expire => {
                self.expire(order_id, Expiry::Unpaid).await?;
                Err(window_expired())
            }
            Admission::WrongAmount(audit) => {
                self.uow.commit(Changes { audit: vec![*audit], ..Changes::default() }).await?;
                Err(AppError::Unprocessable {
                    code: "AMOUNT_MISMATCH",
                    message: format!("amount must be the order's total, {}", record.order.total.minor()),
                })
            }
        }
    }

    /// The customer's key committed as the payment attempt's intent (with the order's
    /// version, so that the window's expiry cannot pass it) under the order's lease, then
    /// the saga's payment step confirms it with the provider.
    async fn authorize(
        &self,
        actor: &Actor,
        order_id: OrderId,
        cmd: PayOrder,
    ) -> Result<OrderRecord, AppError> {
        let held = self
            .holding_run(order_id, async move |run| {
                // Read again under the lease: the window's expiry or another authorization
                // may have been committed meanwhile (then: resumed, once the lease is back).
                let mut fresh = self.load(order_id).await?;
                if fresh.order.status != OrderStatus::AwaitingPayment || fresh.payment.is_some() {
                    return Ok(Authorized::Moved(fresh));
                }
                let number = self.number(crate::application::ports::Numbered::Payment).await?;
                let (changes, order, payment) =
                    intent(&fresh, cmd.payment_key, number, actor, self.clock.now());
                if !self.commit(changes).await? {
                    return Err(self.intent_refused(&fresh).await);
                }
                fresh.order = order;
                fresh.payment = Some(payment);
                self.drive_run(fresh, actor, run, Moved::Already).await.map(Authorized::Ran)
            })
            .await?;
        let record = match held.ok_or_else(AppError::order_busy)?? {
            Authorized::Ran(record) => record,
            Authorized::Moved(fresh) => return self.resume(fresh, actor).await,
        };
        let refused =
            record.payment.as_ref().and_then(|p| p.decline_code.as_deref()) == Some(AUTHORIZATION_MISMATCH);
        if refused {
            // The customer's error (a key from another checkout, another amount authorized):
            // the order is declined, the key let go, and nobody else's checkout waits on it.
            return Err(AppError::Unprocessable {
                code: AUTHORIZATION_MISMATCH,
                message: "the payment provider refused this paymentKey for this order: it was authorized for another order or amount".into(),
            });
        }
        Ok(record)
    }

    /// Why an authorization's intent was not committed: the order moved meanwhile (busy,
    /// worth a retry), or, the order as it was, the key itself cannot be stored — it paid
    /// another order already (no retry can help: a `409` naming it).
    async fn intent_refused(&self, before: &OrderRecord) -> AppError {
        match self.load(before.order.id).await {
            Ok(now) if now.order.version == before.order.version && now.payment.is_none() => {
                AppError::Conflict {
                    code: PAYMENT_KEY_USED,
                    message:
                        "this paymentKey paid another order already: ask the payment widget for a new one"
                            .into(),
                }
            }
            Ok(_) => AppError::order_busy(),
            Err(err) => err,
        }
    }

    /// Fails the orders whose payment window ran out with no authorization committed
    /// (`FAILED`, stage `PAYMENT`, `PAYMENT_WINDOW_EXPIRED`, with `order.failed`). Returns
    /// how many it failed.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn expire_unpaid(&self) -> Result<usize, AppError> {
        let Some(settings) = self.settings.checkout else { return Ok(0) };
        self.expire_waiting(Expiry::Unpaid, settings.window).await
    }

    /// Fails the orders held in `CREATED` (the commerce dialect's, docs/dialects.md) whose
    /// client never asked for the saga within `http.dialects.commerce.hold_expiry`
    /// (`FAILED`, stage `PAYMENT`, `HOLD_EXPIRED`, with `order.failed`; audited, counted in
    /// `orders_expired_total{reason}`). Returns how many it failed.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn expire_held_orders(&self) -> Result<usize, AppError> {
        self.expire_waiting(Expiry::Held, self.settings.hold_expiry).await
    }

    /// Fails the orders `expiry` names that waited longer than `window`, one lease each.
    async fn expire_waiting(&self, expiry: Expiry, window: chrono::Duration) -> Result<usize, AppError> {
        let (status, start) = expiry.waiting();
        let due = self.orders.waiting_since_before(status, start, self.clock.now() - window, 100).await?;
        let mut expired = 0;
        for order_id in due {
            if self.expire(order_id, expiry).await? {
                expired += 1;
            }
        }
        if expired > 0 {
            let reason = expiry.reason().as_str();
            self.meter.record(|| {
                metrics::counter!("orders_expired_total", "reason" => reason).increment(expired as u64);
            });
        }
        Ok(expired)
    }

    /// Fails one order whose wait ran out, under its saga lease; `false` when it is busy
    /// or no longer waiting.
    async fn expire(&self, order_id: OrderId, expiry: Expiry) -> Result<bool, AppError> {
        let expire = async move |_: &_| self.expire_leased(order_id, expiry).await;
        self.leases.holding(order_id, expire).await?.unwrap_or(Ok(false))
    }

    /// [`Self::expire`] under the order's lease.
    async fn expire_leased(&self, order_id: OrderId, expiry: Expiry) -> Result<bool, AppError> {
        let record = self.load(order_id).await?;
        let (status, start) = expiry.waiting();
        let waiting = record.order.status == status && start.is_none_or(|s| record.order.start == s);
        if !waiting || record.payment.is_some() {
            return Ok(false);
        }
        let now = self.clock.now();
        let mut order = record.order.clone();
        let events = order.fail(FailureStage::Payment, expiry.reason(), now).map_err(broken_invariant)?;
        let mut changes = Changes::default();
        changes.update_order(&mut order);
        let (step, action, actor, since) = match expiry {
            Expiry::Unpaid => {
                ("payment window expired", AuditAction::PaymentWindowExpired, "checkout-window", "unpaid")
            }
            Expiry::Held => (
                "held order expired: its client never asked for its saga",
                AuditAction::HoldExpired,
                "held-orders",
                "held",
            ),
        };
        changes.step(order_id, SagaStep::Payment, StepStatus::Failed, Some(step.into()), now);
        changes.audit.push(audit::record(
            action,
            entity::ORDER,
            order_id,
            &Actor::system(actor),
            Some(format!("{since} since {}", record.order.created_at.to_rfc3339())),
            now,
        ));
        let mut writer = EventWriter::new(&order, &record, now);
        writer.order(&events);
        changes.outbox = writer.finish();
        self.commit(changes).await
    }
}

/// What an expiry fails: an order unpaid past the payment window, or one held past its hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    Unpaid,
    Held,
}

impl Expiry {
    /// The status (and start) of an order that waits so.
    fn waiting(self) -> (OrderStatus, Option<OrderStart>) {
        match self {
            Expiry::Unpaid => (OrderStatus::AwaitingPayment, None),
            Expiry::Held => (OrderStatus::Created, Some(OrderStart::Held)),
        }
    }

    fn reason(self) -> FailureReason {
        match self {
            Expiry::Unpaid => FailureReason::PaymentWindowExpired,
            Expiry::Held => FailureReason::HoldExpired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::orchestration::testing::{now, placed};

    /// [`placed`], waiting for its payment since `now()`.
    fn waiting() -> OrderRecord {
        let mut record = placed();
        record.order.await_payment(now()).unwrap();
        record
    }

    fn pay(amount: i64) -> PayOrder {
        PayOrder { payment_key: "tkey_1".into(), amount }
    }

    #[test]
    fn what_a_widgets_authorization_may_do_to_an_order() {
        let window = chrono::Duration::minutes(30);
        let within = now() + chrono::Duration::minutes(5);
        let (owner, stranger, admin) = (Actor::customer("7"), Actor::customer("8"), Actor::admin("ops"));
        let mut keyed = waiting();
        keyed.payment =
            Some(Payment::request_authorized(keyed.order.id, 1, keyed.order.total, "tkey_1", now()));
        let mut other_key = keyed.clone();
        other_key.payment.as_mut().unwrap().provider_transaction_id = Some("tkey_0".into());
        let mut expired = waiting();
        expired.order.fail(FailureStage::Payment, FailureReason::PaymentWindowExpired, now()).unwrap();
        let mut created = waiting();
        created.order.status = OrderStatus::Created;
        // (record, caller, amount, when, what it may do)
        let cases: [(&OrderRecord, &Actor, i64, DateTime<Utc>, &str); 9] = [
            (&waiting(), &owner, 5000, within, "Authorize"),
            (&waiting(), &admin, 5000, within, "Authorize"),
            (&waiting(), &stranger, 5000, within, "Refuse FORBIDDEN"),
            (&keyed, &owner, 5000, within, "Resume"),
            (&other_key, &owner, 5000, within, "Refuse PAYMENT_NOT_EXPECTED"),
            (&expired, &owner, 5000, within, "Refuse PAYMENT_WINDOW_EXPIRED"),
            (&created, &owner, 5000, within, "Refuse PAYMENT_NOT_EXPECTED"),
            (&waiting(), &owner, 5000, now() + window, "Expire"),
            (&waiting(), &owner, 4999, within, "WrongAmount"),
        ];
        for (record, actor, amount, at, expected) in cases {
            let got = match admit_payment(record, actor, &pay(amount), window, at) {
                Admission::Authorize => "Authorize".to_owned(),
                Admission::Resume => "Resume".to_owned(),
                Admission::Expire => "Expire".to_owned(),
                Admission::WrongAmount(audit) => {
                    assert_eq!(audit.action, AuditAction::PaymentRejected);
                    "WrongAmount".to_owned()
                }
                Admission::Refuse(
                    AppError::Forbidden { code, .. }
                    | AppError::Conflict { code, .. }
                    | AppError::Unprocessable { code, .. },
                ) => format!("Refuse {code}"),
                Admission::Refuse(other) => format!("Refuse {other:?}"),
            };
            assert_eq!(got, expected, "{} {} {amount} at {at}", record.order.status, actor.subject);
        }
    }

    #[test]
    fn the_intent_is_the_first_attempt_with_the_customers_key() {
        let record = waiting();
        let (changes, order, payment) = intent(&record, "tkey_9".into(), 31, &Actor::customer("7"), now());
        assert_eq!((payment.number, payment.attempt), (31, 1));
        assert_eq!(payment.provider_transaction_id.as_deref(), Some("tkey_9"));
        assert_eq!(payment.amount, record.order.total);
        assert_eq!(order.version, record.order.version + 1, "written with the order's version");
        assert_eq!((changes.orders.len(), changes.payments.len(), changes.audit.len()), (1, 1, 1));
        assert_eq!(changes.audit[0].action, AuditAction::PaymentAuthorized);
    }
}
