//! What the provider did to a payment that we did not record (its dashboard, a cancel whose
//! answer we lost): found by a look-up and recorded as the provider's refunds.

use crate::application::audit::{self, entity};
use crate::application::commit::commit;
use crate::application::envelopes::EventWriter;
use crate::application::error::broken_invariant;
use crate::application::ports::{Changes, LookupOutcome, ProviderCancel};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{OrderStatus, SagaStep, StepStatus};
use crate::domain::payment::PaymentStatus;

use super::*;

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
        let Some(lease) = self.leases.take(order_id).await? else {
            return Err(AppError::order_busy());
        };
        let result = self.sync_leased(order_id).await;
        self.leases.release(order_id, &lease.owner).await;
        result
    }

    pub(super) async fn sync_leased(&self, order_id: OrderId) -> Result<ProviderRefunds, AppError> {
        let record = self.load(order_id).await?;
        let Some(mut payment) = record
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
        let known =
            |key: &str| record.refunds.iter().any(|r| r.provider_transaction_key.as_deref() == Some(key));
        let new: Vec<(i64, Option<String>)> = match outcome {
            LookupOutcome::Cancelled { cancels, .. } | LookupOutcome::PartlyCancelled { cancels, .. }
                if !cancels.is_empty() =>
            {
                cancels
                    .into_iter()
                    .filter(|c: &ProviderCancel| !known(&c.transaction_key))
                    .map(|c| (c.amount, Some(c.transaction_key)))
                    .collect()
            }
            // A provider that lists no cancels: what it has cancelled beyond our refunds.
            LookupOutcome::Cancelled { .. } => vec![(payment.balance(), None)],
            LookupOutcome::PartlyCancelled { balance, .. } if payment.balance() > balance => {
                vec![(payment.balance() - balance, None)]
            }
            _ => vec![],
        };
        if new.is_empty() {
            return Ok(ProviderRefunds::Nothing);
        }
        let now = self.clock.now();
        let actor = Actor::system("provider");
        let mut order = record.order.clone();
        let mut changes = Changes::default();
        let mut events = Vec::new();
        let mut recorded = 0;
        for (amount, key) in new {
            match payment.record_provider_refund(
                amount,
                key.clone(),
                "refunded at the provider, outside the service",
                now,
            ) {
                Ok((mut refund, payment_events)) => {
                    changes.insert_refund(&mut refund);
                    changes.audit.push(audit::record(
                        AuditAction::Refunded,
                        entity::ORDER,
                        order_id,
                        &actor,
                        Some(format!(
                            "refund {} of {} made at the provider (its key {}), outside the service",
                            refund.id,
                            amount,
                            key.as_deref().unwrap_or("none")
                        )),
                        now,
                    ));
                    events.extend(payment_events);
                    recorded += 1;
                }
                Err(err) => {
                    // More than our balance: the books disagree; an operator decides.
                    changes.audit.push(audit::record(
                        AuditAction::RefundBalanceMismatch,
                        entity::ORDER,
                        order_id,
                        &actor,
                        Some(format!(
                            "the provider cancelled {amount} (its key {}), which we cannot record: {err}",
                            key.as_deref().unwrap_or("none")
                        )),
                        now,
                    ));
                }
            }
        }
        let order_events = if payment.status == PaymentStatus::Refunded {
            order.refund(now).map_err(broken_invariant)?
        } else {
            vec![]
        };
        if recorded > 0 {
            changes.update_payment(&mut payment);
            changes.step(
                order_id,
                SagaStep::Compensation,
                StepStatus::Success,
                Some(format!(
                    "refunded at the provider: {} of {} refunded",
                    payment.refunded_amount,
                    payment.amount.minor()
                )),
                now,
            );
        }
        if !order_events.is_empty() {
            changes.update_order(&mut order);
        }
        let mut writer = EventWriter::new(&order, &record, now);
        writer.payment(&payment, &events).order(&order_events);
        changes.outbox = writer.finish();
        if !commit(self.uow.as_ref(), changes).await? {
            return Err(AppError::order_busy());
        }
        Ok(if recorded > 0 { ProviderRefunds::Recorded(recorded) } else { ProviderRefunds::Nothing })
    }
}
