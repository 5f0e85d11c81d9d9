//! The meeting service's events: a paid registration (an order and its saga), a
//! cancellation (a refund when asked for), a deleted meeting (refund everyone).

use std::sync::Arc;

use crate::application::ORDER_BUSY;
use crate::application::audit::{self, entity};
use crate::application::commit::commit;
use crate::application::envelopes;
use crate::application::money::refunds::{RefundOutcome, RefundRequest, Refunds};
use crate::application::orchestration::{
    ALREADY_REGISTERED, InboxKey, NO_PAYMENT_METHOD, Orchestrator, PlaceOrder,
};
use crate::application::ports::{
    Changes, Clock, InboxEntry, MeetingFee, MeetingFees, MeetingOrders, OrderRepository, RepoError, Scenario,
    Unchargeable, UnitOfWork,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{MerchantId, OrderId};
use crate::domain::order::{OrderSource, OrderStatus};

use super::messages::{
    FREE_MEETING, Handled, MEETING_NOT_FOUND, MeetingDeleted, ParticipantCancelled, ParticipantRegistered,
    RegistrationAtFee, consumers,
};

pub struct MeetingEvents {
    orchestrator: Arc<Orchestrator>,
    refunds: Arc<Refunds>,
    orders: Arc<dyn OrderRepository>,
    registrations: Arc<dyn MeetingOrders>,
    uow: Arc<dyn UnitOfWork>,
    clock: Arc<dyn Clock>,
    /// Where fees come from for registrations that carry none.
    fees: Option<Arc<dyn MeetingFees>>,
    /// The merchant registrations' orders are (`meetings.merchant`; `None`: `DEFAULT`).
    merchant: Option<MerchantId>,
}

/// The registrations' consumer (their inbox's key).
fn consumer() -> &'static str {
    consumers::PARTICIPANT_REGISTER
}

fn key(consumer: &str, event_id: &str, digest: &str, unseen: bool) -> InboxKey {
    InboxKey {
        consumer: consumer.to_owned(),
        event_id: event_id.to_owned(),
        digest: Some(digest.to_owned()),
        unseen,
    }
}

impl MeetingEvents {
    pub fn new(
        orchestrator: Arc<Orchestrator>,
        refunds: Arc<Refunds>,
        orders: Arc<dyn OrderRepository>,
        registrations: Arc<dyn MeetingOrders>,
        uow: Arc<dyn UnitOfWork>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        MeetingEvents { orchestrator, refunds, orders, registrations, uow, clock, fees: None, merchant: None }
    }

    /// Registrations' orders are `merchant`'s (`meetings.merchant`, docs/spec.md §15).
    pub fn with_merchant(mut self, merchant: Option<MerchantId>) -> Self {
        self.merchant = merchant;
        self
    }

    /// Reads the fee of registrations that carry none from `fees` (`meetings.fee_source`).
    pub fn with_fees(mut self, fees: Arc<dyn MeetingFees>) -> Self {
        self.fees = Some(fees);
        self
    }

    /// A registration without an amount (docs/spec.md §12, `momo`): the meeting's fee from
    /// `meetings.fee_source`, then as [`MeetingEvents::participant_registered`]. No such
    /// meeting, or a free one: refused (`payment.failed`), no order. A redelivery is answered
    /// from what the first delivery did, whatever the fee is now.
    ///
    /// # Errors
    /// `Unavailable` when the fee's source cannot be read (retry); `Validation` for a
    /// negative fee (the platform's record is wrong: the DLQ).
    pub async fn participant_registered_at_fee(
        &self,
        msg: RegistrationAtFee,
        scenario: Scenario,
        correlation_id: Option<String>,
    ) -> Result<Handled, AppError> {
        let RegistrationAtFee { event_id, meeting_id, user_id, currency, digest } = msg;
        let mut registration =
            ParticipantRegistered { event_id, meeting_id, user_id, amount: 0, currency, digest };
        let seen = self.orders.inbox_entry(consumer(), &registration.event_id).await?;
        let placed = match seen.as_ref().and_then(|seen| seen.order_id) {
            Some(order_id) => self.orders.get(order_id).await?,
            None => None,
        };
        registration.amount = match (seen.as_ref(), placed) {
            // The order it placed, resumed at its own amount.
            (Some(_), Some(record)) => record.order.total.minor(),
            (Some(seen), None) => return self.redelivered(seen, &registration.digest).await,
            (None, _) => {
                let fees = self.fees.as_ref().ok_or_else(|| {
                    AppError::unavailable(
                        "a registration without an amount, and no meetings.fee_source = sql",
                    )
                })?;
                let fee = fees.meeting(&registration.meeting_id).await?;
                match fee.as_ref().map(MeetingFee::chargeable) {
                    None => {
                        return self
                            .refuse_registration(&registration, correlation_id, MEETING_NOT_FOUND)
                            .await;
                    }
                    Some(Err(Unchargeable::Free)) => {
                        return self.refuse_registration(&registration, correlation_id, FREE_MEETING).await;
                    }
                    Some(Err(Unchargeable::Negative(fee))) => {
                        return Err(AppError::Validation {
                            field: "participation_fee".into(),
                            message: format!("meeting {} has a negative fee {fee}", registration.meeting_id),
                        });
                    }
                    Some(Ok(fee)) => fee,
                }
            }
        };
        // The inbox is read once: the registration goes on with what it said.
        self.register(registration, seen, scenario, correlation_id).await
    }

    fn entry(&self, consumer: &str, event_id: &str, digest: &str, order_id: Option<OrderId>) -> InboxEntry {
        InboxEntry {
            consumer: consumer.to_owned(),
            event_id: event_id.to_owned(),
            order_id,
            processed_at: self.clock.now(),
            digest: Some(digest.to_owned()),
        }
    }

    /// A message already processed (`seen`) delivered again: a plain duplicate, or one that
    /// reuses the event id with another body — acknowledged all the same (the first wins),
    /// but audited `INBOUND_CONFLICT` with both digests, and answered as a conflict.
    async fn redelivered(&self, seen: &InboxEntry, digest: &str) -> Result<Handled, AppError> {
        let Some(first) = seen.digest.as_deref().filter(|first| *first != digest) else {
            return Ok(Handled::Duplicate);
        };
        let actor = Actor::system(&seen.consumer);
        let mut changes = Changes::default();
        changes.audit.push(audit::record(
            AuditAction::InboundConflict,
            entity::INBOUND_MESSAGE,
            &seen.event_id,
            &actor,
            Some(format!(
                "event id reused with another body: first sha256 {first}, this one {digest}; the first stands"
            )),
            self.clock.now(),
        ));
        self.uow.commit(changes).await?;
        Ok(Handled::ConflictingDuplicate)
    }

    /// Marks a message processed with nothing else to write (and an audit row saying why).
    /// A concurrent duplicate that got there first makes this a `Duplicate`.
    async fn mark(
        &self,
        entry: InboxEntry,
        action: AuditAction,
        entity_type: &str,
        entity_id: &str,
        detail: String,
    ) -> Result<bool, AppError> {
        let actor = Actor::system(&entry.consumer);
        let mut changes = Changes::default();
        changes.audit.push(audit::record(
            action,
            entity_type,
            entity_id,
            &actor,
            Some(detail),
            entry.processed_at,
        ));
        changes.inbox.push(entry);
        commit(self.uow.as_ref(), changes).await
    }

    /// Runs the saga for a paid registration (a `MEETING` order).
    ///
    /// # Errors
    /// `Validation` for a message the saga cannot accept (bad amount or currency);
    /// `Unavailable` for a system failure (retry).
    pub async fn participant_registered(
        &self,
        msg: ParticipantRegistered,
        scenario: Scenario,
        correlation_id: Option<String>,
    ) -> Result<Handled, AppError> {
        let seen = self.orders.inbox_entry(consumer(), &msg.event_id).await?;
        self.register(msg, seen, scenario, correlation_id).await
    }

    /// [`MeetingEvents::participant_registered`], the message's inbox entry read (`seen`).
    async fn register(
        &self,
        msg: ParticipantRegistered,
        seen: Option<InboxEntry>,
        scenario: Scenario,
        correlation_id: Option<String>,
    ) -> Result<Handled, AppError> {
        let consumer = consumer();
        let actor = Actor::system(consumer);
        let correlation = correlation_id.clone();
        // No saved card to charge (docs/spec.md §10): refused before any order or charge. A
        // redelivery of a message that created an order resumes it below instead.
        if seen.is_none() && !self.orchestrator.can_charge_registration(&msg.user_id).await? {
            // A pair whose order is live already (a key-in in flight) is that order's: the
            // duplicate is refused as one, not for the card it would never be charged on.
            let live = self.registrations.live_registration(&msg.meeting_id, &msg.user_id).await?;
            let reason = if live.is_some() { ALREADY_REGISTERED } else { NO_PAYMENT_METHOD };
            return self.refuse_registration(&msg, correlation, reason).await;
        }
        let order = PlaceOrder {
            scenario,
            correlation_id: correlation_id.or_else(|| Some(msg.event_id.clone())),
            // A redelivery resumes the order this event created (after a crash mid-saga)
            // instead of creating a second one.
            inbox: Some(key(consumer, &msg.event_id, &msg.digest, seen.is_none())),
            merchant: self.merchant,
            ..PlaceOrder::meeting(
                OrderSource::Meeting,
                &msg.meeting_id,
                &msg.user_id,
                &msg.currency,
                msg.amount,
            )
        };
        let record = match self.orchestrator.place_order(&actor, order).await {
            Ok(record) => record,
            Err(AppError::Conflict { code: ALREADY_REGISTERED, .. }) => {
                return self.refuse_registration(&msg, correlation, ALREADY_REGISTERED).await;
            }
            Err(err) => return Err(err),
        };
        if let Some(seen) = &seen {
            return self.redelivered(seen, &msg.digest).await;
        }
        Ok(match record.order.status {
            OrderStatus::Failed | OrderStatus::Cancelled => Handled::BusinessFailure(format!(
                "order {} {}: {}",
                record.order.id,
                record.order.status,
                record.order.failure_reason.map_or("-", |r| r.as_str())
            )),
            _ => Handled::Processed,
        })
    }

    /// docs/spec.md §7, §10: the pair holds a live order already (`ALREADY_REGISTERED`), or
    /// the member has no saved card to charge (`NO_PAYMENT_METHOD`) — a business failure,
    /// acknowledged: no order, no provider call; audited and announced (`payment.failed`),
    /// with the inbox entry in the same commit so a redelivery is a duplicate.
    async fn refuse_registration(
        &self,
        msg: &ParticipantRegistered,
        correlation_id: Option<String>,
        reason: &'static str,
    ) -> Result<Handled, AppError> {
        let entry = self.entry(consumer(), &msg.event_id, &msg.digest, None);
        let actor = Actor::system(consumer());
        let why = match reason {
            NO_PAYMENT_METHOD => format!("user {} has no saved card", msg.user_id),
            MEETING_NOT_FOUND => format!("meeting {} is not in the platform's records", msg.meeting_id),
            FREE_MEETING => format!("meeting {} is free", msg.meeting_id),
            _ => format!("user {} already has a live order for meeting {}", msg.user_id, msg.meeting_id),
        };
        let detail = format!("{why}; registration {} refused ({reason})", msg.event_id);
        let mut changes = Changes::default();
        changes.audit.push(audit::record(
            AuditAction::RegistrationRejected,
            entity::MEETING,
            &msg.meeting_id,
            &actor,
            Some(detail.clone()),
            entry.processed_at,
        ));
        changes.outbox.push(envelopes::registration_refused(
            &msg.meeting_id,
            &msg.user_id,
            &msg.event_id,
            reason,
            correlation_id.as_deref().or(Some(&msg.event_id)),
            entry.processed_at,
        ));
        changes.inbox.push(entry);
        match self.uow.commit(changes).await {
            Ok(()) => Ok(Handled::BusinessFailure(detail)),
            Err(RepoError::Conflict) => Ok(Handled::Duplicate),
            Err(err) => Err(err.into()),
        }
    }

    /// Refunds the participant's completed order when `refundRequired`.
    ///
    /// # Errors
    /// `Unavailable` for a system failure (retry; nothing was recorded).
    pub async fn participant_cancelled(
        &self,
        msg: ParticipantCancelled,
        scenario: Scenario,
    ) -> Result<Handled, AppError> {
        let consumer = consumers::PARTICIPANT_CANCEL;
        if let Some(seen) = self.orders.inbox_entry(consumer, &msg.event_id).await? {
            return self.redelivered(&seen, &msg.digest).await;
        }
        let entry = |order_id| self.entry(consumer, &msg.event_id, &msg.digest, order_id);
        if !msg.refund_required {
            let detail = format!("participant {} cancelled without refund", msg.user_id);
            let marked = self.mark(
                entry(None),
                AuditAction::NothingToRefund,
                entity::MEETING,
                &msg.meeting_id,
                detail,
            );
            return Ok(if marked.await? { Handled::Processed } else { Handled::Duplicate });
        }
        let Some(order_id) = self.refundable_order(&msg.meeting_id, &msg.user_id).await? else {
            let detail =
                format!("no completed, approved order of {} for meeting {}", msg.user_id, msg.meeting_id);
            let marked = self.mark(
                entry(None),
                AuditAction::NothingToRefund,
                entity::MEETING,
                &msg.meeting_id,
                detail.clone(),
            );
            return Ok(if marked.await? { Handled::BusinessFailure(detail) } else { Handled::Duplicate });
        };
        let actor = Actor::system(consumer);
        let reason =
            msg.reason.clone().unwrap_or_else(|| format!("participant cancelled (event {})", msg.event_id));
        // The remaining balance; the event's id makes a redelivery the same refund.
        let request = RefundRequest {
            reason: Some(reason),
            amount: None,
            request_key: Some(format!("{consumer}:{}", msg.event_id)),
            inbox: Some(entry(Some(order_id))),
            causation_id: Some(msg.event_id.clone()),
            scenario,
        };
        match self.refunds.refund_order(&actor, order_id, request).await {
            Ok(RefundOutcome::Refunded(_)) => Ok(Handled::Processed),
            Ok(RefundOutcome::Rejected { reason, .. }) => Ok(Handled::BusinessFailure(reason)),
            // Recorded and pending: the same event again finishes it with the same key.
            Ok(RefundOutcome::Pending { reason, .. }) => Err(AppError::unavailable(reason)),
            // Someone else is changing the order (a concurrent delivery of this event?):
            // try again shortly, when the inbox will tell.
            Err(AppError::Conflict { code: ORDER_BUSY, .. }) => Err(AppError::unavailable("order busy")),
            // Refunded by a concurrent delivery of the same event, or meanwhile by the API.
            Err(AppError::Conflict { .. }) => self.no_longer_refundable(&msg, order_id).await,
            Err(err) => Err(err),
        }
    }

    /// The participant's newest completed order that can be refunded.
    async fn refundable_order(&self, meeting_id: &str, user_id: &str) -> Result<Option<OrderId>, AppError> {
        let completed =
            self.registrations.completed_meeting_orders(meeting_id, Some(user_id.to_owned())).await?;
        for id in completed.into_iter().rev() {
            if self.orders.get(id).await?.as_ref().is_some_and(Refunds::refundable) {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// A cancellation's order was refunded meanwhile: by a concurrent delivery of the same
    /// event (a duplicate), or by someone else (nothing to refund, recorded).
    async fn no_longer_refundable(
        &self,
        msg: &ParticipantCancelled,
        order_id: OrderId,
    ) -> Result<Handled, AppError> {
        let consumer = consumers::PARTICIPANT_CANCEL;
        if self.orders.inbox_entry(consumer, &msg.event_id).await?.is_some() {
            return Ok(Handled::Duplicate);
        }
        let detail = format!("order {order_id} is no longer refundable");
        let entry = self.entry(consumer, &msg.event_id, &msg.digest, Some(order_id));
        self.mark(entry, AuditAction::NothingToRefund, entity::ORDER, &order_id.to_string(), detail.clone())
            .await?;
        Ok(Handled::BusinessFailure(detail))
    }

    /// Refunds every completed payment of a deleted meeting; a refused refund is recorded
    /// (`payment.refund_failed`) and the others go on.
    ///
    /// # Errors
    /// `Unavailable` for a system failure: the message is retried, and refunds already
    /// done are not repeated (their orders are no longer `COMPLETED`).
    pub async fn meeting_deleted(
        &self,
        msg: MeetingDeleted,
        scenario: Scenario,
    ) -> Result<Handled, AppError> {
        let consumer = consumers::MEETING_DELETED;
        if let Some(seen) = self.orders.inbox_entry(consumer, &msg.event_id).await? {
            return self.redelivered(&seen, &msg.digest).await;
        }
        let actor = Actor::system(consumer);
        let orders = self.registrations.completed_meeting_orders(&msg.meeting_id, None).await?;
        // docs/spec.md §7: every completed payment's remaining balance is refunded — one whose
        // refund the provider refused before (a participant's cancellation) is asked again,
        // but a redelivery of this same deletion is the same refund (its request key), never
        // asked twice. Refused refunds keep their order `COMPLETED` and are reported below.
        // All of the meeting's orders are held together: a second deletion of the same
        // meeting waits (`ORDER_BUSY`: redelivered) and then finds nothing left.
        let requests =
            orders.into_iter().map(|order_id| (order_id, deletion_refund(&msg, scenario))).collect();
        let outcomes = match self.refunds.refund_orders(&actor, requests).await {
            Err(AppError::Conflict { code: ORDER_BUSY, .. }) => {
                return Err(AppError::unavailable("order busy"));
            }
            other => other?,
        };
        let (refunded, failed, skipped) = tally(outcomes)?;
        let detail = format!("refunded {refunded}, refund failed {}, not refundable {skipped}", failed.len());
        let entry = self.entry(consumer, &msg.event_id, &msg.digest, None);
        if !self.mark(entry, AuditAction::MeetingDeleted, entity::MEETING, &msg.meeting_id, detail).await? {
            return Ok(Handled::Duplicate);
        }
        Ok(if failed.is_empty() {
            Handled::Processed
        } else {
            Handled::BusinessFailure(format!("refunds failed: {}", failed.join("; ")))
        })
    }
}

/// The refund a deleted meeting asks for one of its orders: the remaining balance, under the
/// deletion's own key (a redelivery is the same refund).
fn deletion_refund(msg: &MeetingDeleted, scenario: Scenario) -> RefundRequest {
    let reason = msg
        .reason
        .clone()
        .unwrap_or_else(|| format!("meeting {} deleted (event {})", msg.meeting_id, msg.event_id));
    RefundRequest {
        reason: Some(reason),
        amount: None,
        request_key: Some(format!("{}:{}", consumers::MEETING_DELETED, msg.event_id)),
        inbox: None,
        causation_id: Some(msg.event_id.clone()),
        scenario,
    }
}

/// A deletion's refunds counted: refunded, refused (each with its reason), not refundable.
///
/// # Errors
/// `Unavailable` when one is pending or its order busy (the deletion is redelivered), or
/// for any other failure.
fn tally(
    outcomes: Vec<(OrderId, Result<RefundOutcome, AppError>)>,
) -> Result<(usize, Vec<String>, usize), AppError> {
    let (mut refunded, mut failed, mut skipped) = (0, Vec::new(), 0);
    for (order_id, outcome) in outcomes {
        match outcome {
            Ok(RefundOutcome::Refunded(_)) => refunded += 1,
            Ok(RefundOutcome::Rejected { reason, .. }) => failed.push(format!("{order_id}: {reason}")),
            Ok(RefundOutcome::Pending { reason, .. }) => return Err(AppError::unavailable(reason)),
            Err(AppError::Conflict { code: ORDER_BUSY, .. }) => {
                return Err(AppError::unavailable("order busy"));
            }
            Err(AppError::Conflict { .. }) => skipped += 1,
            Err(err) => return Err(err),
        }
    }
    Ok((refunded, failed, skipped))
}
