//! The bodies of the commerce dialect's OpenAPI document (`doc`): its envelope, its requests
//! and its answers, as the platform's clients send and read them. The answers are the types
//! the handlers serialize: what the document says is what goes out.

use serde::Serialize;
use utoipa::ToSchema;

/// Its `ApiResponse<T>`: `data` is the operation's answer, `null` on an error.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    pub success: bool,
    /// `SUCCESS`, or its `ErrorCode` (`ORDER_NOT_FOUND`, `BAD_REQUEST`, `UNAUTHORIZED`, …).
    pub code: String,
    pub message: String,
    #[schema(value_type = Object, nullable)]
    pub data: Option<serde_json::Value>,
}

/// Its `ApiResponse<T>` of a success, as every handler answers one (`envelope::ok`).
#[derive(Serialize, ToSchema)]
pub struct Answer<T> {
    pub success: bool,
    /// `SUCCESS`.
    pub code: &'static str,
    pub message: &'static str,
    pub data: T,
}

/// Its `OrderResponse` (`POST /api/orders`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderResponse {
    /// The order's number.
    pub order_id: i64,
    pub customer_id: String,
    /// In the currency's major unit (`12000` won, `12.5` dollars).
    #[schema(value_type = f64)]
    pub total_amount: serde_json::Value,
    pub currency: String,
    pub description: Option<String>,
    /// Its `OrderStatus`.
    pub status: &'static str,
    /// Its `LocalDateTime` (docs/dialects.md).
    pub created_at: String,
}

/// Its `OrderDetailResponse` (`GET /api/orders/{orderId}`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderDetailResponse {
    pub order_id: i64,
    pub customer_id: String,
    #[schema(value_type = f64)]
    pub total_amount: serde_json::Value,
    pub currency: String,
    pub description: Option<String>,
    pub order_status: &'static str,
    pub created_at: String,
    pub updated_at: String,
    /// At most one each here: an order has one payment, settlement and notification.
    pub payment_statuses: Vec<&'static str>,
    pub settlement_statuses: Vec<&'static str>,
    pub notification_statuses: Vec<&'static str>,
}

/// Its `AdminNotificationReprocessResponse`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationReprocessResponse {
    /// The order's number: one notification per order here.
    pub event_id: i64,
    pub order_id: i64,
    pub action: &'static str,
    pub result: &'static str,
    pub previous_status: &'static str,
    pub current_status: Option<&'static str>,
    pub message: &'static str,
    pub handling_policy: &'static str,
    pub retry_count: i32,
    pub next_attempt_at: Option<String>,
    pub last_attempt_at: Option<String>,
    pub failure_code: Option<&'static str>,
    pub failure_reason: Option<String>,
    pub order_status: &'static str,
}

/// Its `AdminOutboxReprocessResponse`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutboxReprocessResponse {
    pub event_id: i64,
    /// The order's number, where the event is an order's.
    pub aggregate_id: Option<i64>,
    pub event_type: String,
    pub action: &'static str,
    pub result: &'static str,
    pub previous_status: &'static str,
    pub current_status: &'static str,
    pub retry_count: i32,
    pub failure_code: Option<&'static str>,
    pub failure_reason: Option<String>,
    pub message: String,
    pub next_attempt_at: Option<String>,
    pub last_attempt_at: Option<String>,
    pub published_at: Option<String>,
    pub dead_lettered_at: Option<String>,
}

/// Its `TokenRequest`.
#[derive(Serialize, ToSchema)]
pub struct TokenRequest {
    pub username: String,
    pub roles: Option<Vec<String>>,
}

/// Its `CreateOrderRequest`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateOrderRequest {
    #[schema(example = "customer-demo", max_length = 100)]
    pub customer_id: String,
    /// In the currency's major unit, at most its decimals (KRW: none).
    #[schema(example = 12000)]
    pub total_amount: f64,
    /// ISO-4217.
    #[schema(example = "KRW")]
    pub currency: String,
    /// Its fault words drive the mock providers (docs/dialects.md).
    #[schema(example = "normal happy path", max_length = 255)]
    pub description: Option<String>,
}

/// Its `AdminRecoveryRequest`: optional, kept in the audit log.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryRequest {
    #[schema(max_length = 100)]
    pub operator_id: Option<String>,
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}

/// Its `NotificationRetryProcessingResult`, answered bare.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryDueResult {
    #[schema(example = "completed")]
    pub status: &'static str,
    pub processed_count: usize,
    pub success_count: usize,
    pub failed_count: usize,
    pub skipped_count: usize,
    pub processed_event_ids: Vec<i64>,
}

/// Its `{status}` health answer.
#[derive(Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "UP")]
    pub status: String,
}
