//! The bodies of the momo dialect's OpenAPI document (`doc`): its envelope and requests,
//! as the platform's clients send and read them.

use serde::Serialize;
use utoipa::ToSchema;

/// Its `ApiResponse<T>`: `data` is the operation's answer, `null` on an error; `timestamp`
/// a `LocalDateTime` in `meetings.timezone`.
#[derive(Serialize, ToSchema)]
pub struct Envelope {
    pub success: bool,
    /// Its Korean text: what a client reads (there is no code).
    pub message: String,
    #[schema(value_type = Object, nullable)]
    pub data: Option<serde_json::Value>,
    #[schema(example = "2026-12-06T09:43:09.811422")]
    pub timestamp: String,
}

/// Its `RefundRequestDto`.
#[derive(Serialize, ToSchema)]
pub struct RefundRequest {
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}
