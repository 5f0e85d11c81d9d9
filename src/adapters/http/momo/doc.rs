//! The dialect's OpenAPI document (`GET /openapi/momo.json` on the native listener): its
//! payment paths, tagged `momo`. A document of its own, as the commerce dialect's: each
//! dialect's paths are the platform's, not ours (docs/dialects.md).

use utoipa::OpenApi;

use super::schema::{
    Envelope, KeyInRequest, PageableView, PaymentDetail, PaymentPage, PaymentResponse, PgFailure, PgPayment,
    RefundRequest, SortView,
};
use super::{key_in, payments};
use crate::adapters::http::BearerAuth;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "momo dialect",
        description = "momo-spring-project/momo-backend's payment endpoints, served on http.dialects.momo.bind over this service's use cases (docs/dialects.md). Its access tokens: the Authorization header, or its Authorization=Bearer_<jwt> cookie."
    ),
    paths(key_in::key_in, payments::me, payments::pg, payments::refund),
    components(schemas(
        Envelope,
        KeyInRequest,
        RefundRequest,
        PaymentResponse,
        PaymentDetail,
        PaymentPage,
        PageableView,
        SortView,
        PgPayment,
        PgFailure
    )),
    modifiers(&BearerAuth),
    tags((name = "momo", description = "The meetup platform's payment endpoints (dialect momo)"))
)]
pub struct MomoApiDoc;

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use utoipa::OpenApi;

    use super::MomoApiDoc;

    /// The document's answers are the types the handlers send: each success's `data` is the
    /// named schema of the type its handler serializes.
    #[test]
    fn each_answer_is_documented_by_the_type_that_sends_it() {
        let doc = serde_json::to_value(MomoApiDoc::openapi()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let resolve = |s: &Value| match s["$ref"].as_str() {
            Some(r) => schemas[r.rsplit('/').next().unwrap()].clone(),
            None => s.clone(),
        };
        for (path, method, sent) in [
            ("/payments/me", "get", "PaymentPage"),
            ("/payments/{paymentId}/pg", "get", "PgPayment"),
            ("/payments/{paymentId}/refund", "post", "PaymentResponse"),
            ("/payments/test/keyin", "post", "PaymentResponse"),
        ] {
            let answer = resolve(
                &doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"],
            );
            let data = resolve(&answer["properties"]["data"]);
            assert!(schemas[sent].is_object(), "{sent} is in the document");
            assert_eq!(data, schemas[sent], "{method} {path}: data is {sent}");
        }
    }
}
