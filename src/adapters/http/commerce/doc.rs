//! The dialect's OpenAPI document (`GET /openapi/commerce.json` on the native listener):
//! its ten operations, tagged `commerce`, with its bodies and an example of each answer.
//! A document of its own because OpenAPI allows one operation per path and method, and
//! both APIs have `POST /api/orders` (docs/dialects.md).

use utoipa::OpenApi;

use super::schema::{CreateOrderRequest, Envelope, Health, RecoveryRequest, RetryDueResult, TokenRequest};
use super::{admin, orders};
use crate::adapters::http::BearerAuth;

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
