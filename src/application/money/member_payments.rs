//! A member's own payments (the momo dialect, docs/dialects.md): the payments of the meeting
//! orders made from its registrations, listed, looked up at the provider, refunded. As on the
//! meetup platform, which deletes a payment it refunded, a payment whose money went back
//! (`REFUNDED`, `CANCELLED`) is no longer the member's to see; our books keep it.

use std::sync::Arc;

use crate::application::money::provider_view::ProviderView;
use crate::application::money::refunds::{RefundOutcome, RefundRequest, Refunds};
use crate::application::ports::{CustomerPayments, MeetingPayment, MeetingPayments, ProviderRecord};
use crate::application::{Actor, AppError};
use crate::domain::payment::PaymentStatus;

/// What a member no longer sees: the money went back.
pub const GONE: [PaymentStatus; 2] = [PaymentStatus::Refunded, PaymentStatus::Cancelled];

/// A payment of someone else's (`Forbidden` with this code).
pub const NOT_OWNER: &str = "NOT_OWNER";

pub struct MemberPayments {
    payments: Arc<dyn MeetingPayments>,
    /// The provider's records (none with mock or external).
    records: Arc<ProviderView>,
    refunds: Arc<Refunds>,
}

impl MemberPayments {
    pub fn new(
        payments: Arc<dyn MeetingPayments>,
        records: Arc<ProviderView>,
        refunds: Arc<Refunds>,
    ) -> Self {
        MemberPayments { payments, records, refunds }
    }

    /// One page of `member`'s payments (`query.customer_id` is set to it), gone ones and
    /// refused key-ins left out, and how many there are in all.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn page(
        &self,
        member: &Actor,
        mut query: CustomerPayments,
    ) -> Result<(Vec<MeetingPayment>, u64), AppError> {
        query.customer_id = member.subject.clone();
        query.hidden = GONE.to_vec();
        query.declined_keyed_in_hidden = true;
        Ok(self.payments.of_customer(&query).await?)
    }

    /// `member`'s payment numbered `number`, while it is not gone.
    ///
    /// # Errors
    /// `NotFound` (none, or gone); `Forbidden` [`NOT_OWNER`] for someone else's.
    async fn own(&self, member: &Actor, number: i64) -> Result<MeetingPayment, AppError> {
        let found = self.payments.by_number(number).await?;
        let payment =
            found.filter(|p| !GONE.contains(&p.payment.status)).ok_or(AppError::NotFound("payment"))?;
        if payment.customer_id != member.subject {
            return Err(AppError::Forbidden { code: NOT_OWNER, message: "not the member's payment".into() });
        }
        Ok(payment)
    }

    /// The provider's live record of `member`'s payment.
    ///
    /// # Errors
    /// As [`Self::own`]; `NotFound` when the provider never took it (no transaction id) or
    /// has no record of it; `Conflict` `NOT_SUPPORTED` for a provider with nothing to show;
    /// `Unavailable` when the provider cannot be reached or refuses the look-up.
    pub async fn provider_record(&self, member: &Actor, number: i64) -> Result<ProviderRecord, AppError> {
        let payment = self.own(member, number).await?;
        match self.records.record_of(&payment.payment).await {
            Ok(Some(record)) => Ok(record),
            Ok(None) | Err(AppError::Conflict { code: "NOT_AT_PROVIDER", .. }) => {
                Err(AppError::NotFound("payment"))
            }
            Err(err) => Err(err),
        }
    }

    /// Refunds what remains of `member`'s completed payment.
    ///
    /// # Errors
    /// As [`Self::own`]; `Conflict` `REFUND_NOT_ALLOWED` unless it is approved with a
    /// balance left; then as [`Refunds::refund_order`].
    pub async fn refund(
        &self,
        member: &Actor,
        number: i64,
        reason: Option<String>,
    ) -> Result<RefundOutcome, AppError> {
        let payment = self.own(member, number).await?;
        if !matches!(payment.payment.status, PaymentStatus::Approved | PaymentStatus::PartiallyRefunded) {
            return Err(AppError::Conflict {
                code: "REFUND_NOT_ALLOWED",
                message: format!("the payment is {}", payment.payment.status),
            });
        }
        let request = RefundRequest { reason, ..RefundRequest::default() };
        self.refunds.refund_order(member, payment.payment.order_id, request).await
    }
}
