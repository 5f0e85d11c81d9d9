//! Refunds whose outcome is unknown: the worker asks again, an operator decides.

use super::decide::pending_refund;
use super::{OperatorDecision, PendingRefundReport, RefundAnswer, RefundOutcome, Refunds, Restate};
use crate::application::audit::{self, entity};
use crate::application::error::broken_invariant;
use crate::application::ports::{CancelReceipt, Changes, LookupOutcome, OrderRecord, Scenario};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{OrderId, RefundId};
use crate::domain::payment::{PaymentStatus, RefundStatus};

impl Refunds {
    /// An operator ends a pending refund whose outcome the worker could not learn (audited
    /// `REFUND_UNRESOLVED`, or any refund still pending), after looking at the provider's
    /// own books: made (with the provider's key of the cancel, if known) or not made. The
    /// outcome is recorded as a provider's answer would be — through the payment's
    /// transitions, audited with the operator and `reason`.
    ///
    /// # Errors
    /// `NotFound` (order or refund); `Conflict` `REFUND_NOT_PENDING` unless the refund is
    /// pending, `ORDER_BUSY` while another runner holds the order; `Unavailable` when the
    /// database fails.
    pub async fn resolve_by_operator(
        &self,
        actor: &Actor,
        order_id: OrderId,
        refund_id: RefundId,
        decision: OperatorDecision,
        reason: String,
    ) -> Result<OrderRecord, AppError> {
        let held = self.leases.holding(order_id, async move |_| {
            let record = self.load(order_id).await?;
            let refund =
                record.refunds.iter().find(|r| r.id == refund_id).ok_or(AppError::NotFound("refund"))?;
            if refund.status != RefundStatus::Pending {
                return Err(AppError::Conflict {
                    code: "REFUND_NOT_PENDING",
                    message: format!("refund {refund_id} is {}, not pending", refund.status.as_str()),
                });
            }
            let note = format!("resolved by an operator: {reason}");
            let answer = match decision {
                OperatorDecision::Made { transaction_key } => {
                    RefundAnswer::Refunded(CancelReceipt { transaction_key, balance_after: None })
                }
                OperatorDecision::NotMade => RefundAnswer::Refused {
                    code: "OPERATOR".into(),
                    message: note.clone(),
                    already_cancelled: false,
                },
            };
            let mut changes = Changes::default();
            changes.audit.push(audit::record(
                AuditAction::RefundResolvedByOperator,
                entity::ORDER,
                order_id,
                actor,
                Some(format!("refund {refund_id}: {note}")),
                self.clock.now(),
            ));
            match self.record_outcome_with(record, refund_id, answer, actor, None, changes).await? {
                RefundOutcome::Refunded(record)
                | RefundOutcome::Rejected { record, .. }
                | RefundOutcome::Pending { record, .. } => Ok(record),
            }
        });
        match held.await? {
            Some(result) => result,
            None => Err(self.not_held(&[order_id]).await),
        }
    }

    /// The worker's half of the skeleton: refunds whose intent was committed but whose
    /// outcome was not (a crash, a database failure after the provider answered, a provider
    /// that could not be reached). Each is asked again with its own key: a provider that
    /// carried it out answers with that (Toss replays a key's first answer), one that did
    /// not carries it out now, once. Bounded: past `retry.max_attempts` the refund is audited
    /// `REFUND_UNRESOLVED`, listed at `GET /api/admin/payments/unconfirmed` and counted in
    /// `/metrics`.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn resolve_pending(&self) -> Result<PendingRefundReport, AppError> {
        let actor = Actor::system("refund-recovery");
        let now = self.clock.now();
        let due = self
            .pending
            .awaiting_confirmation(PaymentStatus::RefundPending, now, self.settings.retry.max_attempts, 100)
            .await?;
        let mut report = PendingRefundReport::default();
        for payment in due {
            let order_id = payment.order_id;
            let held = self.leases.holding(order_id, async |_| self.resolve_leased(&actor, order_id).await);
            let Some(result) = held.await? else {
                report.busy += 1;
                continue;
            };
            match result {
                Ok(RefundOutcome::Refunded(_)) => report.refunded += 1,
                Ok(RefundOutcome::Rejected { .. }) => report.refused += 1,
                Ok(RefundOutcome::Pending { .. }) | Err(AppError::Unavailable(_)) => {
                    report.still_unknown += 1
                }
                Err(AppError::Conflict { .. }) => report.busy += 1,
                Err(err) => return Err(err),
            }
        }
        Ok(report)
    }

    pub(super) async fn resolve_leased(
        &self,
        actor: &Actor,
        order_id: OrderId,
    ) -> Result<RefundOutcome, AppError> {
        let record = self.load(order_id).await?;
        let pending = record
            .payment
            .as_ref()
            .filter(|p| p.status == PaymentStatus::RefundPending)
            .and_then(|_| record.refunds.iter().find(|r| r.status == RefundStatus::Pending))
            .map(|r| r.id);
        let Some(refund_id) = pending else {
            return Err(AppError::Conflict {
                code: "REFUND_NOT_ALLOWED",
                message: "no refund pending".into(),
            });
        };
        // A provider that lists no cancels but says the payment is cancelled whole has made
        // a refund of the whole balance: ours, if that is what we asked (nothing is asked
        // twice). Otherwise the same key again tells.
        let whole = pending_refund(&record, refund_id)?.amount.minor()
            == record.payment.as_ref().map_or(0, |p| p.balance());
        if whole {
            let payment = record.payment.as_ref().ok_or_else(|| broken_invariant("no payment"))?;
            let scenario = record.context.scenario;
            if let Ok(LookupOutcome::Cancelled { cancels, .. }) =
                self.payments.lookup(&payment.payment_request_id, &scenario).await
                && cancels.is_empty()
            {
                let answer = RefundAnswer::Refunded(CancelReceipt::default());
                return self.record_outcome(record, refund_id, answer, actor, None).await;
            }
        }
        self.finish(record, refund_id, actor, None, Scenario::default(), Restate::Once).await
    }
}
