//! Property tests of the HTTP request bodies: whatever JSON arrives, the answer is a 201
//! with an order or a 4xx problem naming what is wrong — never a 5xx — and only a 201
//! creates anything.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, count};

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        Just(Value::from("KRW")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-zA-Z]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A checkout whose fields are each either valid or replaced by anything.
fn checkout() -> impl Strategy<Value = Value> {
    let field = |valid: Value| prop_oneof![3 => Just(valid), 1 => any_json()];
    let item = (field(json!("SKU-1")), field(json!(2)), field(json!(1500)), any::<bool>()).prop_map(
        |(sku, quantity, unit_price, extra)| {
            let mut item = json!({ "sku": sku, "quantity": quantity, "unitPrice": unit_price });
            if extra {
                item["surprise"] = json!(true);
            }
            item
        },
    );
    (field(json!("KRW")), proptest::collection::vec(item, 0..3), any::<bool>(), field(json!("alice")))
        .prop_map(|(currency, items, with_customer, customer)| {
            let mut body = json!({ "currency": currency, "items": items });
            if with_customer {
                body["customerId"] = customer;
            }
            body
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_request_body_gets_a_created_order_or_a_4xx_problem() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else { return };
    let token = app.token("alice");
    // A fixed seed: the same 300 bodies every run, so the test is repeatable.
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(Config { cases: 300, ..Config::default() }, rng);
    let strategy = prop_oneof![3 => checkout(), 1 => any_json()];
    let mut bodies = Vec::new();
    for _ in 0..300 {
        bodies.push(strategy.new_tree(&mut runner).expect("a value").current());
    }
    let mut created = 0;
    for body in bodies {
        let before = count(&app.db, "orders").await;
        let response = app.post("/api/orders", &token).json(&body).send().await.unwrap();
        let status = response.status();
        let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
        let text = response.text().await.unwrap();
        assert!(!status.is_server_error(), "{status} for {body}: {text}");
        let after = count(&app.db, "orders").await;
        if status == StatusCode::CREATED {
            created += 1;
            assert_eq!(after, before + 1, "a 201 created exactly one order");
        } else {
            assert!(matches!(status.as_u16(), 400 | 403 | 422), "unexpected {status} for {body}: {text}");
            assert_eq!(content_type.as_deref(), Some("application/problem+json"));
            let problem: Value = serde_json::from_str(&text).unwrap();
            assert!(problem["code"].is_string());
            if status == StatusCode::UNPROCESSABLE_ENTITY {
                assert!(problem["field"].is_string(), "a 422 names the field: {problem}");
            }
            assert_eq!(after, before, "a refused request changes nothing");
        }
    }
    assert!(created > 10, "the generator also produces valid checkouts ({created})");
}

/// Arbitrary bytes (not JSON at all) are a 400 and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arbitrary_bytes_are_refused() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else { return };
    let token = app.token("alice");
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(Config { cases: 100, ..Config::default() }, rng);
    let strategy = proptest::collection::vec(any::<u8>(), 0..200);
    for _ in 0..100 {
        let bytes = strategy.new_tree(&mut runner).expect("bytes").current();
        let response = app
            .post("/api/orders", &token)
            .header("content-type", "application/json")
            .body(bytes.clone())
            .send()
            .await
            .unwrap();
        let status = response.status();
        assert!(status.is_client_error(), "{status} for {bytes:?}");
    }
    assert_eq!(count(&app.db, "orders").await, 0);
}
