//! The dialect's OpenAPI document (`GET /openapi/momo.json` on the native listener): its
//! payment paths, tagged `momo`. A document of its own, as the commerce dialect's: each
//! dialect's paths are the platform's, not ours (docs/dialects.md).

use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use super::payments;
use crate::adapters::http::BearerAuth;

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

#[derive(OpenApi)]
#[openapi(
    info(
        title = "momo dialect",
        description = "momo-spring-project/momo-backend's payment endpoints, served on http.dialects.momo.bind over this service's use cases (docs/dialects.md). Its access tokens: the Authorization header, or its Authorization=Bearer_<jwt> cookie."
    ),
    paths(payments::me, payments::pg, payments::refund),
    components(schemas(Envelope, RefundRequest)),
    modifiers(&BearerAuth),
    tags((name = "momo", description = "The meetup platform's payment endpoints (dialect momo)"))
)]
pub struct MomoApiDoc;
