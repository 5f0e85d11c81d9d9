//! Tokens from an identity provider (`auth.jwks_url`): verified with the provider's
//! published key set served by wiremock — RS256, ES256 and EdDSA keys, roles at a dotted
//! path, issuer and audience checked, rotation, an unknown `kid`, the provider down at start
//! and later. Static `auth.keys` of every algorithm sign and verify too.

use std::time::Duration;

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::StatusCode;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::helpers::{Backend, TestApp};

const ISSUER: &str = "https://idp.example/realms/shop";
const AUDIENCE: &str = "orders-api";

fn fixture(name: &str) -> Vec<u8> {
    let file = format!("{}/tests/fixtures/keys/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// A test key pair: its private key signs, its public JWK goes into the provider's set.
struct TestKey {
    kid: &'static str,
    alg: Algorithm,
    encoding: EncodingKey,
}

impl TestKey {
    fn load(kid: &'static str, file: &str, alg: Algorithm) -> TestKey {
        let pem = fixture(file);
        let encoding = match alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem),
            Algorithm::ES256 => EncodingKey::from_ec_pem(&pem),
            _ => EncodingKey::from_ed_pem(&pem),
        }
        .expect("fixture key parses");
        TestKey { kid, alg, encoding }
    }

    fn jwk(&self) -> Jwk {
        let mut jwk = Jwk::from_encoding_key(&self.encoding, self.alg).expect("public JWK");
        jwk.common.key_id = Some(self.kid.to_owned());
        jwk
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.to_owned());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("sign")
    }
}

fn rsa1() -> TestKey {
    TestKey::load("rsa-2026-11", "rsa1.pem", Algorithm::RS256)
}
fn rsa2() -> TestKey {
    TestKey::load("rsa-2026-12", "rsa2.pem", Algorithm::RS256)
}
fn ec() -> TestKey {
    TestKey::load("ec-1", "ec.pem", Algorithm::ES256)
}
fn ed() -> TestKey {
    TestKey::load("ed-1", "ed.pem", Algorithm::EdDSA)
}

/// Claims as Keycloak issues them: roles under `realm_access.roles`.
fn claims(sub: &str, roles: &[&str]) -> Value {
    let now = chrono::Utc::now().timestamp();
    json!({
        "sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300,
        "realm_access": { "roles": roles }, "preferred_username": sub
    })
}

async fn serve_keys(server: &MockServer, keys: &[&TestKey]) {
    server.reset().await;
    let mut set = serde_json::to_value(JwkSet { keys: keys.iter().map(|k| k.jwk()).collect() }).unwrap();
    // Providers publish keys we cannot use (other types, encryption keys): they never hide the rest.
    set["keys"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "kty": "post-quantum", "kid": "pq-1", "alg": "ML-DSA-65" }));
    Mock::given(method("GET"))
        .and(path("/certs"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&set))
        .mount(server)
        .await;
}

async fn provider_down(server: &MockServer) {
    server.reset().await;
    Mock::given(method("GET"))
        .and(path("/certs"))
        .respond_with(ResponseTemplate::new(503))
        .mount(server)
        .await;
}

/// The app on the manual clock: the key set's refresh intervals pass when a test advances it.
async fn spawn(server: &MockServer, refresh: &str) -> TestApp {
    let url = format!("{}/certs", server.uri());
    TestApp::spawn_on_manual_clock(
        Backend::Sqlite,
        &[
            ("APP__AUTH__JWKS_URL", &url),
            ("APP__AUTH__ISSUER", ISSUER),
            ("APP__AUTH__AUDIENCE", AUDIENCE),
            ("APP__AUTH__ROLES_CLAIM", "realm_access.roles"),
            ("APP__AUTH__JWKS_REFRESH_INTERVAL", refresh),
        ],
    )
    .await
    .expect("SQLite is always there")
}

async fn status(app: &TestApp, route: &str, token: &str) -> (StatusCode, Value) {
    let response = app.get(route, token).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn fetches(server: &MockServer) -> usize {
    server.received_requests().await.unwrap_or_default().len()
}

#[tokio::test]
async fn tokens_from_an_identity_provider_verify_with_its_published_keys() {
    let server = MockServer::start().await;
    let (rsa, ec, ed) = (rsa1(), ec(), ed());
    serve_keys(&server, &[&rsa, &ec, &ed]).await;
    let app = spawn(&server, "1m").await;
    for key in [&rsa, &ec, &ed] {
        let admin = key.sign(&claims("ops-1", &["admin", "offline_access"]));
        let (code, body) = status(&app, "/api/admin/outbox/stats", &admin).await;
        assert_eq!(code, StatusCode::OK, "{:?} admin: {body}", key.alg);
        let customer = key.sign(&claims("alice", &["offline_access"]));
        assert_eq!(status(&app, "/api/orders", &customer).await.0, StatusCode::OK, "{:?} customer", key.alg);
        assert_eq!(status(&app, "/api/admin/outbox/stats", &customer).await.0, StatusCode::FORBIDDEN);
    }
    let mut wrong_issuer = claims("alice", &[]);
    wrong_issuer["iss"] = json!("https://evil.example");
    let (code, body) = status(&app, "/api/orders", &rsa.sign(&wrong_issuer)).await;
    assert_eq!((code, body["detail"].as_str()), (StatusCode::UNAUTHORIZED, Some("wrong issuer")));
    let mut wrong_audience = claims("alice", &[]);
    wrong_audience["aud"] = json!("another-api");
    let (code, body) = status(&app, "/api/orders", &rsa.sign(&wrong_audience)).await;
    assert_eq!((code, body["detail"].as_str()), (StatusCode::UNAUTHORIZED, Some("wrong audience")));
    let mut no_audience = claims("alice", &[]);
    no_audience.as_object_mut().unwrap().remove("aud");
    assert_eq!(status(&app, "/api/orders", &rsa.sign(&no_audience)).await.0, StatusCode::UNAUTHORIZED);
    // Roles elsewhere than the configured path grant nothing.
    let mut top_level_roles = claims("mallory", &[]);
    top_level_roles["roles"] = json!(["admin"]);
    assert_eq!(
        status(&app, "/api/admin/outbox/stats", &rsa.sign(&top_level_roles)).await.0,
        StatusCode::FORBIDDEN
    );
    // A token naming the RSA key's kid but signed with the EC key fails (no algorithm confusion).
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(rsa.kid.to_owned());
    let forged = jsonwebtoken::encode(&header, &claims("mallory", &["admin"]), &ec.encoding).unwrap();
    assert_eq!(status(&app, "/api/orders", &forged).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(fetches(&server).await, 1, "one fetch at start, then the cache");
}

#[tokio::test]
async fn a_rotated_key_is_fetched_on_its_first_token_and_unknown_kids_fetch_at_most_once_a_minute() {
    let server = MockServer::start().await;
    let (old, new) = (rsa1(), rsa2());
    serve_keys(&server, &[&old]).await;
    let app = spawn(&server, "1m").await;
    assert_eq!(status(&app, "/api/orders", &old.sign(&claims("alice", &[]))).await.0, StatusCode::OK);

    // The provider rotates: the next token names a kid the cache lacks → one fetch.
    serve_keys(&server, &[&new]).await;
    assert_eq!(status(&app, "/api/orders", &new.sign(&claims("alice", &[]))).await.0, StatusCode::OK);
    assert_eq!(fetches(&server).await, 1, "fetched again for the new kid");
    // The set replaced the cache: the withdrawn key no longer verifies.
    assert_eq!(
        status(&app, "/api/orders", &old.sign(&claims("alice", &[]))).await.0,
        StatusCode::UNAUTHORIZED
    );

    // A flood of made-up kids costs the provider nothing more within the minute.
    for i in 0..20 {
        let forged = TestKey { kid: Box::leak(format!("made-up-{i}").into_boxed_str()), ..rsa1() };
        let (code, body) = status(&app, "/api/orders", &forged.sign(&claims("mallory", &["admin"]))).await;
        assert_eq!((code, body["detail"].as_str()), (StatusCode::UNAUTHORIZED, Some("unknown signing key")));
    }
    assert_eq!(fetches(&server).await, 1, "unknown kids within the refresh interval fetch nothing");
}

#[tokio::test]
async fn the_provider_down_at_start_and_later_costs_availability_never_a_wrong_answer() {
    let server = MockServer::start().await;
    let key = rsa1();
    provider_down(&server).await;
    let app = spawn(&server, "1s").await;
    let live = app.client.get(format!("{}/health/live", app.base)).send().await.unwrap();
    assert_eq!(live.status(), StatusCode::OK, "the service starts without its identity provider");
    let token = key.sign(&claims("alice", &[]));
    let response = app.get("/api/orders", &token).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(response.json::<Value>().await.unwrap()["code"], "AUTH_UNAVAILABLE");

    // The provider comes back: within the retry window the failure stands (the provider is
    // not hammered); once it has passed, the next token fetches.
    serve_keys(&server, &[&key]).await;
    assert_eq!(status(&app, "/api/orders", &token).await.0, StatusCode::SERVICE_UNAVAILABLE);
    app.advance(Duration::from_secs(2));
    assert_eq!(
        status(&app, "/api/orders", &token).await.0,
        StatusCode::OK,
        "fetched once the provider answers"
    );

    // Down again: cached keys keep verifying; a kid we lack cannot be looked up → 503.
    provider_down(&server).await;
    app.advance(Duration::from_secs(2));
    assert_eq!(status(&app, "/api/orders", &token).await.0, StatusCode::OK, "the cache outlives an outage");
    let rotated = rsa2().sign(&claims("alice", &[]));
    assert_eq!(status(&app, "/api/orders", &rotated).await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(fetches(&server).await, 1, "one attempt for the unknown kid");
}

#[tokio::test]
async fn static_keys_of_every_algorithm_sign_and_verify() {
    use orchestrator::adapters::http::auth::JwtKeys;
    use orchestrator::config::Settings;
    for (alg, file) in [("RS256", "rsa1"), ("ES256", "ec"), ("EdDSA", "ed")] {
        let pem = |name: &str| String::from_utf8(fixture(name)).unwrap();
        let keys = json!([{
            "kid": "k1", "algorithm": alg,
            "private_key": pem(&format!("{file}.pem")), "public_key": pem(&format!("{file}.pub.pem"))
        }]);
        let settings = Settings::load_from(
            None,
            vec![
                ("APP__AUTH__KEYS".into(), keys.to_string()),
                ("APP__AUTH__AUDIENCE".into(), AUDIENCE.into()),
            ],
        )
        .unwrap_or_else(|e| panic!("{alg}: {e}"));
        let jwt = JwtKeys::from_settings(&settings.auth).unwrap_or_else(|e| panic!("{alg}: {e}"));
        let token = jwt.mint("alice", &["admin".into()], Duration::from_secs(60)).expect("mint");
        let actor = jwt.verify(&token).await.unwrap_or_else(|e| panic!("{alg}: {e:?}"));
        assert_eq!((actor.subject.as_str(), actor.is_admin), ("alice", true), "{alg}");
    }
}
