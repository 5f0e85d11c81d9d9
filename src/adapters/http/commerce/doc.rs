//! The dialect's OpenAPI document (`GET /openapi/commerce.json` on the native listener):
//! its ten operations, tagged `commerce`, with its bodies and an example of each answer.
//! A document of its own because OpenAPI allows one operation per path and method, and
//! both APIs have `POST /api/orders` (docs/dialects.md).

use utoipa::OpenApi;

use super::schema::{
    CreateOrderRequest, Envelope, Health, NotificationReprocessResponse, OrderDetailResponse, OrderResponse,
    OutboxReprocessResponse, RecoveryRequest, RetryDueResult, TokenRequest,
};
use super::view::{FlowView, OutboxView, StepView};
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
    components(schemas(
        Envelope,
        TokenRequest,
        CreateOrderRequest,
        RecoveryRequest,
        RetryDueResult,
        Health,
        OrderResponse,
        OrderDetailResponse,
        FlowView,
        StepView,
        OutboxView,
        NotificationReprocessResponse,
        OutboxReprocessResponse
    )),
    modifiers(&BearerAuth),
    tags((name = "commerce", description = "The commerce backend's operations (dialect commerce)"))
)]
pub struct CommerceApiDoc;

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use utoipa::OpenApi;

    use super::CommerceApiDoc;

    /// The document's answers are the types the handlers send: each success's `data` is the
    /// named schema of the type its handler serializes, field for field.
    #[test]
    fn each_answer_is_documented_by_the_type_that_sends_it() {
        let doc = serde_json::to_value(CommerceApiDoc::openapi()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let resolve = |s: &Value| match s["$ref"].as_str() {
            Some(r) => schemas[r.rsplit('/').next().unwrap()].clone(),
            None => s.clone(),
        };
        for (path, method, sent) in [
            ("/api/orders", "post", "OrderResponse"),
            ("/api/orders/{orderId}", "get", "OrderDetailResponse"),
            ("/api/orders/{orderId}/flow", "get", "FlowView"),
            ("/api/orders/{orderId}/orchestrate", "post", "FlowView"),
            (
                "/api/admin/notification-events/{notificationEventId}/retry",
                "post",
                "NotificationReprocessResponse",
            ),
            ("/api/admin/outbox-events/{outboxEventId}/retry", "post", "OutboxReprocessResponse"),
        ] {
            let answer = resolve(
                &doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"],
            );
            let data = resolve(&answer["properties"]["data"]);
            assert!(schemas[sent].is_object(), "{sent} is in the document");
            assert_eq!(data, schemas[sent], "{method} {path}: data is {sent}");
        }
        let bare = &doc["paths"]["/api/admin/notification-events/retry-due"]["post"]["responses"]["200"];
        assert_eq!(resolve(&bare["content"]["application/json"]["schema"]), schemas["RetryDueResult"]);
    }
}
