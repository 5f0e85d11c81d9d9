//! Domain events -> outbox rows with the envelope of docs/spec.md §6.
//!
//! The order is the saga's aggregate root: every event of an order's saga — its
//! payment's, settlement's and notification's too — carries `aggregateType = "order"` and
//! the order id, so the relay's per-aggregate ordering keeps an order's whole story in
//! commit order (a consumer never sees `order.completed` before `payment.approved`).

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use crate::application::ports::{NewOutboxEvent, OrderRecord};
use crate::domain::ids::EventId;
use crate::domain::notification::{Notification, NotificationEvent};
use crate::domain::order::{Order, OrderEvent, OrderStatus};
use crate::domain::payment::{Payment, PaymentEvent};
use crate::domain::settlement::{Settlement, SettlementEvent};

/// The aggregate type every saga event is ordered under.
pub const ORDER_AGGREGATE: &str = "order";

/// Formats an instant the way every envelope and API response does (RFC 3339, UTC, `Z`).
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The aggregate type of a (meeting, user) registration refused before any order existed.
pub const REGISTRATION_AGGREGATE: &str = "registration";

/// `payment.failed`: a registration refused before any charge (docs/spec.md §7), under the
/// registration's own aggregate (no order exists for it).
pub fn registration_refused(
    meeting_id: &str,
    user_id: &str,
    inbound_event_id: &str,
    reason: &str,
    correlation_id: Option<&str>,
    now: DateTime<Utc>,
) -> NewOutboxEvent {
    let event_type = "payment.failed";
    let event_id = EventId::new();
    let aggregate_id = crate::domain::order::registration_key(meeting_id, user_id);
    let envelope = json!({
        "eventId": event_id.to_string(),
        "eventType": event_type,
        "aggregateType": REGISTRATION_AGGREGATE,
        "aggregateId": aggregate_id,
        "correlationId": correlation_id,
        "occurredAt": timestamp(now),
        "payload": {
            "meetingId": meeting_id,
            "userId": user_id,
            "registrationEventId": inbound_event_id,
            "causationId": inbound_event_id,
            "reason": reason,
        },
    });
    NewOutboxEvent {
        event_id,
        aggregate_type: REGISTRATION_AGGREGATE.into(),
        aggregate_id,
        event_type: event_type.into(),
        routing_key: event_type.into(),
        payload: envelope.to_string(),
        correlation_id: correlation_id.map(str::to_owned),
        created_at: now,
    }
}

/// Builds outbox rows for one order's events, all under the order's aggregate.
pub struct EventWriter<'a> {
    order: &'a Order,
    correlation_id: Option<&'a str>,
    causation_id: Option<&'a str>,
    /// The order's payment's number, once it has one (the record's, or the payment whose
    /// events are written).
    payment_number: Option<i64>,
    /// The order's status as loaded, before this change.
    previous: OrderStatus,
    now: DateTime<Utc>,
    events: Vec<NewOutboxEvent>,
}

impl<'a> EventWriter<'a> {
    /// `order` as it is now; `record`, the order as loaded, gives its context and payment.
    pub fn new(order: &'a Order, record: &'a OrderRecord, now: DateTime<Utc>) -> Self {
        EventWriter {
            order,
            correlation_id: record.context.correlation_id.as_deref(),
            causation_id: record.context.causation_id.as_deref(),
            payment_number: record.payment.as_ref().map(|p| p.number),
            previous: record.order.status,
            now,
            events: Vec::new(),
        }
    }

    fn base(&self) -> Map<String, Value> {
        let o = self.order;
        let mut map = Map::new();
        map.insert("orderId".into(), json!(o.id.to_string()));
        map.insert("orderNumber".into(), json!(o.number));
        map.insert("customerId".into(), json!(o.customer_id));
        map.insert("merchantId".into(), json!(o.merchant_id.to_string()));
        if let Some(store) = o.store_id {
            map.insert("storeId".into(), json!(store.to_string()));
        }
        map.insert("source".into(), json!(o.source.as_str()));
        map.insert("meetingId".into(), json!(o.meeting_id));
        map.insert("currency".into(), json!(o.currency.as_str()));
        map.insert("totalAmount".into(), json!(o.total.minor()));
        map.insert("orderStatus".into(), json!(o.status.as_str()));
        if let Some(number) = self.payment_number {
            map.insert("paymentNumber".into(), json!(number));
        }
        if let Some(causation) = self.causation_id {
            map.insert("causationId".into(), json!(causation));
        }
        map
    }

    fn push(&mut self, event_type: &'static str, extra: Value) {
        let mut payload = self.base();
        if let Value::Object(extra) = extra {
            payload.extend(extra);
        }
        let event_id = EventId::new();
        let envelope = json!({
            "eventId": event_id.to_string(),
            "eventType": event_type,
            "aggregateType": ORDER_AGGREGATE,
            "aggregateId": self.order.id.to_string(),
            "correlationId": self.correlation_id,
            "occurredAt": timestamp(self.now),
            "payload": payload,
        });
        self.events.push(NewOutboxEvent {
            event_id,
            aggregate_type: ORDER_AGGREGATE.into(),
            aggregate_id: self.order.id.to_string(),
            event_type: event_type.into(),
            routing_key: event_type.into(),
            payload: envelope.to_string(),
            correlation_id: self.correlation_id.map(str::to_owned),
            created_at: self.now,
        });
    }

    pub fn order(&mut self, events: &[OrderEvent]) -> &mut Self {
        for event in events {
            let extra = match event {
                // Completed after its notification had failed (retried, reprocessed or
                // ignored): settled long before, and announced so when it failed.
                OrderEvent::Completed if self.previous == OrderStatus::Failed => {
                    json!({ "afterNotificationFailure": true })
                }
                OrderEvent::Completed => json!({}),
                OrderEvent::Failed { stage, reason } => {
                    json!({ "failureStage": stage.as_str(), "failureReason": reason.as_str() })
                }
                OrderEvent::Cancelled { reason } => json!({ "reason": reason }),
            };
            self.push(event.event_type(), extra);
        }
        self
    }

    pub fn payment(&mut self, payment: &Payment, events: &[PaymentEvent]) -> &mut Self {
        self.payment_number = Some(payment.number);
        for event in events {
            let mut extra = json!({
                "paymentId": payment.id.to_string(),
                "paymentNumber": payment.number,
                "paymentRequestId": payment.payment_request_id,
                "providerTransactionId": payment.provider_transaction_id,
                "amount": payment.amount.minor(),
                "paymentStatus": payment.status.as_str(),
            });
            match event {
                PaymentEvent::Declined { code } => extra["declineCode"] = json!(code),
                PaymentEvent::Cancelled { reason } => extra["reason"] = json!(reason),
                // A refund's event: `amount` is the refund's; the payment's is `paymentAmount`.
                PaymentEvent::Refunded {
                    refund_id,
                    amount,
                    refunded_amount,
                    balance,
                    reason,
                    causation_id,
                } => {
                    extra["refundId"] = json!(refund_id.to_string());
                    extra["refundReason"] = json!(reason);
                    // The refund's cause, not the order's: null for one the API asked for.
                    extra["causationId"] = json!(causation_id);
                    extra["paymentAmount"] = json!(payment.amount.minor());
                    extra["amount"] = json!(amount);
                    extra["refundedAmount"] = json!(refunded_amount);
                    extra["balance"] = json!(balance);
                }
                PaymentEvent::RefundFailed { refund_id, amount, reason } => {
                    extra["refundId"] = json!(refund_id.to_string());
                    extra["paymentAmount"] = json!(payment.amount.minor());
                    extra["amount"] = json!(amount);
                    extra["refundedAmount"] = json!(payment.refunded_amount);
                    extra["balance"] = json!(payment.balance());
                    extra["reason"] = json!(reason);
                }
                PaymentEvent::Approved { .. } => {}
            }
            self.push(event.event_type(), extra);
        }
        self
    }

    pub fn settlement(&mut self, settlement: &Settlement, events: &[SettlementEvent]) -> &mut Self {
        for event in events {
            let SettlementEvent::Failed { reason } = event;
            let extra = json!({ "settlementId": settlement.id.to_string(), "reason": reason });
            self.push(event.event_type(), extra);
        }
        self
    }

    pub fn notification(&mut self, notification: &Notification, events: &[NotificationEvent]) -> &mut Self {
        for event in events {
            let NotificationEvent::Failed { policy, reason, attempts } = event;
            let extra = json!({
                "notificationId": notification.id.to_string(),
                "notificationStatus": notification.status.as_str(),
                "policy": policy.as_str(),
                "reason": reason,
                "attempts": attempts,
            });
            self.push(event.event_type(), extra);
        }
        self
    }

    pub fn finish(self) -> Vec<NewOutboxEvent> {
        self.events
    }
}
