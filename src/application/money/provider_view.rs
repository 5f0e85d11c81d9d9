//! The provider's view of a payment for support (docs/spec.md §10): the provider's own live
//! record, unchanged, to set beside ours (operators compare them when they disagree).

use std::sync::Arc;

use crate::application::ports::Cause;
use crate::application::ports::{GatewayError, PaymentRepository, ProviderRecord, ProviderRecords};
use crate::application::{Actor, AppError};
use crate::domain::ids::PaymentId;
use crate::domain::payment::Payment;

/// The provider refused to show what it holds (`Conflict`, 409): its answer, not an outage.
pub const PROVIDER_REFUSED: &str = "PROVIDER_REFUSED";

pub struct ProviderView {
    payments: Arc<dyn PaymentRepository>,
    /// `None` for a provider with no record to show (mock, external).
    records: Option<Arc<dyn ProviderRecords>>,
}

impl ProviderView {
    pub fn new(payments: Arc<dyn PaymentRepository>, records: Option<Arc<dyn ProviderRecords>>) -> Self {
        ProviderView { payments, records }
    }

    /// Our payment and the provider's record of it (`None`: the provider has none).
    ///
    /// # Errors
    /// `Forbidden` unless admin; `NotFound`; `Conflict` `NOT_SUPPORTED` for a provider with
    /// nothing to show, `NOT_AT_PROVIDER` for a payment the provider never took (no
    /// transaction id), or [`PROVIDER_REFUSED`] when the provider refuses the look-up;
    /// `Unavailable` when the provider cannot be reached.
    pub async fn of(
        &self,
        actor: &Actor,
        id: PaymentId,
    ) -> Result<(Payment, Option<ProviderRecord>), AppError> {
        actor.require_admin()?;
        let payment = self.payments.by_id(id).await?.ok_or(AppError::NotFound("payment"))?;
        let record = self.record_of(&payment).await?;
        Ok((payment, record))
    }

    /// The provider's record of `payment` (`None`: the provider has none), for a caller the
    /// use case has already checked.
    ///
    /// # Errors
    /// As [`Self::of`], but for the caller and the look-up of our payment.
    pub async fn record_of(&self, payment: &Payment) -> Result<Option<ProviderRecord>, AppError> {
        let Some(key) = payment.provider_transaction_id.as_deref() else {
            return Err(AppError::Conflict {
                code: "NOT_AT_PROVIDER",
                message: "the provider never took this payment (no transaction id)".into(),
            });
        };
        let Some(records) = self.records.as_ref() else {
            return Err(AppError::Conflict {
                code: "NOT_SUPPORTED",
                message: "this payment provider has no record to show".into(),
            });
        };
        match records.provider_record(key).await {
            Ok(record) => Ok(record),
            // A refusal is the provider's answer, not an outage: asking again will not help.
            Err(GatewayError::Rejected { code, message }) => Err(AppError::Conflict {
                code: PROVIDER_REFUSED,
                message: format!("payment provider refused the look-up: {code}: {message}"),
            }),
            Err(e @ GatewayError::Unavailable(_)) => {
                Err(AppError::Unavailable(Cause::context("payment provider", e)))
            }
        }
    }
}
