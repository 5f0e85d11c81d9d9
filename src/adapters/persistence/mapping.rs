//! Rows <-> domain, in one place. Every string column with a domain meaning is read with
//! the domain enum's `parse` and written with its `as_str`.

use sea_orm::ActiveValue::Set;

use super::entities::{
    notification_events, orchestration_steps, order_items, orders, outbox_events, payments, refunds,
    settlements,
};
use crate::application::ports::{
    NewOutboxEvent, OrderContext, OutboxRecord, RepoError, Scenario, StepRecord,
};
use crate::domain::ids::{
    EventId, MerchantId, NotificationId, OrderId, PaymentId, RefundId, SettlementId, StoreId,
};
use crate::domain::money::{Currency, Money};
use crate::domain::notification::{FailurePolicy, Notification, NotificationStatus};
use crate::domain::order::{
    FailureReason, FailureStage, Order, OrderItem, OrderSource, OrderStart, OrderStatus, SagaStep, StepFact,
    StepStatus,
};
use crate::domain::outbox::lanes::lane_of;
use crate::domain::outbox::{FailureCode, OutboxStatus};
use crate::domain::payment::{Payment, PaymentStatus, Refund, RefundStatus};
use crate::domain::settlement::{Settlement, SettlementStatus};

pub(super) fn corrupt(column: &str, value: &str) -> RepoError {
    RepoError::corrupt(format!("{column} = {value:?}"))
}

pub(super) fn parse<T>(column: &str, value: &str, f: impl Fn(&str) -> Option<T>) -> Result<T, RepoError> {
    f(value).ok_or_else(|| corrupt(column, value))
}

pub(super) fn parse_opt<T>(
    column: &str,
    value: Option<&str>,
    f: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, RepoError> {
    value.map(|v| parse(column, v, &f)).transpose()
}

fn money(column: &str, amount: i64, currency: &str) -> Result<Money, RepoError> {
    let currency: Currency = currency.parse().map_err(|_| corrupt("currency", currency))?;
    Money::new(amount, currency).map_err(|_| corrupt(column, &amount.to_string()))
}

pub fn order_from_row(
    row: orders::Model,
    items: Vec<order_items::Model>,
) -> Result<(Order, OrderContext), RepoError> {
    let total = money("orders.total_amount", row.total_amount, &row.currency)?;
    let items = items
        .into_iter()
        .map(|i| {
            Ok(OrderItem {
                sku: i.sku,
                quantity: i.quantity,
                unit_price: money("order_items.unit_price", i.unit_price, &row.currency)?,
            })
        })
        .collect::<Result<Vec<_>, RepoError>>()?;
    let scenario = match row.mock_scenario.as_deref() {
        None => Scenario::default(),
        Some(text) => Scenario::parse(text).map_err(|_| corrupt("orders.mock_scenario", text))?,
    };
    let order = Order {
        id: OrderId::from_uuid(row.id),
        customer_id: row.customer_id,
        source: parse("orders.source", &row.source, OrderSource::parse)?,
        start: parse("orders.start", &row.start, OrderStart::parse)?,
        meeting_id: row.meeting_id,
        currency: total.currency(),
        items,
        total,
        status: parse("orders.status", &row.status, OrderStatus::parse)?,
        failure_stage: parse_opt("orders.failure_stage", row.failure_stage.as_deref(), FailureStage::parse)?,
        failure_reason: parse_opt(
            "orders.failure_reason",
            row.failure_reason.as_deref(),
            FailureReason::parse,
        )?,
        created_at: row.created_at,
        updated_at: row.updated_at,
        version: row.version,
        number: row.number,
        merchant_id: MerchantId::from_uuid(row.merchant_id),
        store_id: row.store_id.map(StoreId::from_uuid),
    };
    Ok((
        order,
        OrderContext {
            scenario,
            correlation_id: row.correlation_id,
            causation_id: row.causation_id,
            customer_email: row.customer_email,
            description: row.description,
        },
    ))
}

/// The row for `order`, with `version` set to what the store will hold after the write.
pub fn order_to_row(order: &Order, context: Option<&OrderContext>) -> orders::ActiveModel {
    let mut row = orders::ActiveModel {
        id: Set(order.id.as_uuid()),
        customer_id: Set(order.customer_id.clone()),
        source: Set(order.source.as_str().to_owned()),
        start: Set(order.start.as_str().to_owned()),
        meeting_id: Set(order.meeting_id.clone()),
        currency: Set(order.currency.as_str().to_owned()),
        total_amount: Set(order.total.minor()),
        status: Set(order.status.as_str().to_owned()),
        failure_stage: Set(order.failure_stage.map(|s| s.as_str().to_owned())),
        failure_reason: Set(order.failure_reason.map(|r| r.as_str().to_owned())),
        registration_key: Set(order.registration_key()),
        updated_at: Set(order.updated_at),
        version: Set(order.version + 1),
        number: Set(order.number),
        ..Default::default()
    };
    if let Some(context) = context {
        row.created_at = Set(order.created_at);
        row.mock_scenario = Set((!context.scenario.is_empty()).then(|| context.scenario.to_string()));
        row.correlation_id = Set(context.correlation_id.clone());
        row.causation_id = Set(context.causation_id.clone());
        row.customer_email = Set(context.customer_email.clone());
        row.description = Set(context.description.clone());
        // Ownership is written once, with the order.
        row.merchant_id = Set(order.merchant_id.as_uuid());
        row.store_id = Set(order.store_id.map(|s| s.as_uuid()));
    }
    row
}

pub fn items_to_rows(order: &Order) -> Vec<order_items::ActiveModel> {
    order
        .items
        .iter()
        .enumerate()
        .map(|(i, item)| order_items::ActiveModel {
            order_id: Set(order.id.as_uuid()),
            line_no: Set(i as i32),
            sku: Set(item.sku.clone()),
            quantity: Set(item.quantity),
            unit_price: Set(item.unit_price.minor()),
            ..Default::default()
        })
        .collect()
}

pub fn payment_from_row(row: payments::Model) -> Result<Payment, RepoError> {
    Ok(Payment {
        id: PaymentId::from_uuid(row.id),
        order_id: OrderId::from_uuid(row.order_id),
        attempt: row.attempt,
        payment_request_id: row.payment_request_id,
        amount: money("payments.amount", row.amount, &row.currency)?,
        status: parse("payments.status", &row.status, PaymentStatus::parse)?,
        provider_transaction_id: row.provider_transaction_id,
        keyed_in: row.keyed_in,
        decline_code: row.decline_code,
        refund_failure_reason: row.refund_failure_reason,
        refunded_amount: row.refunded_amount,
        approved_at: row.approved_at,
        reconcile_attempts: row.reconcile_attempts,
        next_reconcile_at: row.next_reconcile_at,
        created_at: row.created_at,
        updated_at: row.updated_at,
        version: row.version,
        number: row.number,
    })
}

pub fn payment_to_row(p: &Payment) -> payments::ActiveModel {
    payments::ActiveModel {
        id: Set(p.id.as_uuid()),
        order_id: Set(p.order_id.as_uuid()),
        attempt: Set(p.attempt),
        payment_request_id: Set(p.payment_request_id.clone()),
        provider_transaction_id: Set(p.provider_transaction_id.clone()),
        keyed_in: Set(p.keyed_in),
        amount: Set(p.amount.minor()),
        currency: Set(p.amount.currency().as_str().to_owned()),
        status: Set(p.status.as_str().to_owned()),
        decline_code: Set(p.decline_code.clone()),
        refund_failure_reason: Set(p.refund_failure_reason.clone()),
        refunded_amount: Set(p.refunded_amount),
        approved_at: Set(p.approved_at),
        reconcile_attempts: Set(p.reconcile_attempts),
        next_reconcile_at: Set(p.next_reconcile_at),
        created_at: Set(p.created_at),
        updated_at: Set(p.updated_at),
        version: Set(p.version + 1),
        number: Set(p.number),
    }
}

pub fn refund_from_row(row: refunds::Model) -> Result<Refund, RepoError> {
    Ok(Refund {
        id: RefundId::from_uuid(row.id),
        payment_id: PaymentId::from_uuid(row.payment_id),
        order_id: OrderId::from_uuid(row.order_id),
        amount: money("refunds.amount", row.amount, &row.currency)?,
        reason: row.reason,
        status: parse("refunds.status", &row.status, RefundStatus::parse)?,
        idempotency_key: row.idempotency_key,
        request_key: row.request_key,
        causation_id: row.causation_id,
        provider_transaction_key: row.provider_transaction_key,
        failure_reason: row.failure_reason,
        actor: row.actor,
        created_at: row.created_at,
        updated_at: row.updated_at,
        version: row.version,
    })
}

pub fn refund_to_row(r: &Refund) -> refunds::ActiveModel {
    refunds::ActiveModel {
        id: Set(r.id.as_uuid()),
        payment_id: Set(r.payment_id.as_uuid()),
        order_id: Set(r.order_id.as_uuid()),
        amount: Set(r.amount.minor()),
        currency: Set(r.amount.currency().as_str().to_owned()),
        reason: Set(r.reason.clone()),
        status: Set(r.status.as_str().to_owned()),
        idempotency_key: Set(r.idempotency_key.clone()),
        request_key: Set(r.request_key.clone()),
        causation_id: Set(r.causation_id.clone()),
        provider_transaction_key: Set(r.provider_transaction_key.clone()),
        failure_reason: Set(r.failure_reason.clone()),
        actor: Set(r.actor.clone()),
        created_at: Set(r.created_at),
        updated_at: Set(r.updated_at),
        version: Set(r.version + 1),
    }
}

pub fn settlement_from_row(row: settlements::Model) -> Result<Settlement, RepoError> {
    Ok(Settlement {
        id: SettlementId::from_uuid(row.id),
        order_id: OrderId::from_uuid(row.order_id),
        payment_id: PaymentId::from_uuid(row.payment_id),
        amount: money("settlements.amount", row.amount, &row.currency)?,
        status: parse("settlements.status", &row.status, SettlementStatus::parse)?,
        failure_reason: row.failure_reason,
        attempts: row.attempts,
        next_attempt_at: row.next_attempt_at,
        last_error: row.last_error,
        created_at: row.created_at,
        updated_at: row.updated_at,
        version: row.version,
    })
}

pub fn settlement_to_row(s: &Settlement) -> settlements::ActiveModel {
    settlements::ActiveModel {
        id: Set(s.id.as_uuid()),
        order_id: Set(s.order_id.as_uuid()),
        payment_id: Set(s.payment_id.as_uuid()),
        amount: Set(s.amount.minor()),
        currency: Set(s.amount.currency().as_str().to_owned()),
        status: Set(s.status.as_str().to_owned()),
        failure_reason: Set(s.failure_reason.clone()),
        attempts: Set(s.attempts),
        next_attempt_at: Set(s.next_attempt_at),
        last_error: Set(s.last_error.clone()),
        created_at: Set(s.created_at),
        updated_at: Set(s.updated_at),
        version: Set(s.version + 1),
    }
}

pub fn notification_from_row(row: notification_events::Model) -> Result<Notification, RepoError> {
    Ok(Notification {
        id: NotificationId::from_uuid(row.id),
        order_id: OrderId::from_uuid(row.order_id),
        status: parse("notification_events.status", &row.status, NotificationStatus::parse)?,
        policy: parse_opt("notification_events.policy", row.policy.as_deref(), FailurePolicy::parse)?,
        attempts: row.attempts,
        next_attempt_at: row.next_attempt_at,
        last_error: row.last_error,
        claimed_until: row.claimed_until,
        created_at: row.created_at,
        updated_at: row.updated_at,
        version: row.version,
    })
}

pub fn notification_to_row(n: &Notification) -> notification_events::ActiveModel {
    notification_events::ActiveModel {
        id: Set(n.id.as_uuid()),
        order_id: Set(n.order_id.as_uuid()),
        status: Set(n.status.as_str().to_owned()),
        policy: Set(n.policy.map(|p| p.as_str().to_owned())),
        attempts: Set(n.attempts),
        next_attempt_at: Set(n.next_attempt_at),
        last_error: Set(n.last_error.clone()),
        claimed_until: Set(n.claimed_until),
        created_at: Set(n.created_at),
        updated_at: Set(n.updated_at),
        version: Set(n.version + 1),
    }
}

/// The row of a step of order `order_id` (its id the database's).
pub fn step_to_row(order_id: OrderId, s: &StepRecord) -> orchestration_steps::ActiveModel {
    orchestration_steps::ActiveModel {
        order_id: Set(order_id.as_uuid()),
        step: Set(s.step.as_str().to_owned()),
        status: Set(s.status.as_str().to_owned()),
        detail: Set(s.detail.clone()),
        fact: Set(s.fact.map(|f| f.as_text())),
        created_at: Set(s.created_at),
        ..Default::default()
    }
}

pub fn step_from_row(row: orchestration_steps::Model) -> Result<StepRecord, RepoError> {
    Ok(StepRecord {
        step: parse("orchestration_steps.step", &row.step, SagaStep::parse)?,
        status: parse("orchestration_steps.status", &row.status, StepStatus::parse)?,
        detail: row.detail,
        fact: row.fact.as_deref().and_then(StepFact::parse),
        created_at: row.created_at,
    })
}

pub fn outbox_from_row(row: outbox_events::Model) -> Result<OutboxRecord, RepoError> {
    Ok(OutboxRecord {
        id: row.id,
        event_id: EventId::from_uuid(row.event_id),
        aggregate_type: row.aggregate_type,
        aggregate_id: row.aggregate_id,
        event_type: row.event_type,
        routing_key: row.routing_key,
        payload: row.payload,
        correlation_id: row.correlation_id,
        status: parse("outbox_events.status", &row.status, OutboxStatus::parse)?,
        retry_count: row.retry_count,
        failure_code: parse_opt(
            "outbox_events.failure_code",
            row.failure_code.as_deref(),
            FailureCode::parse,
        )?,
        failure_reason: row.failure_reason,
        next_attempt_at: row.next_attempt_at,
        last_attempt_at: row.last_attempt_at,
        claimed_by: row.claimed_by,
        claimed_until: row.claimed_until,
        created_at: row.created_at,
        published_at: row.published_at,
        dead_lettered_at: row.dead_lettered_at,
        version: row.version,
        lane: row.lane,
        traceparent: row.traceparent,
    })
}

/// Statuses as the strings a `WHERE status IN (...)` compares with.
pub fn status_strings(statuses: &[OutboxStatus]) -> Vec<String> {
    statuses.iter().map(|s| s.as_str().to_owned()).collect()
}

/// A new outbox event as a row: stored in its aggregate's lane, on the fast path.
pub(super) fn outbox_row(e: &NewOutboxEvent, lanes: u16) -> outbox_events::ActiveModel {
    outbox_events::ActiveModel {
        lane: Set(lane_of(&e.aggregate_type, &e.aggregate_id, lanes)),
        slow: Set(false),
        // The trace of the transaction writing it: its publish continues that trace.
        traceparent: Set(crate::telemetry::current_traceparent()),
        event_id: Set(e.event_id.as_uuid()),
        aggregate_type: Set(e.aggregate_type.clone()),
        aggregate_id: Set(e.aggregate_id.clone()),
        event_type: Set(e.event_type.clone()),
        routing_key: Set(e.routing_key.clone()),
        payload: Set(e.payload.clone()),
        correlation_id: Set(e.correlation_id.clone()),
        status: Set(OutboxStatus::Ready.as_str().to_owned()),
        retry_count: Set(0),
        failure_code: Set(None),
        failure_reason: Set(None),
        next_attempt_at: Set(None),
        last_attempt_at: Set(None),
        claimed_by: Set(None),
        claimed_until: Set(None),
        created_at: Set(e.created_at),
        published_at: Set(None),
        dead_lettered_at: Set(None),
        version: Set(1),
        ..Default::default()
    }
}
