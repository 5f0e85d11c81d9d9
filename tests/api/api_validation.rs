//! Bad input and bad credentials: a clear 4xx problem naming the field, and nothing changed.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TEST_SECRET, TestApp, json, order_body};
use crate::on_both_databases;

async fn assert_problem(
    response: reqwest::Response,
    status: StatusCode,
    code: &str,
    field: Option<&str>,
) -> Value {
    assert_eq!(
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()),
        Some("application/problem+json".to_owned())
    );
    let body = json(response, status).await;
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status.as_u16());
    if let Some(field) = field {
        assert_eq!(body["field"], field, "{body}");
    }
    body
}

async fn invalid_orders_name_the_field_and_change_nothing(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let cases: Vec<(Value, &str)> = vec![
        (json!({ "currency": "KRW", "items": [] }), "items"),
        (
            json!({ "currency": "KRW", "items": [{ "sku": "A", "quantity": 0, "unitPrice": 1 }] }),
            "items[0].quantity",
        ),
        (
            json!({ "currency": "KRW", "items": [{ "sku": "A", "quantity": -1, "unitPrice": 1 }] }),
            "items[0].quantity",
        ),
        (
            json!({ "currency": "KRW", "items": [{ "sku": "A", "quantity": 1, "unitPrice": -5 }] }),
            "items[0].unitPrice",
        ),
        (json!({ "currency": "ZZZ", "items": [{ "sku": "A", "quantity": 1, "unitPrice": 1 }] }), "currency"),
        (json!({ "currency": "krw", "items": [{ "sku": "A", "quantity": 1, "unitPrice": 1 }] }), "currency"),
        (
            json!({ "currency": "KRW", "items": [{ "sku": "", "quantity": 1, "unitPrice": 1 }] }),
            "items[0].sku",
        ),
        (
            json!({ "currency": "KRW", "items": [{ "sku": "A".repeat(65), "quantity": 1, "unitPrice": 1 }] }),
            "items[0].sku",
        ),
        (
            json!({ "currency": "KRW", "items": [
                { "sku": "A", "quantity": 1, "unitPrice": i64::MAX },
                { "sku": "B", "quantity": 1, "unitPrice": 1 }
            ] }),
            "items[1].quantity",
        ),
        (
            json!({ "currency": "KRW", "items": [{ "sku": "A", "quantity": 2, "unitPrice": i64::MAX }] }),
            "items[0].quantity",
        ),
        (
            json!({ "currency": "KRW", "items": [{ "sku": "A", "quantity": 1, "unitPrice": 1e30 }] }),
            "items[0].unitPrice",
        ),
        (
            json!({ "currency": "KRW", "items": [{ "sku": "A", "quantity": "1", "unitPrice": 1 }] }),
            "items[0].quantity",
        ),
        (json!({ "items": [{ "sku": "A", "quantity": 1, "unitPrice": 1 }] }), "currency"),
        (json!({ "currency": "KRW" }), "items"),
        (json!({ "currency": "KRW", "items": [{ "sku": "A", "quantity": 1 }] }), "items[0].unitPrice"),
        (json!({ "currency": "KRW", "items": [], "coupon": "FREE" }), "coupon"),
    ];
    for (body, field) in cases {
        let response = app.place_order(&token, &body, None).await;
        let problem =
            assert_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED", None).await;
        assert!(problem["field"].as_str() == Some(field), "{body}: expected field {field}, got {problem}");
    }
    // Only an admin may name another customer; the input is validated all the same.
    let admin = app.admin_token("ops");
    let long_customer = json!({
        "currency": "KRW",
        "customerId": "a".repeat(65),
        "items": [{ "sku": "A", "quantity": 1, "unitPrice": 1 }]
    });
    let response = app.place_order(&admin, &long_customer, None).await;
    assert_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED", Some("customerId")).await;
    let many: Vec<Value> =
        (0..101).map(|i| json!({ "sku": format!("S{i}"), "quantity": 1, "unitPrice": 1 })).collect();
    let response = app.place_order(&token, &json!({ "currency": "KRW", "items": many }), None).await;
    assert_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED", Some("items")).await;
    assert_eq!(app.count("orders").await, 0, "nothing was created");
    assert_eq!(app.count("outbox_events").await, 0);
}

async fn malformed_oversized_and_non_json_bodies(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let post = || app.post("/api/orders", &token);
    let response =
        post().header("content-type", "application/json").body("{\"currency\": ").send().await.unwrap();
    assert_problem(response, StatusCode::BAD_REQUEST, "MALFORMED_JSON", None).await;
    let response = post().header("content-type", "text/plain").body("hello").send().await.unwrap();
    assert_problem(response, StatusCode::UNSUPPORTED_MEDIA_TYPE, "UNSUPPORTED_MEDIA_TYPE", None).await;
    let huge = format!("{{\"currency\":\"KRW\",\"items\":[],\"pad\":\"{}\"}}", "x".repeat(70 * 1024));
    let response = post().header("content-type", "application/json").body(huge).send().await.unwrap();
    assert_problem(response, StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE", None).await;
    let response = app.place_order(&token, &order_body(), Some("payment=explode")).await;
    // Issue 27 item 9: a header's value refused is 422 naming it, like a body's field.
    assert_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "VALIDATION_FAILED", Some("X-Mock-Scenario"))
        .await;
    assert_eq!(app.count("orders").await, 0);
}

async fn requests_without_a_valid_token_are_refused(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let url = format!("{}/api/orders", app.base);
    let no_token = app.client.post(&url).json(&order_body()).send().await.unwrap();
    assert_eq!(no_token.headers().get("www-authenticate").unwrap(), "Bearer");
    assert_problem(no_token, StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", None).await;

    let garbage = app.client.get(&url).bearer_auth("not.a.jwt").send().await.unwrap();
    assert_problem(garbage, StatusCode::UNAUTHORIZED, "INVALID_TOKEN", None).await;

    let mint = |kid: &str, secret: &str, exp_offset: i64| {
        let now = chrono::Utc::now().timestamp();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(
            &header,
            &json!({ "sub": "alice", "exp": now + exp_offset, "iat": now }),
            &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).unwrap(),
        )
        .unwrap()
    };
    for (name, token) in [
        ("expired", mint("test", TEST_SECRET, -3600)),
        ("bad signature", mint("test", "another-secret-another-secret-another-secret", 600)),
        ("unknown kid", mint("other", TEST_SECRET, 600)),
    ] {
        let response = app.client.get(&url).bearer_auth(token).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{name}");
    }
    let valid = mint("test", TEST_SECRET, 600);
    let response = app.client.get(&url).bearer_auth(valid).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(app.count("orders").await, 0);
}

on_both_databases!(
    invalid_orders_name_the_field_and_change_nothing,
    malformed_oversized_and_non_json_bodies,
    requests_without_a_valid_token_are_refused,
);
