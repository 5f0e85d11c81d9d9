//! A refund asked for: checked, its intent committed, the provider asked (docs/spec.md §3).

use super::{DEFAULT_REASON, RefundOutcome, RefundRequest, Refunds, Restate, changed_concurrently};
use crate::application::audit::{self, entity};
use crate::application::commit::commit;
use crate::application::error::broken_invariant;
use crate::application::ports::{Changes, OrderRecord, Scenario};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{OrderId, RefundId};
use crate::domain::payment::{PaymentError, RefundStatus};

/// The reason sent to the provider: the one asked (or the default), within what the
/// provider takes (a consumer's reason names its event).
fn sent_reason(asked: Option<String>) -> String {
    asked
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_REASON.into())
        .chars()
        .take(crate::domain::text::limits::REFUND_REASON)
        .collect()
}

/// What a request asks of the refund it begins.
struct Intent {
    amount: Option<i64>,
    reason: Option<String>,
    request_key: Option<String>,
    causation_id: Option<String>,
}

/// How long a refund waits for another runner holding its order (a refund racing it, a saga
/// step) before answering `ORDER_BUSY`: long enough for a provider's refund call to finish,
/// so the loser of a race is answered what the winner left, not "retry".
pub const LEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

impl Refunds {
    /// Refunds `request.amount` (or the whole balance) of `order_id`'s payment. `inbox` (an
    /// inbound message) is recorded in the same transaction as the outcome; `scenario`
    /// overrides the order's mock refund behaviour if it has one.
    ///
    /// # Errors
    /// `NotFound`; `Forbidden` `UNAUTHORIZED_REFUND` unless the caller is the order's
    /// customer or an admin; `Conflict` `REFUND_NOT_ALLOWED` unless the order is `COMPLETED`
    /// with a balance left, `ORDER_BUSY` while another runner changes it for longer than
    /// [`LEASE_WAIT`] (a refund racing another waits for it, then answers what the winner
    /// left: a retry could tell it nothing more); `Unprocessable`
    /// `REFUND_AMOUNT_INVALID` unless `0 < amount <= balance` (nothing called);
    /// `Unavailable` when the provider or the database is down: the refund's intent is
    /// recorded before the provider is called, so a retry with the same request key, or
    /// the worker, finishes it with the same provider key.
    pub async fn refund_order(
        &self,
        actor: &Actor,
        order_id: OrderId,
        request: RefundRequest,
    ) -> Result<RefundOutcome, AppError> {
        let deadline = tokio::time::Instant::now() + LEASE_WAIT;
        loop {
            let attempt = request.clone();
            let held = self
                .leases
                .holding(order_id, async move |_| {
                    self.refund_leased(actor, order_id, attempt, Restate::Once).await
                })
                .await?;
            match held {
                Some(result) => return result,
                None if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                None => return Err(self.not_held(&[order_id]).await),
            }
        }
    }

    /// Refunds every order of `requests` as one hold (a meeting deleted, docs/spec.md §7):
    /// the saga leases of all of them are taken first, or none — while another runner holds
    /// one, nothing is asked and the answer is `ORDER_BUSY` — so two such holds over the
    /// same orders never interleave: the second finds what the first did. Each order's
    /// outcome, in order; the leases are given back at the end.
    ///
    /// # Errors
    /// `Conflict` `ORDER_BUSY` while another runner holds one of the orders (nothing done);
    /// `NotFound` for an order that does not exist; `Unavailable` when the database fails.
    pub async fn refund_orders(
        &self,
        actor: &Actor,
        requests: Vec<(OrderId, RefundRequest)>,
    ) -> Result<Vec<(OrderId, Result<RefundOutcome, AppError>)>, AppError> {
        let order_ids: Vec<OrderId> = requests.iter().map(|(order_id, _)| *order_id).collect();
        let held = self
            .leases
            .holding_all(&order_ids, async move || {
                let mut outcomes = Vec::with_capacity(requests.len());
                for (order_id, request) in requests {
                    outcomes
                        .push((order_id, self.refund_leased(actor, order_id, request, Restate::Once).await));
                }
                outcomes
            })
            .await?;
        match held {
            Some(outcomes) => Ok(outcomes),
            None => Err(self.not_held(&order_ids).await),
        }
    }

    pub(super) async fn refund_leased(
        &self,
        actor: &Actor,
        order_id: OrderId,
        request: RefundRequest,
        restate: Restate,
    ) -> Result<RefundOutcome, AppError> {
        let RefundRequest { reason, amount, request_key, inbox, causation_id, scenario } = request;
        let record = self.load(order_id).await?;
        if !actor.may_access(&record.order) {
            self.audit_rejection(actor, order_id, "not the order's customer".into()).await?;
            return Err(AppError::Forbidden {
                code: "UNAUTHORIZED_REFUND",
                message: "only the order's customer or an admin may refund it".into(),
            });
        }
        // The same request again: its refund, as it stands or finished now.
        let known = request_key
            .as_ref()
            .and_then(|key| record.refunds.iter().find(|r| r.request_key.as_ref() == Some(key)).cloned());
        if let Some(known) = known {
            return match known.status {
                RefundStatus::Succeeded => Ok(RefundOutcome::Refunded(record)),
                RefundStatus::Failed => {
                    let reason = known.failure_reason.unwrap_or_else(|| "refused".into());
                    Ok(RefundOutcome::Rejected { record, reason: format!("refused before: {reason}") })
                }
                RefundStatus::Pending => self.finish(record, known.id, actor, inbox, scenario, restate).await,
            };
        }
        let record = self.refundable_now(record, actor, scenario).await?;
        let intent = Intent { amount, reason, request_key, causation_id };
        let (record, refund_id) = self.commit_intent(record, actor, intent).await?;
        self.finish(record, refund_id, actor, inbox, scenario, restate).await
    }

    /// `record`, once it may be refunded: `COMPLETED` with a balance left, and any refund
    /// still pending (its answer was lost) finished first, with its own key.
    async fn refundable_now(
        &self,
        record: OrderRecord,
        actor: &Actor,
        scenario: Scenario,
    ) -> Result<OrderRecord, AppError> {
        let order_id = record.order.id;
        if !Self::refundable(&record) {
            let status = record.payment.as_ref().map_or("none", |p| p.status.as_str());
            self.audit_rejection(actor, order_id, format!("order {} is {}", record.order.status, status))
                .await?;
            return Err(AppError::Conflict {
                code: "REFUND_NOT_ALLOWED",
                message: format!(
                    "only a COMPLETED order with a balance left on its payment can be refunded; this one is {} (payment {status})",
                    record.order.status
                ),
            });
        }
        let Some(pending) = record.refunds.iter().find(|r| r.status == RefundStatus::Pending).map(|r| r.id)
        else {
            return Ok(record);
        };
        if let RefundOutcome::Pending { reason, .. } =
            self.finish(record, pending, actor, None, scenario, Restate::No).await?
        {
            return Err(AppError::unavailable(format!(
                "another refund of this order is pending ({reason}); it is finished first"
            )));
        }
        let record = self.load(order_id).await?;
        if !Self::refundable(&record) {
            return Err(AppError::Conflict {
                code: "REFUND_NOT_ALLOWED",
                message: "the payment has no balance left".into(),
            });
        }
        Ok(record)
    }

    /// The refund's intent, committed before the provider is asked: whatever happens to
    /// the answer, the worker finds this refund and finishes it (docs/spec.md §4). An
    /// amount the balance cannot hold is refused (audited), nothing committed.
    async fn commit_intent(
        &self,
        mut record: OrderRecord,
        actor: &Actor,
        intent: Intent,
    ) -> Result<(OrderRecord, RefundId), AppError> {
        let order_id = record.order.id;
        let mut payment = record.payment.clone().ok_or_else(|| broken_invariant("no payment"))?;
        let now = self.clock.now();
        let reason = sent_reason(intent.reason);
        let balance = payment.balance();
        let begun = payment.begin_refund(
            intent.amount,
            reason.clone(),
            actor.subject.clone(),
            intent.request_key,
            now,
        );
        let mut refund = match begun {
            Ok(refund) => refund,
            Err(PaymentError::RefundAmountInvalid { requested, balance }) => {
                return Err(self.amount_refused(actor, order_id, requested, balance).await);
            }
            Err(err) => return Err(broken_invariant(err)),
        };
        refund.causation_id = intent.causation_id;
        let mut changes = Changes::default();
        changes.update_payment(&mut payment);
        changes.insert_refund(&mut refund);
        let detail = format!(
            "refund {} of {} (balance {balance}), Idempotency-Key {}: {reason}",
            refund.id,
            refund.amount.minor(),
            refund.idempotency_key
        );
        changes.audit.push(audit::record(
            AuditAction::RefundRequested,
            entity::ORDER,
            order_id,
            actor,
            Some(detail),
            now,
        ));
        if !commit(self.uow.as_ref(), changes).await? {
            return Err(changed_concurrently());
        }
        let refund_id = refund.id;
        record.payment = Some(payment);
        record.refunds.push(refund);
        Ok((record, refund_id))
    }

    /// An amount the balance cannot hold: audited, and refused naming both.
    async fn amount_refused(
        &self,
        actor: &Actor,
        order_id: OrderId,
        requested: i64,
        balance: i64,
    ) -> AppError {
        let audited =
            self.audit_rejection(actor, order_id, format!("refund of {requested} asked, balance {balance}"));
        if let Err(err) = audited.await {
            return err;
        }
        AppError::Unprocessable {
            code: "REFUND_AMOUNT_INVALID",
            message: format!(
                "a refund must be more than 0 and at most the balance {balance}; asked for {requested}"
            ),
        }
    }

    pub(super) async fn audit_rejection(
        &self,
        actor: &Actor,
        order_id: OrderId,
        detail: String,
    ) -> Result<(), AppError> {
        let mut changes = Changes::default();
        changes.audit.push(audit::record(
            AuditAction::RefundRejected,
            entity::ORDER,
            order_id,
            actor,
            Some(detail),
            self.clock.now(),
        ));
        Ok(self.uow.commit(changes).await?)
    }
}
