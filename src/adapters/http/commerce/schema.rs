//! The bodies of the commerce dialect's OpenAPI document (`doc`): its envelope and requests,
//! as the platform's clients send and read them.

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
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryDueResult {
    #[schema(example = "completed")]
    pub status: String,
    pub processed_count: i32,
    pub success_count: i32,
    pub failed_count: i32,
    pub skipped_count: i32,
    pub processed_event_ids: Vec<i64>,
}

/// Its `{status}` health answer.
#[derive(Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "UP")]
    pub status: String,
}
