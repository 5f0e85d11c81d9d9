//! What the provider did to a payment that we did not record (its dashboard, a cancel whose
//! answer we lost): found by a look-up and recorded as the provider's refunds.

use chrono::{DateTime, Utc};

use super::Refunds;
use crate::application::audit::{self, entity};
use crate::application::commit::commit;
use crate::application::envelopes::EventWriter;
use crate::application::error::broken_invariant;
use crate::application::ports::{Changes, LookupOutcome, OrderRecord, ProviderCancel};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{OrderStatus, SagaStep, StepStatus};
use crate::domain::payment::{Payment, PaymentStatus};

/// What a look-up at the provider showed of a payment we hold as approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderRefunds {
    /// Cancels made at the provider that we did not know of, now recorded as refunds by
    /// `provider` (how many).
    Recorded(usize),
    /// Nothing new at the provider, or nothing we can record now (a refund of ours is
    /// pending: it is finished first).
    Nothing,
}

impl Refunds {
    /// A payment may have been cancelled outside the service (Toss's dashboard, learnt from
    /// a webhook or the ledger): asks the provider and records every cancel it made that we
    /// do not have as a refund by actor `provider` (`payment.refunded` each; the order
    /// `CANCELLED` once nothing is left), under the order's saga lease.
    ///
    /// # Errors
    /// `Conflict` `ORDER_BUSY` while another runner holds the order; `Unavailable` when the
    /// provider or the database fails.
    pub async fn record_provider_refunds(&self, order_id: OrderId) -> Result<ProviderRefunds, AppError> {
        let held = self.leases.holding(order_id, async move |_| self.sync_leased(order_id).await).await?;
        held.unwrap_or_else(|| Err(AppError::order_busy()))
    }

    pub(super) async fn sync_leased(&self, order_id: OrderId) -> Result<ProviderRefunds, AppError> {
        let record = self.load(order_id).await?;
        let Some(payment) = record
            .payment
            .clone()
            .filter(|p| matches!(p.status, PaymentStatus::Approved | PaymentStatus::PartiallyRefunded))
        else {
            return Ok(ProviderRefunds::Nothing);
        };
        if record.order.status != OrderStatus::Completed {
            return Ok(ProviderRefunds::Nothing);
        }
        let outcome = self
            .payments
            .lookup(&payment.payment_request_id, &record.context.scenario)
            .await
            .map_err(|e| AppError::unavailable(format!("payment provider: {e}")))?;
        let new = unrecorded_cancels(&record, &payment, outcome);
        if new.is_empty() {
            return Ok(ProviderRefunds::Nothing);
        }
        let (changes, recorded) = provider_refunds(&record, payment, new, self.clock.now())?;
        if !commit(self.uow.as_ref(), changes).await? {
            return Err(AppError::order_busy());
        }
        Ok(if recorded > 0 { ProviderRefunds::Recorded(recorded) } else { ProviderRefunds::Nothing })
    }
}

/// The cancels the provider's look-up shows that `record` has no refund for: (amount, the
/// provider's key). A provider that lists no cancels: what it cancelled beyond our refunds.
fn unrecorded_cancels(
    record: &OrderRecord,
    payment: &Payment,
    outcome: LookupOutcome,
) -> Vec<(i64, Option<String>)> {
    let known = |key: &str| record.refunds.iter().any(|r| r.provider_transaction_key.as_deref() == Some(key));
    match outcome {
        LookupOutcome::Cancelled { cancels, .. } | LookupOutcome::PartlyCancelled { cancels, .. }
            if !cancels.is_empty() =>
        {
            cancels
                .into_iter()
                .filter(|c: &ProviderCancel| !known(&c.transaction_key))
                .map(|c| (c.amount, Some(c.transaction_key)))
                .collect()
        }
        LookupOutcome::Cancelled { .. } => vec![(payment.balance(), None)],
        LookupOutcome::PartlyCancelled { balance, .. } if payment.balance() > balance => {
            vec![(payment.balance() - balance, None)]
        }
        _ => vec![],
    }
}

/// The provider's cancels recorded as refunds by `provider` (each audited; one the balance
/// cannot hold audited as a mismatch for an operator), the order cancelled once nothing is
/// left: the changes, and how many were recorded.
fn provider_refunds(
    record: &OrderRecord,
    mut payment: Payment,
    new: Vec<(i64, Option<String>)>,
    now: DateTime<Utc>,
) -> Result<(Changes, usize), AppError> {
    let order_id = record.order.id;
    let actor = Actor::system("provider");
    let mut changes = Changes::default();
    let mut events = Vec::new();
    let mut recorded = 0;
    for (amount, key) in new {
        let theirs = key.as_deref().unwrap_or("none").to_owned();
        let (action, detail) = match payment.record_provider_refund(
            amount,
            key,
            "refunded at the provider, outside the service",
            now,
        ) {
            Ok((mut refund, payment_events)) => {
                changes.insert_refund(&mut refund);
                events.extend(payment_events);
                recorded += 1;
                let detail = format!(
                    "refund {} of {amount} made at the provider (its key {theirs}), outside the service",
                    refund.id
                );
                (AuditAction::Refunded, detail)
            }
            // More than our balance: the books disagree; an operator decides.
            Err(err) => (
                AuditAction::RefundBalanceMismatch,
                format!("the provider cancelled {amount} (its key {theirs}), which we cannot record: {err}"),
            ),
        };
        changes.audit.push(audit::record(action, entity::ORDER, order_id, &actor, Some(detail), now));
    }
    let mut order = record.order.clone();
    let order_events = if payment.status == PaymentStatus::Refunded {
        order.refund(now).map_err(broken_invariant)?
    } else {
        vec![]
    };
    if recorded > 0 {
        changes.update_payment(&mut payment);
        let summary = format!(
            "refunded at the provider: {} of {} refunded",
            payment.refunded_amount,
            payment.amount.minor()
        );
        changes.step(order_id, SagaStep::Compensation, StepStatus::Success, Some(summary), now);
    }
    if !order_events.is_empty() {
        changes.update_order(&mut order);
    }
    let mut writer = EventWriter::new(&order, record, now);
    writer.payment(&payment, &events).order(&order_events);
    changes.outbox = writer.finish();
    Ok((changes, recorded))
}
