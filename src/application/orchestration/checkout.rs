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

use super::orchestrator::Orchestrator;
use super::outcome::Moved;
use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::error::broken_invariant;
use crate::application::ports::{Changes, OrderRecord};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{FailureReason, FailureStage, OrderStatus, SagaStep, StepStatus};
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
        if !actor.may_access(&record.order.customer_id) {
            return Err(AppError::Forbidden {
                code: "FORBIDDEN",
                message: "only the order's customer or an admin may pay for it".into(),
            });
        }
        let same_key = record.payment.as_ref().and_then(|p| p.provider_transaction_id.as_deref())
            == Some(cmd.payment_key.as_str());
        if same_key {
            // The same authorization again (a retried request): the order as it stands, its
            // saga resumed if a run died half-way.
            return self.resume(record, actor).await;
        }
        if record.order.failure_reason == Some(FailureReason::PaymentWindowExpired) {
            return Err(window_expired());
        }
        if record.order.status != OrderStatus::AwaitingPayment || record.payment.is_some() {
            return Err(AppError::Conflict {
                code: "PAYMENT_NOT_EXPECTED",
                message: format!("the order is {} and waits for no payment", record.order.status),
            });
        }
        let now = self.clock.now();
        if now >= record.order.created_at + settings.window {
            self.expire(order_id).await?;
            return Err(window_expired());
        }
        if cmd.amount != record.order.total.minor() {
            let mut changes = Changes::default();
            changes.audit.push(audit::record(
                AuditAction::PaymentRejected,
                entity::ORDER,
                order_id,
                actor,
                Some(format!(
                    "amount {} is not the order's total {}",
                    cmd.amount,
                    record.order.total.minor()
                )),
                now,
            ));
            self.uow.commit(changes).await?;
            return Err(AppError::Unprocessable {
                code: "AMOUNT_MISMATCH",
                message: format!("amount must be the order's total, {}", record.order.total.minor()),
            });
        }
        let Some(lease) = self.leases.take(order_id).await? else {
            return Err(AppError::order_busy());
        };
        // Read again under the lease: the window's expiry or another authorization may have
        // been committed meanwhile.
        let mut fresh = self.load(order_id).await?;
        if fresh.order.status != OrderStatus::AwaitingPayment || fresh.payment.is_some() {
            self.leases.release(order_id, &lease.owner).await;
            return self.resume(fresh, actor).await;
        }
        // The intent: the customer's key, committed (with the order's version, so that the
        // window's expiry cannot pass it) before the provider is asked.
        let mut order = fresh.order.clone();
        order.updated_at = now;
        let mut payment = Payment::request_authorized(order_id, 1, order.total, cmd.payment_key, now);
        payment.number = self.number(crate::application::ports::Numbered::Payment).await?;
        let mut changes = Changes::default();
        changes.update_order(&mut order);
        changes.insert_payment(&mut payment);
        changes.audit.push(audit::record(
            AuditAction::PaymentAuthorized,
            entity::ORDER,
            order_id,
            actor,
            Some(format!(
                "the customer authorized {}; confirming with Idempotency-Key {}",
                order.total, payment.payment_request_id
            )),
            now,
        ));
        if !self.commit(changes).await? {
            self.leases.release(order_id, &lease.owner).await;
            return Err(AppError::order_busy());
        }
        fresh.order = order;
        fresh.payment = Some(payment);
        let record = self.run_leased(fresh, actor, lease, Moved::Already).await?;
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

    /// Fails the orders whose payment window ran out with no authorization committed
    /// (`FAILED`, stage `PAYMENT`, `PAYMENT_WINDOW_EXPIRED`, with `order.failed`). Returns
    /// how many it failed.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn expire_unpaid(&self) -> Result<usize, AppError> {
        let Some(settings) = self.settings.checkout else { return Ok(0) };
        let due = self.orders.awaiting_payment_since_before(self.clock.now() - settings.window, 100).await?;
        let mut expired = 0;
        for order_id in due {
            if self.expire(order_id).await? {
                expired += 1;
            }
        }
        Ok(expired)
    }

    /// Fails one order whose window ran out, under its saga lease; `false` when it is busy
    /// or no longer waiting.
    async fn expire(&self, order_id: OrderId) -> Result<bool, AppError> {
        let Some(lease) = self.leases.take(order_id).await? else { return Ok(false) };
        let record = self.load(order_id).await?;
        if record.order.status != OrderStatus::AwaitingPayment || record.payment.is_some() {
            self.leases.release(order_id, &lease.owner).await;
            return Ok(false);
        }
        let now = self.clock.now();
        let mut order = record.order.clone();
        let events = order
            .fail(FailureStage::Payment, FailureReason::PaymentWindowExpired, now)
            .map_err(broken_invariant)?;
        let mut changes = Changes::default();
        changes.update_order(&mut order);
        changes.step(
            order_id,
            SagaStep::Payment,
            StepStatus::Failed,
            Some("payment window expired".into()),
            now,
        );
        changes.audit.push(audit::record(
            AuditAction::PaymentWindowExpired,
            entity::ORDER,
            order_id,
            &Actor::system("checkout-window"),
            Some(format!("unpaid since {}", record.order.created_at.to_rfc3339())),
            now,
        ));
        let mut writer = EventWriter::new(&order, &record, now);
        writer.order(&events);
        changes.outbox = writer.finish();
        changes.release_saga = Some(lease.owner.clone());
        if self.commit(changes).await? {
            return Ok(true);
        }
        self.leases.release(order_id, &lease.owner).await;
        Ok(false)
    }
}
