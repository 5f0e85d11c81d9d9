//! The bodies of the momo dialect's OpenAPI document (`doc`): its envelope, its requests and
//! its answers, as the platform's clients send and read them. The answers are the types the
//! handlers serialize: what the document says is what goes out.

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

/// Its `ApiResponse<T>` of a success, as every handler answers one (`envelope::ok`).
#[derive(Serialize, ToSchema)]
pub struct Answer<T> {
    pub success: bool,
    pub message: String,
    pub data: T,
    /// Its server's clock as a `LocalDateTime` in `meetings.timezone`.
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

/// Its `PaymentResponseDto`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentResponse {
    /// The payment's number.
    pub id: i64,
    pub user_id: Option<i64>,
    pub meeting_id: Option<i64>,
    pub amount: i64,
    /// Always `TOSS`.
    pub payment_method: &'static str,
    /// Its `PaymentStatus`: `PENDING`, `COMPLETED`, `FAILED`, `REFUNDED`.
    pub status: &'static str,
    /// Its `LocalDateTime` in `meetings.timezone`.
    pub created_at: String,
    /// By status (`null` for `PENDING`), without its null fields.
    pub detail: Option<PaymentDetail>,
}

/// A payment's detail by status: `COMPLETED` its transaction, order and time; `FAILED` its
/// reason and time; `REFUNDED` its transaction and time. A field with no value is left out.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentDetail {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pg_transaction_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paid_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refunded_at: Option<String>,
}

/// Spring Data's `Sort`, as its `Page` writes it.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct SortView {
    pub empty: bool,
    pub sorted: bool,
    pub unsorted: bool,
}

/// Spring Data's `Pageable`, as its `Page` writes it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PageableView {
    pub page_number: u64,
    pub page_size: u64,
    pub sort: SortView,
    pub offset: u64,
    pub paged: bool,
    pub unpaged: bool,
}

/// Spring Data's `Page<PaymentResponseDto>` (`GET /payments/me`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPage {
    pub content: Vec<PaymentResponse>,
    pub pageable: PageableView,
    pub last: bool,
    pub total_elements: u64,
    pub total_pages: u64,
    pub size: u64,
    pub number: u64,
    pub sort: SortView,
    pub first: bool,
    pub number_of_elements: usize,
    pub empty: bool,
}

/// The provider's record in the platform's nine fields (`GET /payments/{id}/pg`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PgPayment {
    pub payment_key: String,
    pub order_id: String,
    pub order_name: Option<String>,
    pub status: String,
    pub total_amount: i64,
    pub method: Option<String>,
    pub approved_at: Option<String>,
    pub requested_at: Option<String>,
    pub failure: Option<PgFailure>,
}

/// Why the provider failed the payment.
#[derive(Debug, Serialize, ToSchema)]
pub struct PgFailure {
    pub code: String,
    pub message: Option<String>,
}
