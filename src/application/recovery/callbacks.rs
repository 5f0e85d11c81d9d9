//! What providers tell us on their own: the external provider's callbacks and Toss's payment
//! notices, each checked against the provider before it moves anything.

use super::{
    CALLBACK_AUDIT_WINDOW, CallbackResult, NoticeOutcome, NoticeSubject, PaymentNotice, ProviderCallback,
    Recovery,
};
use crate::application::audit::{self, entity};
use crate::application::error::Chain;
use crate::application::money::refunds::ProviderRefunds;
use crate::application::orchestration::{Confirmation, Reconciled};
use crate::application::ports::Changes;
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::payment::PaymentStatus;

impl Recovery {
    /// A provider callback: the final outcome of a payment, pushed.
    ///
    /// # Errors
    /// `NotFound` for an unknown `paymentRequestId`; `Unavailable` when the database fails.
    pub async fn handle_callback(&self, callback: ProviderCallback) -> Result<CallbackResult, AppError> {
        let actor = Actor::system("payment-callback");
        let known = self.payments.by_provider_transaction(&callback.provider_transaction_id).await?;
        if known.is_some_and(|p| p.status != PaymentStatus::ConfirmationRequired) {
            return Ok(CallbackResult::Duplicate);
        }
        let payment = self
            .payments
            .by_request_id(&callback.payment_request_id)
            .await?
            .ok_or(AppError::NotFound("payment"))?;
        if payment.status != PaymentStatus::ConfirmationRequired {
            let mut changes = Changes::default();
            let detail = format!(
                "callback for {} ({}) after the payment was already {}",
                callback.payment_request_id, callback.provider_transaction_id, payment.status
            );
            changes.audit.push(audit::record(
                AuditAction::CallbackDuplicate,
                entity::ORDER,
                payment.order_id,
                &actor,
                Some(detail),
                self.clock.now(),
            ));
            self.uow.commit(changes).await?;
            return Ok(CallbackResult::Duplicate);
        }
        let confirmation = if callback.approved {
            Confirmation::Approved { provider_transaction_id: callback.provider_transaction_id }
        } else {
            Confirmation::Declined {
                code: callback.decline_code.unwrap_or_else(|| "DECLINED".into()),
                provider_transaction_id: Some(callback.provider_transaction_id),
            }
        };
        Ok(
            match self
                .orchestrator
                .confirm_payment(&actor, payment.order_id, confirmation, "callback")
                .await?
            {
                Some(record) => CallbackResult::Applied(Box::new(record)),
                None => CallbackResult::Busy,
            },
        )
    }

    /// Records a callback refused before reading it (bad or stale signature).
    ///
    /// Every rejection is counted (`payment_callbacks_rejected_total`), but an
    /// unauthenticated caller must not be able to grow the audit log at will: at most one
    /// `CALLBACK_REJECTED` row per [`CALLBACK_AUDIT_WINDOW`] per process, saying how many
    /// were refused since the last one.
    pub async fn reject_callback(&self, reason: &str) {
        self.meter.record(|| metrics::counter!("payment_callbacks_rejected_total").increment(1));
        self.bounded_audit(&self.callback_audit, AuditAction::CallbackRejected, "payment-callback", reason)
            .await;
    }

    /// At most one audit row of `action` per [`CALLBACK_AUDIT_WINDOW`] per process (anyone can
    /// call the endpoints that write them), saying how many were left out since the last.
    pub(super) async fn bounded_audit(
        &self,
        window: &std::sync::Mutex<(Option<chrono::DateTime<chrono::Utc>>, u64)>,
        action: AuditAction,
        component: &str,
        reason: &str,
    ) {
        let now = self.clock.now();
        let suppressed = {
            let mut window = window.lock().unwrap_or_else(|e| e.into_inner());
            match window.0 {
                Some(last) if now - last < CALLBACK_AUDIT_WINDOW => {
                    window.1 += 1;
                    return;
                }
                _ => {
                    window.0 = Some(now);
                    std::mem::take(&mut window.1)
                }
            }
        };
        let actor = Actor::system(component);
        let mut changes = Changes::default();
        let mut detail: String = reason.chars().take(200).collect();
        if suppressed > 0 {
            detail.push_str(&format!(" (and {suppressed} more since the last audit row)"));
        }
        changes.audit.push(audit::record(action, entity::PAYMENT_CALLBACK, "-", &actor, Some(detail), now));
        if let Err(err) = self.uow.commit(changes).await {
            tracing::warn!(error = %Chain(&err), "could not write a bounded audit row");
        }
    }

    /// A provider's notice that a payment changed (Toss's `PAYMENT_STATUS_CHANGED` webhook,
    /// docs/spec.md §10). Never trusted: it only names the payment; what the provider says
    /// when asked is what applies — an unknown outcome is reconciled now, a payment cancelled
    /// in the provider's dashboard is recorded as a refund by `provider`. A notice for a
    /// payment we do not have, or that changes nothing, changes nothing (its audit bounded).
    /// `admit` is asked once the payment is looked up, with what the notice names: `false`
    /// ends it `Throttled`, before the provider is asked or anything audited — so a flood
    /// of made-up keys and the notices of real payments can be given budgets of their own.
    ///
    /// # Errors
    /// `Conflict` `ORDER_BUSY` while another runner holds the order; `Unavailable` when the
    /// provider or the database fails (the provider retries its webhook).
    pub async fn payment_notice(
        &self,
        notice: PaymentNotice,
        admit: impl FnOnce(NoticeSubject<'_>) -> bool,
    ) -> Result<NoticeOutcome, AppError> {
        let mut payment = self.payments.by_provider_transaction(&notice.payment_key).await?;
        if payment.is_none()
            && let Some(order_id) = &notice.order_id
        {
            payment = self.payments.by_request_id(order_id).await?;
        }
        let subject = match &payment {
            Some(payment) => NoticeSubject::Known(payment.payment_request_id.as_str()),
            None => NoticeSubject::Unknown,
        };
        if !admit(subject) {
            return Ok(NoticeOutcome::Throttled);
        }
        let Some(payment) = payment else {
            self.bounded_audit(
                &self.webhook_audit,
                AuditAction::WebhookIgnored,
                "payment-webhook",
                "a notice of a payment we do not have",
            )
            .await;
            return Ok(NoticeOutcome::Unchanged);
        };
        let actor = Actor::system("payment-webhook");
        match payment.status {
            PaymentStatus::ConfirmationRequired => {
                Ok(match self.reconcile(&actor, payment.order_id).await? {
                    Reconciled::Resolved(_) => NoticeOutcome::Applied,
                    Reconciled::Busy => {
                        return Err(AppError::order_busy());
                    }
                    _ => NoticeOutcome::Unchanged,
                })
            }
            PaymentStatus::Approved | PaymentStatus::PartiallyRefunded => {
                Ok(match self.refunds.record_provider_refunds(payment.order_id).await? {
                    ProviderRefunds::Recorded(_) => NoticeOutcome::Applied,
                    ProviderRefunds::Nothing => NoticeOutcome::Unchanged,
                })
            }
            _ => Ok(NoticeOutcome::Unchanged),
        }
    }
}
