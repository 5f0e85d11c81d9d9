//! A member pays a meeting's fee with a card keyed in (the momo dialect's `POST
//! /payments/test/keyin`, docs/dialects.md): the meetup platform's test payments, through the
//! provider's key-in API, only where the provider allows it (Toss with a test secret key).
//!
//! One payment per (meeting, member): a member with a live one is answered that one, and
//! nothing is charged or sent. Otherwise the charge keeps the saga's skeleton (docs/spec.md
//! §4): the order (`MOMO`) is committed first with its payment attempt (the intent, under the
//! payment request id the call will use), so the (meeting, member) pair is taken before any
//! call and a second key-in, or a registration, meets that order instead of charging again.
//! Then the saga's payment step charges the card, held in memory by that one run and never
//! stored. An answer that leaves the charge open (a timeout, a lost answer) leaves the
//! payment `CONFIRMATION_REQUIRED`: reconciliation looks it up with backoff until Toss
//! answers, and until then the pair stays taken. A refusal fails the order; nothing moved.

use std::sync::Arc;

use crate::application::orchestration::{ALREADY_REGISTERED, KeyedIn, Orchestrator, PlaceOrder};
use crate::application::ports::{
    CustomerPayments, KeyedCard, MeetingFees, MeetingPayment, MeetingPayments, PaymentSortKey, Unchargeable,
};
use crate::application::{Actor, AppError};
use crate::domain::money::Currency;
use crate::domain::order::OrderSource;
use crate::domain::payment::PaymentStatus;

/// Key-in is not allowed here (a live key, or a provider without key-in): `Forbidden`.
pub const TEST_KEY_ONLY: &str = "TEST_KEY_ONLY";
/// The meeting's fee is 0: nothing to pay (`Unprocessable`), as for a registration.
pub use crate::application::inbound::FREE_MEETING;
/// The provider refused the card (`Unprocessable`, its code in the message); nothing charged.
pub const CARD_REFUSED: &str = "CARD_REFUSED";
/// The pair holds a live order with no payment yet (a registration on its way): `Conflict`.
pub const ALREADY_PAID: &str = "ALREADY_PAID";
/// No fee source is configured (`meetings.fee_source = message`): `Conflict`.
pub const NO_FEE_SOURCE: &str = "NO_FEE_SOURCE";

/// What no longer holds the member's place at the meeting: money that went back, or a
/// charge that never happened.
const NOT_LIVE: [PaymentStatus; 3] =
    [PaymentStatus::Refunded, PaymentStatus::Cancelled, PaymentStatus::Declined];

/// The meeting's fee, one to pay, and what the provider shows the charge as.
async fn fee_of(fees: &dyn MeetingFees, meeting: &str) -> Result<(i64, String), AppError> {
    let Some(found) = fees.meeting(meeting).await? else { return Err(AppError::NotFound("meeting")) };
    let name = format!("{} 참가비", found.title.as_deref().unwrap_or(&format!("모임 {meeting}")));
    match found.chargeable() {
        Err(Unchargeable::Free) => {
            Err(AppError::Unprocessable { code: FREE_MEETING, message: format!("meeting {meeting} is free") })
        }
        Err(Unchargeable::Negative(fee)) => {
            Err(AppError::internal(format!("meeting {meeting} has a negative fee {fee}")))
        }
        // Toss's `orderName` holds at most 100 characters.
        Ok(fee) => Ok((fee, name.chars().take(100).collect())),
    }
}

/// A member's key-in for a meeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInPayment {
    /// The platform's meeting id (decimal text).
    pub meeting_id: String,
    pub card: KeyedCard,
}

pub struct KeyIn {
    orchestrator: Arc<Orchestrator>,
    payments: Arc<dyn MeetingPayments>,
    /// `meetings.fee_source = sql`.
    fees: Option<Arc<dyn MeetingFees>>,
    /// `meetings.currency`.
    currency: Currency,
}

impl KeyIn {
    pub fn new(
        orchestrator: Arc<Orchestrator>,
        payments: Arc<dyn MeetingPayments>,
        fees: Option<Arc<dyn MeetingFees>>,
        currency: Currency,
    ) -> Self {
        KeyIn { orchestrator, payments, fees, currency }
    }

    /// The member's payment for the meeting: the live one it has, else a new one charged to
    /// the keyed-in card at the meeting's fee. A payment whose charge is still open comes
    /// back `REQUESTED` or `CONFIRMATION_REQUIRED` (the pair stays taken until it settles).
    ///
    /// # Errors
    /// `Forbidden` [`TEST_KEY_ONLY`]; `Conflict` [`NO_FEE_SOURCE`]; `NotFound("meeting")` for
    /// a meeting the fee source does not sell; `Unprocessable` [`FREE_MEETING`] (nothing
    /// charged, nothing stored) or [`CARD_REFUSED`] (nothing charged; the attempt is kept,
    /// failed); `Conflict` [`ALREADY_PAID`]; `Internal` for a negative fee; `Unavailable` when
    /// the fee source or the database cannot be used before the order is placed.
    pub async fn pay(&self, member: &Actor, request: KeyInPayment) -> Result<MeetingPayment, AppError> {
        let fees = self.allowed()?;
        let meeting = request.meeting_id;
        if let Some(existing) = self.live_payment(member, &meeting).await? {
            return Ok(existing);
        }
        let (fee, order_name) = fee_of(fees, &meeting).await?;
        let order = PlaceOrder {
            keyed_in: Some(KeyedIn { card: request.card, order_name }),
            ..PlaceOrder::meeting(OrderSource::Momo, &meeting, &member.subject, self.currency.as_str(), fee)
        };
        let record = match self.orchestrator.place_order(member, order).await {
            Ok(record) => record,
            Err(err) => return self.not_placed(member, &meeting, err).await,
        };
        let payment = record
            .payment
            .ok_or_else(|| AppError::internal("a keyed-in order was placed without its payment"))?;
        if payment.status == PaymentStatus::Declined {
            let code = payment.decline_code.clone().unwrap_or_else(|| "DECLINED".into());
            return Err(AppError::Unprocessable { code: CARD_REFUSED, message: code });
        }
        Ok(MeetingPayment {
            payment,
            customer_id: record.order.customer_id,
            meeting_id: record.order.meeting_id,
        })
    }

    /// The fees, where key-in is allowed and the fees are there.
    fn allowed(&self) -> Result<&dyn MeetingFees, AppError> {
        if !self.orchestrator.charges_keyed_cards() {
            return Err(AppError::Forbidden {
                code: TEST_KEY_ONLY,
                message: "key-in is allowed only with a test secret key".into(),
            });
        };
        let Some(fees) = &self.fees else {
            return Err(AppError::Conflict {
                code: NO_FEE_SOURCE,
                message: "key-in needs the meetings' fees: set meetings.fee_source = sql".into(),
            });
        };
        Ok(fees.as_ref())
    }

    /// An order that could not be placed: the pair holds a live order already (a second
    /// key-in, a registration) — answered its payment, nothing charged.
    async fn not_placed(
        &self,
        member: &Actor,
        meeting: &str,
        err: AppError,
    ) -> Result<MeetingPayment, AppError> {
        let AppError::Conflict { code: ALREADY_REGISTERED, .. } = err else { return Err(err) };
        self.live_payment(member, meeting).await?.ok_or_else(|| AppError::Conflict {
            code: ALREADY_PAID,
            message: "the member's registration for this meeting is on its way".into(),
        })
    }

    /// The member's live payment for the meeting, the newest if there were more.
    async fn live_payment(&self, member: &Actor, meeting: &str) -> Result<Option<MeetingPayment>, AppError> {
        let query = CustomerPayments {
            customer_id: member.subject.clone(),
            meeting_id: Some(meeting.to_owned()),
            hidden: NOT_LIVE.to_vec(),
            sort: vec![(PaymentSortKey::Number, true)],
            limit: 1,
            ..CustomerPayments::default()
        };
        Ok(self.payments.of_customer(&query).await?.0.into_iter().next())
    }
}
