//! What a step decided ([`StepOutcome`]): built by each step's pure decision function
//! from (record, provider answer, now), committed by the one `commit_step`.

use crate::application::ports::Changes;
use crate::domain::notification::Notification;
use crate::domain::order::Order;
use crate::domain::payment::Payment;
use crate::domain::settlement::Settlement;

/// Whether the call running the saga has already committed something (the order placed,
/// the customer's authorization recorded): then a failure later is not an error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Moved {
    Already,
    NotYet,
}

pub(super) enum Progress {
    /// The step committed; decide again.
    Continue,
    /// The saga waits (for reconciliation, a retry or an operator).
    Stop,
    /// Someone else changed the order first: reload and decide again.
    Reload,
}

/// What one step decided: the changes to commit in one transaction and the state they
/// lead to. `Orchestrator::commit_step` commits it for every step alike.
pub(super) struct StepOutcome {
    pub(super) changes: Changes,
    pub(super) order: Order,
    /// The step's aggregate as it is after the commit; `None` leaves the record's as is.
    pub(super) payment: Option<Payment>,
    pub(super) settlement: Option<Settlement>,
    pub(super) notification: Option<Notification>,
    pub(super) progress: Progress,
}

impl StepOutcome {
    pub(super) fn new(changes: Changes, order: Order, progress: Progress) -> Self {
        StepOutcome { changes, order, payment: None, settlement: None, notification: None, progress }
    }
}

/// A record in a given state, for the steps' table tests.
#[cfg(test)]
pub(super) fn record_in(
    status: crate::domain::order::OrderStatus,
    payment: Option<crate::domain::payment::PaymentStatus>,
) -> crate::application::ports::OrderRecord {
    use crate::domain::ids::OrderId;
    use crate::domain::order::{NewOrder, NewOrderItem, OrderSource};
    let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
    let input = NewOrder {
        customer_id: "alice".into(),
        source: OrderSource::Api,
        meeting_id: None,
        currency: "KRW".into(),
        items: vec![NewOrderItem { sku: "A".into(), quantity: 1, unit_price: 500 }],
    };
    let mut order = Order::place(OrderId::new(), input, now).expect("a valid order");
    order.status = status;
    let payment = payment.map(|s| {
        let mut p = Payment::request(order.id, 1, order.total, now);
        p.status = s;
        p.provider_transaction_id = Some("tx".into());
        p
    });
    crate::application::ports::OrderRecord {
        refunds: Vec::new(),
        order,
        payment,
        settlement: None,
        notification: None,
        steps: vec![],
        context: Default::default(),
    }
}
