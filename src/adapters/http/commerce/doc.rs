//! The dialect's OpenAPI document (`GET /openapi/commerce.json` on the native listener):
//! its ten operations, tagged `commerce`, with its bodies and an example of each answer.
//! A document of its own because OpenAPI allows one operation per path and method, and
//! both APIs have `POST /api/orders` (docs/dialects.md).

use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use super::{admin, orders};
use crate::adapters::http::BearerAuth;

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

#[derive(OpenApi)]
#[openapi(
    info(
        title = "commerce dialect",
        description = "Gseobi/commerce-orchestration-backend's HTTP API, served on http.dialects.commerce.bind over this service's use cases (docs/dialects.md). Every answer is in its envelope but retry-due's and health's."
    ),
    paths(
        super::health,
        super::token,
        orders::create,
        orders::get,
        orders::flow,
        orders::orchestrate,
        admin::retry_notification,
        admin::ignore_notification,
        admin::retry_due,
        admin::retry_outbox,
    ),
    components(schemas(Envelope, TokenRequest, CreateOrderRequest, RecoveryRequest, RetryDueResult, Health)),
    modifiers(&BearerAuth),
    tags((name = "commerce", description = "The commerce backend's operations (dialect commerce)"))
)]
pub struct CommerceApiDoc;
