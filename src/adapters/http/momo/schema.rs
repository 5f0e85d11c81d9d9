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

/// Its `CardPaymentTestRequestDto`: the card fields default to its test card (4242…,
/// `12/25`, birth `880101`).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyInRequest {
    #[schema(example = 12)]
    pub meeting_id: i64,
    #[schema(pattern = r"^\d{16}$")]
    pub card_number: Option<String>,
    #[schema(pattern = r"^\d{2}/\d{2}$")]
    pub card_expiry: Option<String>,
    #[schema(pattern = r"^\d{3}$")]
    pub card_cvc: Option<String>,
    #[schema(pattern = r"^\d{6}$")]
    pub birth: Option<String>,
}

/// Its `RefundRequestDto`.
#[derive(Serialize, ToSchema)]
pub struct RefundRequest {
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}
