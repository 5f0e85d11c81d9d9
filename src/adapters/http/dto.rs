//! Request and response bodies of the HTTP API (camelCase JSON), and their mapping from
//! the application's records. Status fields carry the domain enums' contract spelling.

use crate::application::orchestration::Checkout;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::adapters::http::body::MaybeJson;
use crate::adapters::http::problem::ApiError;
use crate::adapters::messaging::contract::WireView;
use crate::application::envelopes::timestamp;
use crate::application::ports::{AuditRecord, OrderRecord, OutboxRecord, StepRecord};
use crate::domain::notification::Notification;
use crate::domain::order::Order;
use crate::domain::payment::{Payment, Refund};
use crate::domain::settlement::Settlement;
use crate::domain::text;

/// `POST /api/orders`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlaceOrderRequest {
    /// Defaults to the token's `sub`; only an admin may order for someone else.
    #[schema(max_length = 64)]
    pub customer_id: Option<String>,
    /// Where the customer is told by e-mail (`notification.channel = email`); without it,
    /// the notification is `IGNORED` (`NO_RECIPIENT`).
    #[schema(max_length = 254, example = "alice@example.com")]
    pub customer_email: Option<String>,
    /// ISO-4217 code, upper case.
    #[schema(example = "KRW", min_length = 3, max_length = 3)]
    pub currency: String,
    #[schema(min_items = 1, max_items = 100)]
    pub items: Vec<OrderItemRequest>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OrderItemRequest {
    #[schema(min_length = 1, max_length = 64)]
    pub sku: String,
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub quantity: i64,
    /// Minor units (e.g. cents), not negative.
    #[schema(minimum = 0)]
    pub unit_price: i64,
}

/// `POST /api/orders/{id}/payment`: what the payment widget's success redirect gave the
/// client (docs/spec.md §10).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PayOrderRequest {
    /// The widget's `paymentKey`.
    #[schema(min_length = 1, max_length = 200)]
    pub payment_key: String,
    /// The amount the widget charged: the order's total, else `422 AMOUNT_MISMATCH`.
    pub amount: i64,
}

/// What the client needs to open Toss's payment widget for an order `AWAITING_PAYMENT`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckoutResponse {
    /// Toss's `orderId` for this payment.
    pub order_id: String,
    pub order_name: String,
    pub amount: i64,
    /// The customer's key at Toss.
    pub customer_key: Option<String>,
}

impl From<Checkout> for CheckoutResponse {
    fn from(c: Checkout) -> Self {
        CheckoutResponse {
            order_id: c.order_id,
            order_name: c.order_name,
            amount: c.amount,
            customer_key: c.customer_key,
        }
    }
}

/// Optional body of admin actions.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReasonRequest {
    #[schema(max_length = 1000)]
    pub reason: Option<String>,
}

impl ReasonRequest {
    /// The reason of an optional body: none without a body, with a `null` body or without
    /// the field.
    ///
    /// # Errors
    /// `422` naming `reason` when it is longer than its documented length (control
    /// characters were refused when the body was decoded).
    pub fn of(body: MaybeJson<ReasonRequest>) -> Result<Option<String>, ApiError> {
        let reason = body.0.and_then(|b| b.reason);
        if let Some(r) = &reason {
            text::check("reason", r, text::limits::REASON).map_err(|e| {
                ApiError::field(actix_web::http::StatusCode::UNPROCESSABLE_ENTITY, e.field(), e.message())
            })?;
        }
        Ok(reason)
    }
}

/// Body of `POST /api/orders/{id}/refund` (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RefundBody {
    /// Recorded on the refund and in the audit log, sent to the provider (as Toss's
    /// `cancelReason`: not blank, at most 200 characters).
    #[schema(max_length = 200)]
    pub reason: Option<String>,
    /// Minor units, `0 < amount <= balance`; absent: the whole remaining balance.
    pub amount: Option<i64>,
}

impl RefundBody {
    /// The reason and amount of an optional body.
    ///
    /// # Errors
    /// `422` naming `reason` when it is blank or longer than the provider takes (checked
    /// before anything is stored: a reason Toss refuses would fail the refund at Toss).
    pub fn of(body: MaybeJson<RefundBody>) -> Result<(Option<String>, Option<i64>), ApiError> {
        let body = body.0.unwrap_or_default();
        if let Some(r) = &body.reason {
            let unprocessable = |field: &str, message: String| {
                ApiError::field(actix_web::http::StatusCode::UNPROCESSABLE_ENTITY, field, message)
            };
            text::check("reason", r, text::limits::REFUND_REASON)
                .map_err(|e| unprocessable(e.field(), e.message()))?;
            if r.trim().is_empty() {
                return Err(unprocessable(
                    "reason",
                    "must not be blank; leave it out for the default".into(),
                ));
            }
        }
        Ok((body.reason, body.amount))
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderItemResponse {
    pub sku: String,
    pub quantity: i64,
    pub unit_price: i64,
}

/// An order's own fields (docs/spec.md §3).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderResponse {
    pub id: String,
    /// The order's number: positive, unique, increasing, never reused (docs/spec.md §3).
    pub number: i64,
    pub customer_id: String,
    /// `API` | `MEETING` | `COMMERCE` (made through the commerce dialect) | `MOMO` (keyed in
    /// through the momo dialect)
    pub source: &'static str,
    pub meeting_id: Option<String>,
    pub items: Vec<OrderItemResponse>,
    pub currency: String,
    pub total_amount: i64,
    /// `CREATED` | `AWAITING_PAYMENT` | `PAYMENT_APPROVED` | `SETTLEMENT_REQUESTED` |
    /// `COMPLETED` | `FAILED` | `CANCELLED` | `PENDING_CONFIRMATION`
    pub status: &'static str,
    /// `PAYMENT` | `SETTLEMENT` | `NOTIFICATION`
    pub failure_stage: Option<&'static str>,
    pub failure_reason: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// The merchant whose order it is (docs/spec.md §15; `DEFAULT`'s unless its door named
    /// another).
    pub merchant_id: String,
    /// One of the merchant's stores, when the order named one.
    pub store_id: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentResponse {
    pub id: String,
    /// The payment's number: positive, unique, increasing, never reused (docs/spec.md §3).
    pub number: i64,
    pub status: &'static str,
    pub amount: i64,
    /// The sum of its succeeded refunds.
    pub refunded_amount: i64,
    /// What can still be refunded: `amount - refundedAmount`.
    pub balance: i64,
    pub payment_request_id: String,
    pub provider_transaction_id: Option<String>,
    /// The provider's own code for a declined payment (`REJECT_CARD_PAYMENT`,
    /// `EXCEED_MAX_DAILY_PAYMENT_COUNT`, `PAYMENT_WINDOW_EXPIRED`, `AUTHORIZATION_MISMATCH`,
    /// …): what a checkout page needs to tell "card refused" from "limit exceeded".
    pub decline_code: Option<String>,
    pub refund_failure_reason: Option<String>,
    /// What the provider pays out for it, once its settlement is recorded (Toss; docs/spec.md
    /// §13): the fee and payout netted over its approval and cancels. `null` until then.
    pub payout: Option<super::ledger::PaymentPayoutResponse>,
}

/// One refund of the payment (docs/spec.md §3).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefundResponse {
    pub id: String,
    pub amount: i64,
    /// `PENDING` | `SUCCEEDED` | `FAILED`
    pub status: &'static str,
    pub reason: String,
    /// Who asked: a customer, an operator, a consumer, or `provider` (made in the
    /// provider's dashboard).
    pub actor: String,
    /// The provider's key of the cancel (Toss's `transactionKey`).
    pub provider_transaction_key: Option<String>,
    pub failure_reason: Option<String>,
    pub created_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettlementResponse {
    pub id: String,
    pub status: &'static str,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationResponse {
    pub id: String,
    pub status: &'static str,
    pub policy: Option<&'static str>,
    pub attempts: i32,
    pub next_attempt_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepResponse {
    /// `PAYMENT` | `SETTLEMENT` | `NOTIFICATION` | `COMPENSATION`
    pub step: &'static str,
    /// `SUCCESS` | `FAILED` | `READY` | `SKIPPED`
    pub status: &'static str,
    pub detail: Option<String>,
    pub created_at: String,
}

/// An order with its saga state, as `GET /api/orders/{id}` and `POST /api/orders` answer.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderDetailResponse {
    #[serde(flatten)]
    pub order: OrderResponse,
    pub payment: Option<PaymentResponse>,
    /// The payment's refunds, oldest first.
    pub refunds: Vec<RefundResponse>,
    pub settlement: Option<SettlementResponse>,
    pub notification: Option<NotificationResponse>,
    /// Oldest first.
    pub steps: Vec<StepResponse>,
    /// While the order is `AWAITING_PAYMENT` (docs/spec.md §10): the payment widget's
    /// parameters. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkout: Option<CheckoutResponse>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderPageResponse {
    pub items: Vec<OrderResponse>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutboxEventResponse {
    pub id: i64,
    pub event_id: String,
    pub event_type: String,
    pub routing_key: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    /// `READY` | `PROCESSING` | `RETRY_WAIT` | `PUBLISHED` | `DEAD_LETTER` | `DISCARDED`
    pub status: &'static str,
    pub retry_count: i32,
    pub failure_code: Option<&'static str>,
    pub failure_reason: Option<String>,
    pub next_attempt_at: Option<String>,
    pub created_at: String,
    pub published_at: Option<String>,
    pub dead_lettered_at: Option<String>,
    /// The envelope as stored (JSON text): the native contract's message.
    pub payload: String,
    /// Where this deployment's wire contract (`broker.contract`) sends it: each message's
    /// exchange or topic and routing key or key (docs/spec.md §12). Empty with the `log`
    /// broker.
    pub destinations: Vec<DestinationResponse>,
}

/// One message of an event on the wire.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DestinationResponse {
    /// The exchange (RabbitMQ) or topic (Kafka).
    pub destination: String,
    /// The routing key (RabbitMQ) or the record's key (Kafka).
    pub key: String,
}

/// `GET /api/orders/{id}/flow`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderFlowResponse {
    pub order_id: String,
    pub steps: Vec<StepResponse>,
    pub events: Vec<OutboxEventResponse>,
    pub audit: Vec<AuditResponse>,
    /// What the provider pays out for the order's payment, once settled (docs/spec.md §13).
    pub payout: Option<super::ledger::PaymentPayoutResponse>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditResponse {
    pub action: String,
    pub entity_type: String,
    pub entity_id: String,
    pub actor: String,
    pub detail: Option<String>,
    pub created_at: String,
}

impl From<&Order> for OrderResponse {
    fn from(o: &Order) -> Self {
        OrderResponse {
            id: o.id.to_string(),
            number: o.number,
            customer_id: o.customer_id.clone(),
            source: o.source.as_str(),
            meeting_id: o.meeting_id.clone(),
            items: o
                .items
                .iter()
                .map(|i| OrderItemResponse {
                    sku: i.sku.clone(),
                    quantity: i.quantity,
                    unit_price: i.unit_price.minor(),
                })
                .collect(),
            currency: o.currency.to_string(),
            total_amount: o.total.minor(),
            status: o.status.as_str(),
            failure_stage: o.failure_stage.map(|s| s.as_str()),
            failure_reason: o.failure_reason.map(|r| r.as_str().to_owned()),
            created_at: timestamp(o.created_at),
            updated_at: timestamp(o.updated_at),
            merchant_id: o.merchant_id.to_string(),
            store_id: o.store_id.map(|s| s.to_string()),
        }
    }
}

impl From<&Payment> for PaymentResponse {
    fn from(p: &Payment) -> Self {
        PaymentResponse {
            id: p.id.to_string(),
            number: p.number,
            status: p.status.as_str(),
            amount: p.amount.minor(),
            refunded_amount: p.refunded_amount,
            balance: p.balance(),
            payment_request_id: p.payment_request_id.clone(),
            provider_transaction_id: p.provider_transaction_id.clone(),
            decline_code: p.decline_code.clone(),
            refund_failure_reason: p.refund_failure_reason.clone(),
            payout: None,
        }
    }
}

impl From<&Refund> for RefundResponse {
    fn from(r: &Refund) -> Self {
        RefundResponse {
            id: r.id.to_string(),
            amount: r.amount.minor(),
            status: r.status.as_str(),
            reason: r.reason.clone(),
            actor: r.actor.clone(),
            provider_transaction_key: r.provider_transaction_key.clone(),
            failure_reason: r.failure_reason.clone(),
            created_at: timestamp(r.created_at),
        }
    }
}

impl From<&Settlement> for SettlementResponse {
    fn from(s: &Settlement) -> Self {
        SettlementResponse { id: s.id.to_string(), status: s.status.as_str() }
    }
}

impl From<&Notification> for NotificationResponse {
    fn from(n: &Notification) -> Self {
        NotificationResponse {
            id: n.id.to_string(),
            status: n.status.as_str(),
            policy: n.handling(),
            attempts: n.attempts,
            next_attempt_at: n.next_attempt_at.map(timestamp),
        }
    }
}

impl From<&StepRecord> for StepResponse {
    fn from(s: &StepRecord) -> Self {
        StepResponse {
            step: s.step.as_str(),
            status: s.status.as_str(),
            detail: s.detail.clone(),
            created_at: timestamp(s.created_at),
        }
    }
}

impl From<&OrderRecord> for OrderDetailResponse {
    fn from(r: &OrderRecord) -> Self {
        OrderDetailResponse {
            order: OrderResponse::from(&r.order),
            payment: r.payment.as_ref().map(PaymentResponse::from),
            refunds: r.refunds.iter().map(RefundResponse::from).collect(),
            settlement: r.settlement.as_ref().map(SettlementResponse::from),
            notification: r.notification.as_ref().map(NotificationResponse::from),
            steps: r.steps.iter().map(StepResponse::from).collect(),
            checkout: None,
        }
    }
}

impl OutboxEventResponse {
    /// `e` as operators see it, with where `wire` sends it.
    pub fn of(e: &OutboxRecord, wire: &WireView) -> Self {
        OutboxEventResponse {
            destinations: wire
                .destinations(e)
                .into_iter()
                .map(|(destination, key)| DestinationResponse { destination, key })
                .collect(),
            id: e.id,
            event_id: e.event_id.to_string(),
            event_type: e.event_type.clone(),
            routing_key: e.routing_key.clone(),
            aggregate_type: e.aggregate_type.clone(),
            aggregate_id: e.aggregate_id.clone(),
            status: e.status.as_str(),
            retry_count: e.retry_count,
            failure_code: e.failure_code.map(|c| c.as_str()),
            failure_reason: e.failure_reason.clone(),
            next_attempt_at: e.next_attempt_at.map(timestamp),
            created_at: timestamp(e.created_at),
            published_at: e.published_at.map(timestamp),
            dead_lettered_at: e.dead_lettered_at.map(timestamp),
            payload: e.payload.clone(),
        }
    }
}

impl From<&AuditRecord> for AuditResponse {
    fn from(a: &AuditRecord) -> Self {
        AuditResponse {
            action: a.action.as_str().to_owned(),
            entity_type: a.entity_type.clone(),
            entity_id: a.entity_id.clone(),
            actor: a.actor.clone(),
            detail: a.detail.clone(),
            created_at: timestamp(a.created_at),
        }
    }
}
