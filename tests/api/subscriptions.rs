//! Webhook subscriptions' endpoints (docs/spec.md §16) on both databases: a merchant's
//! endpoints managed under its path by the roles §15 gives, their URLs and event types
//! checked, their `whsec_` secrets sealed at rest, read back by an operator and rotated.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, json};
use crate::on_both_databases;

on_both_databases!(endpoints_are_a_merchants_and_their_secrets_sealed);

const SECRETS_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

async fn merchant_with_keys(app: &TestApp, admin: &str, code: &str) -> (String, String, String) {
    let body = json!({ "code": code, "name": code });
    let m =
        json(app.post("/api/merchants", admin).json(&body).send().await.unwrap(), StatusCode::CREATED).await;
    let id = m["id"].as_str().unwrap().to_owned();
    let key = |role: &'static str| {
        let path = format!("/api/merchants/{id}/api-keys");
        let request = app.post(&path, admin).json(&json!({ "name": role, "role": role }));
        async move {
            json(request.send().await.unwrap(), StatusCode::CREATED).await["key"].as_str().unwrap().to_owned()
        }
    };
    let operator = key("OPERATOR").await;
    let viewer = key("VIEWER").await;
    (id, operator, viewer)
}

async fn endpoints_are_a_merchants_and_their_secrets_sealed(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, &[("APP__SECRETS__KEY", SECRETS_KEY)]).await else { return };
    let admin = app.admin_token("ops");
    let (a, a_operator, a_viewer) = merchant_with_keys(&app, &admin, "SUB-A").await;
    let (b, b_operator, _) = merchant_with_keys(&app, &admin, "SUB-B").await;
    let endpoints = format!("/api/merchants/{a}/webhook-endpoints");
    let create = |token: &str, body: Value| app.post(&endpoints, token).json(&body).send();
    // The URL and event rules.
    for (body, field) in [
        (json!({ "url": "http://erp.example/h", "eventTypes": ["*"] }), "url"),
        (json!({ "url": "https://user:pw@erp.example/h", "eventTypes": ["*"] }), "url"),
        (json!({ "url": "https://erp.example/h", "eventTypes": [] }), "eventTypes"),
        (json!({ "url": "https://erp.example/h", "eventTypes": ["shipment.sent"] }), "eventTypes"),
        (json!({ "url": "https://erp.example/h", "eventTypes": ["*", "order.completed"] }), "eventTypes"),
    ] {
        let refused =
            json(create(&a_operator, body.clone()).await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(refused["field"], field, "{body}");
    }
    // A VIEWER reads and no more.
    assert_eq!(
        create(&a_viewer, json!({ "url": "https://erp.example/h", "eventTypes": ["*"] }))
            .await
            .unwrap()
            .status(),
        StatusCode::FORBIDDEN
    );
    let made = create(
        &a_operator,
        json!({ "url": "https://erp.example/h", "description": "ERP", "eventTypes": ["order.completed"] }),
    );
    let made = json(made.await.unwrap(), StatusCode::CREATED).await;
    let secret = made["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_") && secret.len() > 40, "{made}");
    assert_eq!((&made["eventTypes"], &made["enabled"]), (&json!(["order.completed"]), &json!(true)));
    let one = format!("{endpoints}/{}", made["id"].as_str().unwrap());
    let listed = json(app.get(&endpoints, &a_viewer).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert!(!listed.to_string().contains(&secret[6..]), "no secret in a list");
    assert_eq!(
        app.get(&format!("{one}/secret"), &a_viewer).send().await.unwrap().status(),
        StatusCode::FORBIDDEN
    );
    // Another merchant's key: 403 on A's path; A's endpoint under B's path is not there.
    assert_eq!(app.get(&one, &b_operator).send().await.unwrap().status(), StatusCode::FORBIDDEN);
    let under_b = one.replace(&a, &b);
    assert_eq!(app.get(&under_b, &b_operator).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    // The secret, read back and rotated; never stored open.
    let read =
        json(app.get(&format!("{one}/secret"), &a_operator).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(read["secret"], secret);
    let rotated =
        json(app.post(&format!("{one}/secret/rotate"), &a_operator).send().await.unwrap(), StatusCode::OK)
            .await;
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, secret);
    let read =
        json(app.get(&format!("{one}/secret"), &a_operator).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(read["secret"], new);
    let dump = {
        use sea_orm::{ConnectionTrait, Statement};
        let rows = app
            .db
            .query_all_raw(Statement::from_string(
                app.db.get_database_backend(),
                "SELECT url, secret, COALESCE(previous_secret, '') AS previous FROM webhook_endpoints",
            ))
            .await
            .unwrap();
        rows.iter()
            .map(|r| {
                let get = |c: &str| r.try_get::<String>("", c).unwrap();
                format!("{} {} {}", get("url"), get("secret"), get("previous"))
            })
            .collect::<String>()
    };
    assert!(dump.contains("erp.example"), "the URL is kept: {dump}");
    assert!(!dump.contains(&secret[6..]) && !dump.contains(&new[6..]), "a secret stored open");
    // Changed, then deleted.
    let patch = app.client.patch(format!("{}{one}", app.base)).bearer_auth(&a_operator);
    let patched =
        json(patch.json(&json!({ "eventTypes": ["*"] })).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(patched["eventTypes"], json!(["*"]));
    let deleted =
        app.client.delete(format!("{}{one}", app.base)).bearer_auth(&a_operator).send().await.unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    assert_eq!(app.get(&one, &a_operator).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    // Without secrets.key no endpoint may hold a secret.
    let Some(bare) = TestApp::spawn(backend).await else { return };
    let admin = bare.admin_token("ops");
    let (c, c_operator, _) = merchant_with_keys(&bare, &admin, "SUB-C").await;
    let body = json!({ "url": "https://erp.example/h", "eventTypes": ["*"] });
    let refused =
        bare.post(&format!("/api/merchants/{c}/webhook-endpoints"), &c_operator).json(&body).send().await;
    assert_eq!(json(refused.unwrap(), StatusCode::CONFLICT).await["code"], "SECRETS_KEY_REQUIRED");
}
