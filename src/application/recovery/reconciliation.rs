//! Payments whose outcome is unknown, looked up at the provider (bounded), and the list an
//! operator works from.

use super::{ReconcileReport, Recovery};
use crate::application::orchestration::Reconciled;
use crate::application::{Actor, AppError};
use crate::domain::ids::OrderId;
use crate::domain::payment::{Payment, PaymentStatus};

impl Recovery {
    /// One look-up for every unknown payment that is due.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn reconcile_due(&self) -> Result<ReconcileReport, AppError> {
        let actor = Actor::system("reconciliation");
        let due = self
            .payments
            .awaiting_confirmation(
                PaymentStatus::ConfirmationRequired,
                self.clock.now(),
                self.settings.lookups.max_attempts,
                100,
            )
            .await?;
        let mut report = ReconcileReport::default();
        for payment in due {
            match self.reconcile(&actor, payment.order_id).await? {
                Reconciled::Resolved(_) => report.resolved += 1,
                Reconciled::StillUnknown => report.still_unknown += 1,
                Reconciled::Exhausted => report.exhausted += 1,
                Reconciled::Busy | Reconciled::NotPending => report.busy += 1,
            }
        }
        Ok(report)
    }

    /// Asks the provider about one unknown outcome and applies its answer (bounded attempts).
    pub(super) async fn reconcile(&self, actor: &Actor, order_id: OrderId) -> Result<Reconciled, AppError> {
        self.orchestrator.reconcile_payment(actor, order_id, self.settings.lookups).await
    }

    /// Payments whose outcome is still unknown (attempts left or not), for operators: an
    /// approval (`CONFIRMATION_REQUIRED`) or a refund (`REFUND_PENDING`) the provider has
    /// not told us the end of.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin.
    pub async fn unconfirmed(&self, actor: &Actor) -> Result<Vec<Payment>, AppError> {
        actor.require_admin()?;
        let mut payments = self.payments.with_status(PaymentStatus::ConfirmationRequired, 100).await?;
        payments.extend(self.payments.with_status(PaymentStatus::RefundPending, 100).await?);
        Ok(payments)
    }
}
