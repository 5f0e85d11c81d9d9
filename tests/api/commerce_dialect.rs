//! The commerce backend's HTTP API (docs/spec.md §14, docs/dialects.md), as its clients read
//! it: the answers parsed as JSON and compared field by field with what
//! `Gseobi/commerce-orchestration-backend` answers (its `ApiResponse`, `ErrorCode` texts,
//! `RequestTraceFilter`, demo tokens), against the real listener on both databases.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp};
use crate::on_both_databases;

/// 64 bytes: the platform's JWT library signs HS512 with a key this long.
const SECRET: &str = "commerce-orchestration-demo-secret-key-2026-commerce-orchestrati";

async fn dialect(backend: Backend, demo_token: bool) -> Option<(TestApp, String)> {
    let demo = if demo_token { "true" } else { "false" };
    let app = TestApp::spawn_with(
        backend,
        &[
            ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
            ("APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET", SECRET),
            ("APP__HTTP__DIALECTS__COMMERCE__DEMO_TOKEN", demo),
        ],
    )
    .await?;
    let base = app.commerce.clone().expect("the dialect's listener is on");
    Some((app, base))
}

/// A token as the platform mints it: `sub, iss, iat, exp, roles`, under `alg`.
fn platform_token(alg: Algorithm, user: &str, roles: &[&str], exp_in: i64) -> String {
    let now = chrono::Utc::now().timestamp();
    let claims = json!({ "sub": user, "iss": "commerce-orchestration-backend", "iat": now, "exp": now + exp_in, "roles": roles });
    jsonwebtoken::encode(&Header::new(alg), &claims, &EncodingKey::from_secret(SECRET.as_bytes()).unwrap())
        .unwrap()
}

/// The envelope of an error, as the platform writes it.
async fn error(
    res: reqwest::Response,
    status: StatusCode,
    code: &str,
    message: &str,
) -> reqwest::header::HeaderMap {
    assert_eq!(res.status(), status);
    let headers = res.headers().clone();
    assert!(
        headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json")),
        "{headers:?}"
    );
    let body: Value = res.json().await.unwrap();
    assert_eq!(body, json!({ "success": false, "code": code, "message": message, "data": null }));
    headers
}

async fn demo_tokens_are_the_platforms(backend: Backend) {
    let Some((app, base)) = dialect(backend, true).await else { return };
    let client = &app.client;
    let res = client
        .post(format!("{base}/api/auth/token"))
        .json(&json!({ "username": "demo-admin", "roles": ["ROLE_USER", "ROLE_ADMIN"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        (&body["success"], &body["code"], &body["message"]),
        (&json!(true), &json!("SUCCESS"), &json!("요청이 정상 처리되었습니다."))
    );
    assert_eq!(body["data"]["tokenType"], "Bearer");
    assert_eq!(body["data"]["roles"], json!(["ROLE_USER", "ROLE_ADMIN"]));
    // As the platform's library reads it: HS512 under a 64-byte key, its claims.
    let token = body["data"]["accessToken"].as_str().unwrap();
    assert_eq!(jsonwebtoken::decode_header(token).unwrap().alg, Algorithm::HS512);
    let mut validation = Validation::new(Algorithm::HS512);
    validation.validate_aud = false;
    let claims = jsonwebtoken::decode::<Value>(
        token,
        &DecodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        &validation,
    )
    .unwrap()
    .claims;
    assert_eq!(claims["sub"], "demo-admin");
    assert_eq!(claims["iss"], "commerce-orchestration-backend");
    assert_eq!(claims["roles"], json!(["ROLE_USER", "ROLE_ADMIN"]));
    assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), 3600);

    // No roles: ROLE_USER, as the platform's controller defaults them.
    let res = client
        .post(format!("{base}/api/auth/token"))
        .json(&json!({ "username": "demo-user" }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.json::<Value>().await.unwrap()["data"]["roles"], json!(["ROLE_USER"]));
    // Its validation message.
    let res =
        client.post(format!("{base}/api/auth/token")).json(&json!({ "username": " " })).send().await.unwrap();
    error(res, StatusCode::BAD_REQUEST, "BAD_REQUEST", "username은 필수입니다.").await;
    // Not JSON (the platform: 500; docs/dialects.md).
    let res = client
        .post(format!("{base}/api/auth/token"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    error(res, StatusCode::BAD_REQUEST, "BAD_REQUEST", "잘못된 요청입니다.").await;
}

async fn tokens_are_checked_and_every_answer_is_in_the_envelope(backend: Backend) {
    let Some((app, base)) = dialect(backend, false).await else { return };
    let client = &app.client;
    // Demo tokens off: the path is not served.
    let res =
        client.post(format!("{base}/api/auth/token")).json(&json!({ "username": "x" })).send().await.unwrap();
    error(res, StatusCode::NOT_FOUND, "NOT_FOUND", "요청한 리소스를 찾을 수 없습니다.").await;

    // Health, outside the envelope, as Spring Boot's actuator.
    let res = client.get(format!("{base}/actuator/health")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.json::<Value>().await.unwrap(), json!({ "status": "UP" }));

    // Under /api/ a token comes first: none, expired, signed with another key, an
    // algorithm the key is not for.
    let unknown = format!("{base}/api/nothing-here");
    let headers = error(
        client.get(&unknown).send().await.unwrap(),
        StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
        "인증이 필요합니다.",
    )
    .await;
    assert_eq!(headers.get("www-authenticate").unwrap(), "Bearer");
    let expired = platform_token(Algorithm::HS256, "demo-user", &["ROLE_USER"], -10);
    let forged = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({ "sub": "demo-user", "exp": chrono::Utc::now().timestamp() + 60, "roles": ["ROLE_ADMIN"] }),
        &EncodingKey::from_secret(b"another-secret-another-secret-another-secret-another-secret-64b!")
            .unwrap(),
    )
    .unwrap();
    for token in [expired.as_str(), forged.as_str(), "not-a-jwt"] {
        let res = client.get(&unknown).bearer_auth(token).send().await.unwrap();
        error(res, StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "인증이 필요합니다.").await;
    }
    // A valid one (HS256 under the 64-byte key: accepted, as the platform's library does):
    // then the unknown route is a 404 in the envelope.
    let user = platform_token(Algorithm::HS256, "demo-user", &["ROLE_USER"], 600);
    let res = client.get(&unknown).bearer_auth(&user).send().await.unwrap();
    error(res, StatusCode::NOT_FOUND, "NOT_FOUND", "요청한 리소스를 찾을 수 없습니다.").await;
    let res = client.get(format!("{base}/nowhere")).send().await.unwrap();
    error(res, StatusCode::NOT_FOUND, "NOT_FOUND", "요청한 리소스를 찾을 수 없습니다.").await;
    // A wrong method.
    let res = client.get(format!("{base}/api/auth/token")).send().await.unwrap();
    let headers =
        error(res, StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED", "지원하지 않는 HTTP 메서드입니다.")
            .await;
    assert_eq!(headers.get("allow").unwrap(), "POST");

    // X-Trace-Id: echoed, else a new UUID, on every answer.
    let res = client
        .get(format!("{base}/actuator/health"))
        .header("X-Trace-Id", "trace-abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers().get("x-trace-id").unwrap(), "trace-abc-123");
    let res = client.get(&unknown).send().await.unwrap();
    let generated = res.headers().get("x-trace-id").unwrap().to_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&generated).is_ok(), "{generated}");
    // The native API is not on this listener, nor this dialect on the native one.
    let res = client.get(format!("{base}/health/ready")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let res = client.get(format!("{}/actuator/health", app.base)).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

on_both_databases!(demo_tokens_are_the_platforms, tokens_are_checked_and_every_answer_is_in_the_envelope);
