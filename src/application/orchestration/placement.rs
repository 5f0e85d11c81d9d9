//! Placing an order, decided before anything is written: who may place it, what it is
//! (validated by the domain), in which state it starts, and the one commit that places it
//! (the order with its lease or held, a payment already charged, the inbound message, the
//! audit row). [`super::Orchestrator::place_order`] is the shell: it reads what the decision
//! needs, commits it once, and runs the saga.

use chrono::{DateTime, Utc};

use crate::application::audit::{self, entity};
use crate::application::ports::{
    AuditRecord, Changes, InboxEntry, KeyedCard, OrderContext, SagaLease, Scenario,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{MerchantId, OrderId, StoreId};
use crate::domain::order::{NewOrder, NewOrderItem, Order, OrderSource, OrderStart};
use crate::domain::payment::Payment;

/// The longest `description` an order keeps (the commerce backend's column).
pub const MAX_DESCRIPTION: usize = 255;
/// A checkout (HTTP) or a paid registration (AMQP), not yet validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceOrder {
    /// Chosen by the caller so that a retried request (same idempotency key, same
    /// inbound event) resumes the same order instead of creating another.
    pub order_id: OrderId,
    /// Defaults to the caller.
    pub customer_id: Option<String>,
    pub source: OrderSource,
    /// How the order starts, as the door it came through asks: `AWAIT_CHECKOUT` waits for
    /// the customer's checkout where the provider asks for one (else it runs `NOW`); `HELD`
    /// keeps it in `CREATED` until its client asks for its saga.
    pub start: OrderStart,
    pub meeting_id: Option<String>,
    pub currency: String,
    pub items: Vec<NewOrderItem>,
    pub scenario: Scenario,
    pub correlation_id: Option<String>,
    /// The inbound message creating this order: recorded with the order, so that the
    /// same message delivered again (or twice at once) resumes this order.
    pub inbox: Option<InboxKey>,
    /// Where the customer is told by e-mail (`customerEmail`, docs/spec.md §13).
    pub customer_email: Option<String>,
    /// What the client said about the order (the commerce dialect's `description`).
    pub description: Option<String>,
    /// A card keyed in to pay the order (the momo dialect's key-in): the first payment
    /// attempt is committed with the order (the intent, before any call), and the first run
    /// charges the card; the card itself is never stored.
    pub keyed_in: Option<KeyedIn>,
    /// The merchant whose order it is, when the door names it (the meeting consumer's
    /// configured one); else the caller's (docs/spec.md §15).
    pub merchant: Option<MerchantId>,
    /// One of that merchant's stores (checked to be its by the caller).
    pub store_id: Option<StoreId>,
}

/// A card keyed in for an order, and what the provider shows the charge as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedIn {
    pub card: KeyedCard,
    /// Toss's `orderName` (the meetup platform's `<meeting title> 참가비`).
    pub order_name: String,
}

impl PlaceOrder {
    /// A member's order for a meeting: the fee its one item (`MEETING-<id>`), a new id, the
    /// rest unset.
    pub fn meeting(source: OrderSource, meeting_id: &str, user_id: &str, currency: &str, fee: i64) -> Self {
        PlaceOrder {
            order_id: OrderId::new(),
            customer_id: Some(user_id.to_owned()),
            source,
            start: OrderStart::Now,
            meeting_id: Some(meeting_id.to_owned()),
            currency: currency.to_owned(),
            items: vec![NewOrderItem { sku: format!("MEETING-{meeting_id}"), quantity: 1, unit_price: fee }],
            scenario: Scenario::default(),
            correlation_id: None,
            inbox: None,
            customer_email: None,
            description: None,
            keyed_in: None,
            merchant: None,
            store_id: None,
        }
    }
}

/// Identifies an inbound message for the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxKey {
    pub consumer: String,
    pub event_id: String,
    /// A digest of the message, kept with its inbox entry.
    pub digest: Option<String>,
    /// The caller found no entry under this key just before: the order is inserted without
    /// asking the inbox again (a concurrent duplicate loses the insert on the inbox's key
    /// and resumes the winner's order).
    pub unseen: bool,
}

/// Why a caller may not place an order: the answer, and the audit row a refusal of the
/// caller (not of its input) leaves.
#[derive(Debug)]
pub(super) struct Refusal {
    pub error: AppError,
    pub audit: Option<Box<AuditRecord>>,
}

/// The placement to commit, and what the run after it needs.
pub(super) struct Placement {
    pub order: Order,
    pub context: OrderContext,
    /// The first payment attempt of a keyed-in order, committed with it (the intent).
    pub payment: Option<Payment>,
    /// The keyed-in card, for the first run only.
    pub keyed_in: Option<KeyedIn>,
    /// Everything the one commit writes.
    pub changes: Changes,
    /// Whether the commit takes the first payment attempt's number with the order's.
    pub reserve_payment: bool,
    /// Held in `CREATED`, no lease, no run (the commerce dialect).
    pub held: bool,
}

/// The customer the order is for, once the caller may place it and its free text is sane.
///
/// # Errors
/// `Forbidden` (audited) when a customer orders for someone else; `Validation` for a
/// `description` over [`MAX_DESCRIPTION`] or a `customerEmail` that is not one.
pub(super) fn admit(actor: &Actor, cmd: &PlaceOrder, now: DateTime<Utc>) -> Result<String, Refusal> {
    let customer_id = cmd.customer_id.clone().unwrap_or_else(|| actor.subject.clone());
    let invalid = |field: &str, message: String| Refusal {
        error: AppError::Validation { field: field.into(), message },
        audit: None,
    };
    if !actor.may_act_for(&customer_id) {
        let why = "a customer may only place orders for themselves";
        return Err(Refusal {
            error: AppError::Forbidden { code: "FORBIDDEN", message: why.into() },
            audit: Some(Box::new(audit::record(
                AuditAction::OrderRejected,
                entity::CUSTOMER,
                &customer_id,
                actor,
                Some(why.into()),
                now,
            ))),
        });
    }
    if cmd.description.as_ref().is_some_and(|d| d.chars().count() > MAX_DESCRIPTION) {
        return Err(invalid("description", format!("must be at most {MAX_DESCRIPTION} characters")));
    }
    if cmd.customer_email.as_deref().is_some_and(|e| !crate::domain::text::is_email(e)) {
        return Err(invalid("customerEmail", "must be an e-mail address (name@example.com)".into()));
    }
    Ok(customer_id)
}

/// The order `cmd` places for `customer_id`, and the commit that places it.
///
/// It starts `AWAITING_PAYMENT` where the provider charges only what the customer authorizes
/// in its widget (`checkout`, an `API` order): no payment is asked for until then. A
/// `COMMERCE` order is held: inserted with no lease, the saga started by its client. Any
/// other is inserted under `lease`, with the first payment attempt's number reserved in the
/// same round trip — unless a card was keyed in (`cmd.keyed_in`): then the first payment
/// attempt (numbered `keyed_number`) is committed with the order, before any call.
///
/// # Errors
/// `Validation` naming the field (the domain's rules); nothing is decided.
pub(super) fn place(
    cmd: PlaceOrder,
    customer_id: String,
    actor: &Actor,
    checkout: bool,
    lease: &SagaLease,
    keyed_number: Option<i64>,
    now: DateTime<Utc>,
) -> Result<Placement, AppError> {
    let (source, meeting_id, currency, items) = (cmd.source, cmd.meeting_id, cmd.currency, cmd.items);
    let merchant = cmd.merchant.unwrap_or_else(|| actor.home_merchant());
    let mut order =
        Order::place(cmd.order_id, NewOrder { customer_id, source, meeting_id, currency, items }, now)?
            .owned_by(merchant, cmd.store_id);
    let start = cmd.start.given(checkout);
    order.start_as(start, now)?;
    let awaits_payment = start == OrderStart::AwaitCheckout;
    // The order's own address, else the caller's token's when the order is theirs.
    let email =
        cmd.customer_email.or_else(|| actor.email.clone().filter(|_| actor.subject == order.customer_id));
    let context = OrderContext {
        scenario: cmd.scenario,
        correlation_id: cmd.correlation_id,
        // An inbound message's order is caused by it (docs/spec.md §12).
        causation_id: cmd.inbox.as_ref().map(|key| key.event_id.clone()),
        customer_email: email,
        description: cmd.description,
    };
    let held = start == OrderStart::Held;
    let mut changes = Changes::default();
    if held {
        changes.insert_order(&mut order, context.clone());
    } else {
        changes.insert_leased_order(&mut order, context.clone(), lease.clone());
    }
    let keyed_in = cmd.keyed_in;
    let payment = keyed_in.as_ref().map(|_| {
        let mut payment = Payment::request_keyed_in(order.id, 1, order.total, now);
        payment.number = keyed_number.unwrap_or_default();
        changes.insert_payment(&mut payment);
        payment
    });
    changes.inbox.extend(cmd.inbox.map(|key| InboxEntry {
        consumer: key.consumer,
        event_id: key.event_id,
        order_id: Some(order.id),
        processed_at: now,
        digest: key.digest,
    }));
    let detail = Some(format!("source {} total {}", order.source, order.total));
    changes.audit.push(audit::record(AuditAction::OrderPlaced, entity::ORDER, order.id, actor, detail, now));
    let reserve_payment = !awaits_payment && !held && payment.is_none();
    Ok(Placement { order, context, payment, keyed_in, changes, reserve_payment, held })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::order::OrderStatus;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-06T03:00:00Z").unwrap().with_timezone(&Utc)
    }

    /// An order of 1 000 KRW of `source`, for the caller (for meeting 12 where it is one).
    fn cmd(source: OrderSource) -> PlaceOrder {
        PlaceOrder {
            customer_id: None,
            meeting_id: source.is_meeting().then(|| "12".into()),
            ..PlaceOrder::meeting(source, "12", "7", "KRW", 1000)
        }
    }

    fn lease() -> SagaLease {
        SagaLease { owner: "runner-1".into(), until: now() }
    }

    #[test]
    fn where_each_order_starts_and_what_its_commit_holds() {
        let actor = Actor::customer("7");
        // (source, start asked, checkout, keyed in, status, held, reserved, leased, a payment
        // inserted): the start is the command's, whatever the source.
        use OrderStart::{AwaitCheckout, Held, Now};
        let cases = [
            (OrderSource::Api, AwaitCheckout, false, false, OrderStatus::Created, false, true, true, false),
            (
                OrderSource::Api,
                AwaitCheckout,
                true,
                false,
                OrderStatus::AwaitingPayment,
                false,
                false,
                true,
                false,
            ),
            (OrderSource::Meeting, Now, true, false, OrderStatus::Created, false, true, true, false),
            (OrderSource::Commerce, Held, false, false, OrderStatus::Created, true, false, false, false),
            (OrderSource::Meeting, Held, true, false, OrderStatus::Created, true, false, false, false),
            (
                OrderSource::Commerce,
                AwaitCheckout,
                true,
                false,
                OrderStatus::AwaitingPayment,
                false,
                false,
                true,
                false,
            ),
            (OrderSource::Momo, Now, true, true, OrderStatus::Created, false, false, true, true),
        ];
        for (source, start, checkout, keyed, status, held, reserved, leased, paid) in cases {
            let mut command = cmd(source);
            command.start = start;
            command.keyed_in = keyed.then(|| KeyedIn {
                card: KeyedCard {
                    number: "4242424242424242".into(),
                    expiry_month: "12".into(),
                    expiry_year: "25".into(),
                    identity_number: "880101".into(),
                },
                order_name: "a meeting 참가비".into(),
            });
            let p = place(command, "7".into(), &actor, checkout, &lease(), Some(41), now()).unwrap();
            let case = format!("{source} {start} checkout={checkout}");
            let stored = if start == AwaitCheckout && !checkout { Now } else { start };
            assert_eq!(p.order.start, stored, "{case}: the start as stored");
            assert_eq!((p.order.status, p.held, p.reserve_payment), (status, held, reserved), "{case}");
            assert_eq!(p.changes.new_orders.len(), 1, "{case}");
            assert_eq!(p.changes.new_orders[0].2.is_some(), leased, "{case}");
            assert_eq!(p.changes.payments.len(), usize::from(paid), "{case}");
            assert_eq!(p.changes.audit.len(), 1, "{case}");
            if paid {
                // The intent: requested, numbered, nothing charged yet; the card not in it.
                let payment = p.payment.as_ref().unwrap();
                assert_eq!(
                    (
                        payment.number,
                        payment.provider_transaction_id.as_deref(),
                        payment.attempt,
                        payment.status
                    ),
                    (41, None, 1, crate::domain::payment::PaymentStatus::Requested)
                );
                assert!(payment.keyed_in, "{case}: the attempt says it was keyed in");
                assert!(p.keyed_in.is_some(), "the card goes to the first run");
            }
        }
    }

    #[test]
    fn an_inbound_message_is_the_orders_cause_and_its_inbox_entry() {
        let mut command = cmd(OrderSource::Meeting);
        command.inbox = Some(InboxKey {
            consumer: "meeting".into(),
            event_id: "uu-1".into(),
            digest: Some("d".into()),
            unseen: true,
        });
        let p = place(command, "7".into(), &Actor::system("meeting"), false, &lease(), None, now()).unwrap();
        assert_eq!(p.context.causation_id.as_deref(), Some("uu-1"));
        assert_eq!(p.changes.inbox.len(), 1);
        assert_eq!(p.changes.inbox[0].order_id, Some(p.order.id));
    }

    #[test]
    fn who_may_place_and_with_what_text() {
        let customer = Actor::customer("7");
        let mut other = cmd(OrderSource::Api);
        other.customer_id = Some("8".into());
        let refused = admit(&customer, &other, now()).unwrap_err();
        assert!(matches!(refused.error, AppError::Forbidden { .. }), "{:?}", refused.error);
        assert!(refused.audit.is_some(), "a refusal of the caller is audited");
        assert_eq!(admit(&Actor::admin("ops"), &other, now()).unwrap(), "8", "an admin orders for anyone");
        let mut long = cmd(OrderSource::Commerce);
        long.description = Some("d".repeat(MAX_DESCRIPTION + 1));
        let mut email = cmd(OrderSource::Api);
        email.customer_email = Some("not-an-address".into());
        for (bad, field) in [(long, "description"), (email, "customerEmail")] {
            let refused = admit(&customer, &bad, now()).unwrap_err();
            assert!(refused.audit.is_none(), "{field}: bad input is not audited");
            assert!(matches!(&refused.error, AppError::Validation { field: f, .. } if f == field), "{field}");
        }
        assert_eq!(admit(&customer, &cmd(OrderSource::Api), now()).unwrap(), "7", "the caller by default");
    }
}
