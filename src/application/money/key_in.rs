//! A member pays a meeting's fee with a card keyed in (the momo dialect's `POST
//! /payments/test/keyin`, docs/dialects.md): the meetup platform's test payments, through the
//! provider's key-in API, only where the provider allows it (Toss with a test secret key).
//!
//! One payment per (meeting, member): a member with a live one is answered that one, and
//! nothing is charged or sent. Otherwise the card is charged first, under the payment request
//! id of the order it becomes, and only a charge the provider took is placed: the order
//! (`MOMO`) is committed with its payment already authorized, and the saga's payment step asks
//! the provider what it took instead of charging again ([`PaymentAuthorization::Charged`]).
//! A refusal leaves no order, no payment and no event. A charge whose order cannot be
//! committed (the pair registered meanwhile, the database down) is cancelled at once; one
//! whose cancel fails too is logged, and the daily ledger shows it as Toss's approval with no
//! payment of ours (docs/operations.md).
//!
//! [`PaymentAuthorization::Charged`]: crate::application::ports::PaymentAuthorization::Charged

use std::sync::Arc;

use crate::application::error::Chain;
use crate::application::orchestration::{ALREADY_REGISTERED, Orchestrator, PlaceOrder};
use crate::application::ports::{
    ApprovalOutcome, CancelPayment, CardKeyIn, Cause, CustomerPayments, GatewayError, KeyInCharge, KeyedCard,
    LookupOutcome, MeetingFees, MeetingPayment, PaymentGateway, PaymentRepository, PaymentSortKey, Scenario,
};
use crate::application::{Actor, AppError};
use crate::domain::ids::{OrderId, PaymentId};
use crate::domain::money::{Currency, Money};
use crate::domain::order::OrderSource;
use crate::domain::payment::{PaymentStatus, payment_request_id};

/// Key-in is not allowed here (a live key, or a provider without key-in): `Forbidden`.
pub const TEST_KEY_ONLY: &str = "TEST_KEY_ONLY";
/// The meeting's fee is 0: nothing to pay (`Unprocessable`).
pub const FREE_MEETING: &str = "FREE_MEETING";
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

/// The meeting's fee: one to pay.
async fn fee_of(fees: &dyn MeetingFees, meeting: &str) -> Result<i64, AppError> {
    match fees.fee(meeting).await? {
        None => Err(AppError::NotFound("meeting")),
        Some(0) => {
            Err(AppError::Unprocessable { code: FREE_MEETING, message: format!("meeting {meeting} is free") })
        }
        Some(fee) if fee < 0 => {
            Err(AppError::internal(format!("meeting {meeting} has a negative fee {fee}")))
        }
        Some(fee) => Ok(fee),
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
    payments: Arc<dyn PaymentRepository>,
    /// Reads what a charge left open, and gives back one no order holds.
    gateway: Arc<dyn PaymentGateway>,
    /// Present only where the provider allows key-in.
    cards: Option<Arc<dyn CardKeyIn>>,
    /// `meetings.fee_source = sql`.
    fees: Option<Arc<dyn MeetingFees>>,
    /// `meetings.currency`.
    currency: Currency,
}

impl KeyIn {
    pub fn new(
        orchestrator: Arc<Orchestrator>,
        payments: Arc<dyn PaymentRepository>,
        gateway: Arc<dyn PaymentGateway>,
        cards: Option<Arc<dyn CardKeyIn>>,
        fees: Option<Arc<dyn MeetingFees>>,
        currency: Currency,
    ) -> Self {
        KeyIn { orchestrator, payments, gateway, cards, fees, currency }
    }

    /// The member's payment for the meeting: the live one it has, else a new one charged to
    /// the keyed-in card at the meeting's fee.
    ///
    /// # Errors
    /// `Forbidden` [`TEST_KEY_ONLY`]; `Conflict` [`NO_FEE_SOURCE`]; `NotFound("meeting")` for
    /// a meeting the fee source does not have; `Unprocessable` [`FREE_MEETING`] or
    /// [`CARD_REFUSED`] (nothing charged, nothing stored); `Conflict` [`ALREADY_PAID`];
    /// `Internal` for a negative fee; `Unavailable` when the provider, the fee source or
    /// the database cannot be used.
    pub async fn pay(&self, member: &Actor, request: KeyInPayment) -> Result<MeetingPayment, AppError> {
        let (cards, fees) = self.allowed()?;
        let meeting = request.meeting_id;
        if let Some(existing) = self.live_payment(member, &meeting).await? {
            return Ok(existing);
        }
        let fee = fee_of(fees, &meeting).await?;
        let amount = Money::new(fee, self.currency)
            .map_err(|e| AppError::internal(format!("meeting {meeting}'s fee {fee}: {e}")))?;
        let order_id = OrderId::new();
        let charge = KeyInCharge {
            payment_request_id: payment_request_id(order_id, 1),
            amount,
            order_name: format!("모임 {meeting} 참가비"),
            card: request.card,
        };
        let payment_key = self.charge(cards, &charge).await?;
        let order = PlaceOrder {
            order_id,
            charged: Some(payment_key.clone()),
            ..PlaceOrder::meeting(OrderSource::Momo, &meeting, &member.subject, self.currency.as_str(), fee)
        };
        match self.orchestrator.place_order(member, order).await {
            Ok(record) => Ok(MeetingPayment {
                payment: record
                    .payment
                    .ok_or_else(|| AppError::internal("a keyed-in order was placed without its payment"))?,
                customer_id: record.order.customer_id,
                meeting_id: record.order.meeting_id,
            }),
            Err(err) => {
                self.give_back(&charge, &payment_key).await;
                self.not_placed(member, &meeting, err).await
            }
        }
    }

    /// Key-in's provider and the fees, where both are there.
    fn allowed(&self) -> Result<(&dyn CardKeyIn, &dyn MeetingFees), AppError> {
        let Some(cards) = &self.cards else {
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
        Ok((cards.as_ref(), fees.as_ref()))
    }

    /// A charge whose order could not be placed (and was given back): the pair registered
    /// meanwhile (a second key-in, a registration) is answered that payment, if any.
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

    /// The card charged: the provider's key of the charge.
    async fn charge(&self, cards: &dyn CardKeyIn, charge: &KeyInCharge) -> Result<String, AppError> {
        let provider = |e: GatewayError| AppError::Unavailable(Cause::context("payment provider", e));
        let reason = match cards.key_in(charge).await.map_err(provider)? {
            ApprovalOutcome::Approved { provider_transaction_id } => return Ok(provider_transaction_id),
            ApprovalOutcome::Declined { code, .. } => {
                return Err(AppError::Unprocessable { code: CARD_REFUSED, message: code });
            }
            ApprovalOutcome::Unknown { reason } => reason,
        };
        // The answer left it open: what the provider holds under the request id decides.
        match self.gateway.lookup(&charge.payment_request_id, &Scenario::default()).await.map_err(provider)? {
            LookupOutcome::Approved { provider_transaction_id } => Ok(provider_transaction_id),
            LookupOutcome::NotFound | LookupOutcome::Declined { .. } => Err(AppError::unavailable(format!(
                "the key-in's answer left it open ({reason}) and the provider holds no charge under {}",
                charge.payment_request_id
            ))),
            other => Err(AppError::internal(format!(
                "the provider holds a cancelled charge under the new request id {}: {other:?}",
                charge.payment_request_id
            ))),
        }
    }

    /// Cancels a charge whose order was not committed — unless it was after all (an error
    /// after the commit): then the order holds it and its saga goes on.
    async fn give_back(&self, charge: &KeyInCharge, payment_key: &str) {
        match self.payments.by_request_id(&charge.payment_request_id).await {
            Ok(Some(_)) => return,
            Ok(None) => {}
            Err(err) => {
                tracing::error!(
                    request = %charge.payment_request_id, error = %Chain(&err),
                    "a keyed-in charge may have no order and could not be checked: the daily ledger will show it"
                );
                return;
            }
        }
        let cancel = CancelPayment {
            payment_id: PaymentId::new(),
            payment_request_id: charge.payment_request_id.clone(),
            provider_transaction_id: payment_key.to_owned(),
            idempotency_key: format!("{}-void", charge.payment_request_id),
            amount: charge.amount,
            balance: charge.amount,
            reason: "주문을 만들 수 없어 취소합니다 (key-in without an order)".into(),
            scenario: Scenario::default(),
        };
        if let Err(err) = self.gateway.cancel(&cancel).await {
            tracing::error!(
                request = %charge.payment_request_id, error = %Chain(&err),
                "a keyed-in charge has no order and could not be cancelled: the daily ledger will show it"
            );
        }
    }
}
