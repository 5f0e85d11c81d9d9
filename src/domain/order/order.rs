//! The order aggregate and its transition functions.

use chrono::{DateTime, Utc};

use super::error::OrderError;
use super::event::OrderEvent;
use super::status::{FailureReason, FailureStage, OrderAction, OrderSource, OrderStart, OrderStatus};
use crate::domain::ids::{MerchantId, OrderId, StoreId};
use crate::domain::merchant::default_merchant_id;
use crate::domain::money::{Currency, Money};
use crate::domain::text;

/// Input bounds: generous for real carts, tight enough that no request can make the
/// service do unbounded work or store unbounded strings.
pub mod limits {
    pub const MAX_ID_LEN: usize = crate::domain::text::limits::ID;
    pub const MAX_SKU_LEN: usize = crate::domain::text::limits::SKU;
    pub const MAX_ITEMS: usize = 100;
    pub const MAX_QUANTITY: i64 = 1_000_000;
}

/// One line of an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderItem {
    pub sku: String,
    pub quantity: i64,
    pub unit_price: Money,
}

/// A line as the client sent it, not yet validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrderItem {
    pub sku: String,
    pub quantity: i64,
    pub unit_price: i64,
}

/// A checkout as the client sent it, not yet validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrder {
    pub customer_id: String,
    pub source: OrderSource,
    pub meeting_id: Option<String>,
    pub currency: String,
    pub items: Vec<NewOrderItem>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    pub id: OrderId,
    pub customer_id: String,
    pub source: OrderSource,
    /// How it started (set once, when placed): the only fact of its door the core reads.
    pub start: OrderStart,
    pub meeting_id: Option<String>,
    pub currency: Currency,
    pub items: Vec<OrderItem>,
    pub total: Money,
    pub status: OrderStatus,
    pub failure_stage: Option<FailureStage>,
    pub failure_reason: Option<FailureReason>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Optimistic-concurrency version as loaded; the store updates only `WHERE version = this`.
    pub version: i64,
    /// The order's number (docs/spec.md §3): positive, unique, increasing, never reused;
    /// given from the store's sequence before the order is first stored (0 until then).
    pub number: i64,
    /// The merchant whose order it is (docs/spec.md §15): set once, when placed.
    pub merchant_id: MerchantId,
    /// One of the merchant's stores, when the order names one.
    pub store_id: Option<StoreId>,
}

fn check_id(field: &str, value: &str) -> Result<(), OrderError> {
    if value.trim().is_empty() {
        return Err(OrderError::invalid(field, "must not be empty"));
    }
    text::check(field, value, limits::MAX_ID_LEN).map_err(OrderError::from)
}

impl Order {
    /// What a payment provider shows the customer the charge as: the first line's SKU and
    /// how many other lines there are (`TICKET-STD and 1 more`), or the meeting for a
    /// registration; at most 100 characters (Toss's `orderName`).
    pub fn name(&self) -> String {
        let name = match (&self.meeting_id, self.items.as_slice()) {
            (Some(meeting), _) => format!("meeting {meeting}"),
            (None, [first]) => first.sku.clone(),
            (None, [first, rest @ ..]) => format!("{} and {} more", first.sku, rest.len()),
            (None, []) => format!("order {}", self.id),
        };
        name.chars().take(100).collect()
    }

    /// Validates a checkout and creates the order in `CREATED`.
    ///
    /// # Errors
    /// [`OrderError::Invalid`] or [`OrderError::Money`] naming the offending field
    /// (`items[2].quantity`, `currency`, ...); nothing is created.
    pub fn place(id: OrderId, input: NewOrder, now: DateTime<Utc>) -> Result<Order, OrderError> {
        check_id("customerId", &input.customer_id)?;
        match (input.source.is_meeting(), &input.meeting_id) {
            (true, None) => return Err(OrderError::invalid("meetingId", "is required for a meeting order")),
            (_, Some(meeting)) => check_id("meetingId", meeting)?,
            (false, None) => {}
        }
        let currency: Currency = input
            .currency
            .parse()
            .map_err(|source| OrderError::Money { field: "currency".into(), source })?;
        if input.items.is_empty() {
            return Err(OrderError::invalid("items", "must contain at least one item"));
        }
        if input.items.len() > limits::MAX_ITEMS {
            return Err(OrderError::invalid(
                "items",
                format!("must contain at most {} items", limits::MAX_ITEMS),
            ));
        }
        let mut total = Money::zero(currency);
        let mut items = Vec::with_capacity(input.items.len());
        for (i, item) in input.items.into_iter().enumerate() {
            let field = |name: &str| format!("items[{i}].{name}");
            if item.sku.trim().is_empty() {
                return Err(OrderError::invalid(field("sku"), "must not be empty"));
            }
            text::check(&field("sku"), &item.sku, limits::MAX_SKU_LEN)?;
            if item.quantity <= 0 || item.quantity > limits::MAX_QUANTITY {
                return Err(OrderError::invalid(
                    field("quantity"),
                    format!("must be between 1 and {}", limits::MAX_QUANTITY),
                ));
            }
            let unit_price = Money::new(item.unit_price, currency)
                .map_err(|source| OrderError::Money { field: field("unitPrice"), source })?;
            let line = unit_price
                .checked_mul(item.quantity)
                .and_then(|line| total.checked_add(line))
                .map_err(|source| OrderError::Money { field: field("quantity"), source })?;
            total = line;
            items.push(OrderItem { sku: item.sku, quantity: item.quantity, unit_price });
        }
        if total.minor() <= 0 {
            // docs/spec.md §3: an order of nothing is refused; there is nothing to charge.
            return Err(OrderError::invalid("totalAmount", "must be greater than 0"));
        }
        Ok(Order {
            id,
            customer_id: input.customer_id,
            source: input.source,
            start: OrderStart::Now,
            meeting_id: input.meeting_id,
            currency,
            items,
            total,
            status: OrderStatus::Created,
            failure_stage: None,
            failure_reason: None,
            created_at: now,
            updated_at: now,
            version: 0,
            number: 0,
            merchant_id: default_merchant_id(),
            store_id: None,
        })
    }

    /// This order, owned by `merchant` (and `store`): an order is the `DEFAULT` merchant's
    /// unless its door names another.
    #[must_use]
    pub fn owned_by(mut self, merchant: MerchantId, store: Option<StoreId>) -> Order {
        self.merchant_id = merchant;
        self.store_id = store;
        self
    }

    fn guard(&self, action: OrderAction, allowed: bool) -> Result<(), OrderError> {
        if allowed { Ok(()) } else { Err(OrderError::InvalidTransition { from: self.status, action }) }
    }

    fn move_to(&mut self, status: OrderStatus, now: DateTime<Utc>) {
        self.status = status;
        self.updated_at = now;
    }

    fn failed_at(&self, stage: FailureStage) -> bool {
        self.status == OrderStatus::Failed && self.failure_stage == Some(stage)
    }

    /// The provider needs the customer's authorization before it can be charged (Toss's
    /// checkout, docs/spec.md §10): the order waits for it, within the payment window.
    pub fn await_payment(&mut self, now: DateTime<Utc>) -> Result<Vec<OrderEvent>, OrderError> {
        self.guard(OrderAction::AwaitPayment, self.status == OrderStatus::Created)?;
        self.move_to(OrderStatus::AwaitingPayment, now);
        Ok(vec![])
    }

    /// Starts a just-placed order as its door asks ([`OrderStart`]): `AWAIT_CHECKOUT` moves
    /// it to `AWAITING_PAYMENT`; `NOW` and `HELD` leave it `CREATED`.
    ///
    /// # Errors
    /// `InvalidTransition` for `AWAIT_CHECKOUT` on an order past `CREATED`.
    pub fn start_as(&mut self, start: OrderStart, now: DateTime<Utc>) -> Result<Vec<OrderEvent>, OrderError> {
        let events = match start {
            OrderStart::AwaitCheckout => self.await_payment(now)?,
            OrderStart::Now | OrderStart::Held => vec![],
        };
        self.start = start;
        Ok(events)
    }

    /// Whether the order may still take its payment: created, or waiting for the customer's
    /// authorization.
    fn before_payment(&self) -> bool {
        matches!(self.status, OrderStatus::Created | OrderStatus::AwaitingPayment)
    }

    /// The payment was approved (directly or after reconciliation).
    pub fn approve_payment(&mut self, now: DateTime<Utc>) -> Result<Vec<OrderEvent>, OrderError> {
        let allowed = self.before_payment() || self.status == OrderStatus::PendingConfirmation;
        self.guard(OrderAction::ApprovePayment, allowed)?;
        self.move_to(OrderStatus::PaymentApproved, now);
        Ok(vec![])
    }

    /// The payment outcome is unknown (provider timeout): wait for reconciliation.
    pub fn await_confirmation(&mut self, now: DateTime<Utc>) -> Result<Vec<OrderEvent>, OrderError> {
        self.guard(OrderAction::AwaitConfirmation, self.before_payment())?;
        self.move_to(OrderStatus::PendingConfirmation, now);
        Ok(vec![])
    }

    /// Settlement was asked for and accepted.
    pub fn request_settlement(&mut self, now: DateTime<Utc>) -> Result<Vec<OrderEvent>, OrderError> {
        self.guard(OrderAction::RequestSettlement, self.status == OrderStatus::PaymentApproved)?;
        self.move_to(OrderStatus::SettlementRequested, now);
        Ok(vec![])
    }

    /// The customer was notified (or the notification was ignored by policy or by an
    /// operator): the order is done. Also the way back from a notification failure.
    pub fn complete(&mut self, now: DateTime<Utc>) -> Result<Vec<OrderEvent>, OrderError> {
        self.guard(
            OrderAction::Complete,
            self.status == OrderStatus::SettlementRequested || self.failed_at(FailureStage::Notification),
        )?;
        self.failure_stage = None;
        self.failure_reason = None;
        self.move_to(OrderStatus::Completed, now);
        Ok(vec![OrderEvent::Completed])
    }

    /// A step failed. Which statuses may fail depends on the stage: a payment fails before
    /// approval, a settlement after it, a notification after settlement.
    pub fn fail(
        &mut self,
        stage: FailureStage,
        reason: FailureReason,
        now: DateTime<Utc>,
    ) -> Result<Vec<OrderEvent>, OrderError> {
        use OrderStatus::*;
        let (action, allowed) = match stage {
            FailureStage::Payment => (
                OrderAction::FailPayment,
                matches!(self.status, Created | AwaitingPayment | PendingConfirmation),
            ),
            FailureStage::Settlement => {
                (OrderAction::FailSettlement, matches!(self.status, PaymentApproved | SettlementRequested))
            }
            FailureStage::Notification => (OrderAction::FailNotification, self.status == SettlementRequested),
        };
        self.guard(action, allowed)?;
        self.failure_stage = Some(stage);
        self.failure_reason = Some(reason);
        self.move_to(Failed, now);
        Ok(vec![OrderEvent::Failed { stage, reason }])
    }

    /// Compensation undid the payment of an order whose settlement failed.
    pub fn compensate(&mut self, now: DateTime<Utc>) -> Result<Vec<OrderEvent>, OrderError> {
        self.guard(OrderAction::Compensate, self.failed_at(FailureStage::Settlement))?;
        self.move_to(OrderStatus::Cancelled, now);
        Ok(vec![OrderEvent::Cancelled { reason: "COMPENSATED".into() }])
    }

    /// A completed order was refunded.
    pub fn refund(&mut self, now: DateTime<Utc>) -> Result<Vec<OrderEvent>, OrderError> {
        self.guard(OrderAction::Refund, self.status == OrderStatus::Completed)?;
        self.move_to(OrderStatus::Cancelled, now);
        Ok(vec![OrderEvent::Cancelled { reason: "REFUNDED".into() }])
    }

    /// docs/spec.md §7: the key of the (meeting, user) registration this order holds, or `None`.
    /// A meeting order holds its registration while it is in progress, completed, or
    /// failed after the money moved (settlement or notification stage: the customer is
    /// charged until compensation or a refund ends it); one declined, compensated or
    /// refunded lets the pair register again. The store keeps at most one order per key.
    pub fn registration_key(&self) -> Option<String> {
        let live = match self.status {
            OrderStatus::Created
            | OrderStatus::AwaitingPayment
            | OrderStatus::PaymentApproved
            | OrderStatus::SettlementRequested
            | OrderStatus::Completed
            | OrderStatus::PendingConfirmation => true,
            OrderStatus::Failed => self.failure_stage != Some(FailureStage::Payment),
            OrderStatus::Cancelled => false,
        };
        match (&self.meeting_id, live) {
            (Some(meeting), true) if self.source.is_meeting() => {
                Some(registration_key(meeting, &self.customer_id))
            }
            _ => None,
        }
    }
}

/// The unambiguous key of a (meeting, user) pair: the meeting id is length-prefixed, so no
/// pair of ids can spell another pair's key.
pub fn registration_key(meeting_id: &str, user_id: &str) -> String {
    format!("{}:{meeting_id}/{user_id}", meeting_id.chars().count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::money::MoneyError;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn input() -> NewOrder {
        NewOrder {
            customer_id: "alice".into(),
            source: OrderSource::Api,
            meeting_id: None,
            currency: "KRW".into(),
            items: vec![
                NewOrderItem { sku: "A".into(), quantity: 2, unit_price: 1500 },
                NewOrderItem { sku: "B".into(), quantity: 1, unit_price: 700 },
            ],
        }
    }

    #[test]
    fn an_order_starts_as_its_door_asks_whatever_its_source() {
        for source in OrderSource::ALL {
            let meeting_id = source.is_meeting().then(|| "12".to_owned());
            let placed =
                Order::place(OrderId::new(), NewOrder { source: *source, meeting_id, ..input() }, now())
                    .unwrap();
            assert_eq!(placed.start, OrderStart::Now, "placed: it runs at once unless told");
            for (start, status) in [
                (OrderStart::Now, OrderStatus::Created),
                (OrderStart::Held, OrderStatus::Created),
                (OrderStart::AwaitCheckout, OrderStatus::AwaitingPayment),
            ] {
                let mut order = placed.clone();
                order.start_as(start, now()).unwrap();
                assert_eq!((order.start, order.status), (start, status), "{source} {start}");
            }
        }
        let mut paid = order_in(OrderStatus::PaymentApproved, None);
        assert!(
            paid.start_as(OrderStart::AwaitCheckout, now()).is_err(),
            "only a fresh order waits for checkout"
        );
        assert_eq!(paid.start, OrderStart::Now, "a refused start changes nothing");
    }

    fn order_in(status: OrderStatus, stage: Option<FailureStage>) -> Order {
        let mut order = Order::place(OrderId::new(), input(), now()).unwrap();
        order.status = status;
        order.failure_stage = stage;
        order
    }

    #[test]
    fn an_order_is_named_by_its_first_line_and_the_count_of_the_rest() {
        let mut order = order_in(OrderStatus::Created, None);
        assert_eq!(order.name(), "A and 1 more");
        order.items.truncate(1);
        assert_eq!(order.name(), "A");
        order.items[0].sku = "S".repeat(150);
        assert_eq!(order.name().chars().count(), 100);
        order.meeting_id = Some("m-1".into());
        assert_eq!(order.name(), "meeting m-1");
    }

    #[test]
    fn a_meeting_order_holds_its_registration_only_while_live() {
        use FailureStage as F;
        use OrderStatus::*;
        let cases = [
            (Created, None, true),
            (PaymentApproved, None, true),
            (SettlementRequested, None, true),
            (Completed, None, true),
            (PendingConfirmation, None, true),
            (AwaitingPayment, None, true),
            (Failed, Some(F::Payment), false),
            (Failed, Some(F::Settlement), true),
            (Failed, Some(F::Notification), true),
            (Cancelled, None, false),
        ];
        for (status, stage, live) in cases {
            let mut order = order_in(status, stage);
            assert_eq!(order.registration_key(), None, "an API order holds none");
            order.source = OrderSource::Meeting;
            order.meeting_id = Some("m-1".into());
            let expected = live.then(|| registration_key("m-1", "alice"));
            assert_eq!(order.registration_key(), expected, "{status} {stage:?}");
            // A key-in through the momo dialect is the same member's payment for the meeting.
            order.source = OrderSource::Momo;
            assert_eq!(order.registration_key(), expected, "MOMO {status} {stage:?}");
        }
        assert_ne!(registration_key("a/b", "c"), registration_key("a", "b/c"));
    }

    #[test]
    fn an_order_of_nothing_is_refused() {
        let mut free = input();
        for item in &mut free.items {
            item.unit_price = 0;
        }
        assert_eq!(
            Order::place(OrderId::new(), free, now()),
            Err(OrderError::invalid("totalAmount", "must be greater than 0"))
        );
    }

    #[test]
    fn place_computes_the_total_and_starts_created() {
        let order = Order::place(OrderId::new(), input(), now()).unwrap();
        assert_eq!(order.total.minor(), 3700);
        assert_eq!(order.status, OrderStatus::Created);
        assert_eq!(order.total.currency().as_str(), "KRW");
    }

    #[test]
    fn place_names_the_offending_field() {
        type Mutation = Box<dyn Fn(&mut NewOrder)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|o| o.items.clear()), "items"),
            (Box::new(|o| o.items[1].quantity = 0), "items[1].quantity"),
            (Box::new(|o| o.items[0].quantity = -3), "items[0].quantity"),
            (Box::new(|o| o.items[1].unit_price = -1), "items[1].unitPrice"),
            (Box::new(|o| o.items[0].sku = " ".into()), "items[0].sku"),
            (Box::new(|o| o.items[0].sku = "x".repeat(65)), "items[0].sku"),
            (Box::new(|o| o.currency = "ABC".into()), "currency"),
            (Box::new(|o| o.customer_id = "".into()), "customerId"),
            (Box::new(|o| o.customer_id = "c".repeat(65)), "customerId"),
            (Box::new(|o| o.source = OrderSource::Meeting), "meetingId"),
            (Box::new(|o| o.source = OrderSource::Momo), "meetingId"),
            (
                Box::new(|o| {
                    o.items = vec![NewOrderItem { sku: "A".into(), quantity: 1, unit_price: 1 }; 101]
                }),
                "items",
            ),
        ];
        for (mutate, field) in cases {
            let mut bad = input();
            mutate(&mut bad);
            let err = Order::place(OrderId::new(), bad, now()).unwrap_err();
            let named = match &err {
                OrderError::Invalid { field, .. } | OrderError::Money { field, .. } => field.clone(),
                other => panic!("unexpected {other:?}"),
            };
            assert_eq!(named, field, "{err}");
        }
    }

    #[test]
    fn place_refuses_overflowing_totals() {
        let mut bad = input();
        bad.items = vec![
            NewOrderItem { sku: "A".into(), quantity: 1, unit_price: i64::MAX },
            NewOrderItem { sku: "B".into(), quantity: 1, unit_price: 1 },
        ];
        let err = Order::place(OrderId::new(), bad, now()).unwrap_err();
        assert_eq!(
            err,
            OrderError::Money { field: "items[1].quantity".into(), source: MoneyError::Overflow }
        );
        let mut bad = input();
        bad.items[0].unit_price = i64::MAX / 2 + 1;
        assert!(Order::place(OrderId::new(), bad, now()).is_err());
    }

    type Action = fn(&mut Order) -> Result<Vec<OrderEvent>, OrderError>;

    /// Every (state, action) pair: the expected next status, or `None` for illegal.
    #[test]
    fn transition_table() {
        use FailureStage as F;
        use OrderStatus::*;
        let actions: [(&str, Action); 10] = [
            ("await_payment", |o| o.await_payment(now())),
            ("approve", |o| o.approve_payment(now())),
            ("await", |o| o.await_confirmation(now())),
            ("settle", |o| o.request_settlement(now())),
            ("complete", |o| o.complete(now())),
            ("fail_payment", |o| o.fail(F::Payment, FailureReason::PaymentDeclined, now())),
            ("fail_settlement", |o| o.fail(F::Settlement, FailureReason::SettlementFailed, now())),
            ("fail_notification", |o| o.fail(F::Notification, FailureReason::NotificationFailed, now())),
            ("compensate", |o| o.compensate(now())),
            ("refund", |o| o.refund(now())),
        ];
        let states: Vec<(OrderStatus, Option<FailureStage>)> = vec![
            (Created, None),
            (PaymentApproved, None),
            (SettlementRequested, None),
            (Completed, None),
            (Failed, Some(F::Payment)),
            (Failed, Some(F::Settlement)),
            (Failed, Some(F::Notification)),
            (Cancelled, None),
            (PendingConfirmation, None),
            (AwaitingPayment, None),
        ];
        // Rows: states above; columns: actions above.
        #[rustfmt::skip]
        let expected: [[Option<OrderStatus>; 10]; 10] = [
            [Some(AwaitingPayment), Some(PaymentApproved), Some(PendingConfirmation), None, None, Some(Failed), None, None, None, None],
            [None, None, None, Some(SettlementRequested), None, None, Some(Failed), None, None, None],
            [None, None, None, None, Some(Completed), None, Some(Failed), Some(Failed), None, None],
            [None, None, None, None, None, None, None, None, None, Some(Cancelled)],
            [None; 10],
            [None, None, None, None, None, None, None, None, Some(Cancelled), None],
            [None, None, None, None, Some(Completed), None, None, None, None, None],
            [None; 10],
            [None, Some(PaymentApproved), None, None, None, Some(Failed), None, None, None, None],
            // Waiting for the customer's authorization (§10): the charge is approved, or its
            // outcome is unknown, or it fails (declined, or the window ran out).
            [None, Some(PaymentApproved), Some(PendingConfirmation), None, None, Some(Failed), None, None, None, None],
        ];
        for (row, (status, stage)) in states.iter().enumerate() {
            for (col, (name, action)) in actions.iter().enumerate() {
                let mut order = order_in(*status, *stage);
                let result = action(&mut order);
                match expected[row][col] {
                    Some(next) => {
                        assert!(result.is_ok(), "{status}/{stage:?} {name}: {result:?}");
                        assert_eq!(order.status, next, "{status}/{stage:?} {name}");
                    }
                    None => {
                        let err = result.expect_err(&format!("{status}/{stage:?} {name} must fail"));
                        assert!(matches!(err, OrderError::InvalidTransition { from, .. } if from == *status));
                        assert_eq!(order.status, *status, "a refused action changes nothing");
                    }
                }
            }
        }
    }

    #[test]
    fn failure_and_recovery_events() {
        let mut order = order_in(OrderStatus::SettlementRequested, None);
        let events =
            order.fail(FailureStage::Notification, FailureReason::NotificationFailed, now()).unwrap();
        assert_eq!(events[0].event_type(), "order.failed");
        assert_eq!(order.failure_reason, Some(FailureReason::NotificationFailed));
        let events = order.complete(now()).unwrap();
        assert_eq!(events, vec![OrderEvent::Completed]);
        assert_eq!(order.failure_stage, None, "completion clears the failure");
    }

    #[test]
    fn spellings_round_trip() {
        for s in OrderStatus::ALL {
            assert_eq!(OrderStatus::parse(s.as_str()), Some(*s));
        }
        assert_eq!(OrderStatus::parse("created"), None);
    }
}
