//! The dialect's OpenAPI document (`GET /openapi/momo.json` on the native listener): its
//! payment paths, tagged `momo`. A document of its own, as the commerce dialect's: each
//! dialect's paths are the platform's, not ours (docs/dialects.md).

use utoipa::OpenApi;

use super::schema::{Envelope, KeyInRequest, RefundRequest};
use super::{key_in, payments};
use crate::adapters::http::BearerAuth;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "momo dialect",
        description = "momo-spring-project/momo-backend's payment endpoints, served on http.dialects.momo.bind over this service's use cases (docs/dialects.md). Its access tokens: the Authorization header, or its Authorization=Bearer_<jwt> cookie."
    ),
    paths(key_in::key_in, payments::me, payments::pg, payments::refund),
    components(schemas(Envelope, KeyInRequest, RefundRequest)),
    modifiers(&BearerAuth),
    tags((name = "momo", description = "The meetup platform's payment endpoints (dialect momo)"))
)]
pub struct MomoApiDoc;
