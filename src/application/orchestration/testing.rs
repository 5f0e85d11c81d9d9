//! What the orchestration's unit tests share: a clock reading and an order to start from.

use chrono::{DateTime, Utc};

use crate::application::ports::OrderRecord;
use crate::domain::ids::OrderId;
use crate::domain::order::{NewOrder, NewOrderItem, Order, OrderSource};

/// The tests' now.
pub(super) fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-06T03:00:00Z").unwrap().with_timezone(&Utc)
}

/// An `API` order of 5 000 KRW for customer 7, placed `now()`, nothing else recorded.
pub(super) fn placed() -> OrderRecord {
    let input = NewOrder {
        customer_id: "7".into(),
        source: OrderSource::Api,
        meeting_id: None,
        currency: "KRW".into(),
        items: vec![NewOrderItem { sku: "A".into(), quantity: 1, unit_price: 5000 }],
    };
    OrderRecord {
        order: Order::place(OrderId::new(), input, now()).unwrap(),
        payment: None,
        refunds: Vec::new(),
        settlement: None,
        notification: None,
        steps: Vec::new(),
        context: Default::default(),
    }
}
