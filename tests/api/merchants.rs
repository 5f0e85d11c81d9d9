//! Merchants (docs/spec.md §15), end to end on both databases: the walk-through of
//! docs/merchants.md, merchant API keys refused whole, the order of checks, and the
//! isolation suite — every route of `/openapi.json` against every kind of credential, with
//! no answer ever holding the other merchant's ids.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, json, order_body};
use crate::on_both_databases;

on_both_databases!(a_merchant_walkthrough, keys_are_refused_whole, isolation);

async fn create_merchant(app: &TestApp, admin: &str, code: &str) -> Value {
    let body = json!({ "code": code, "name": format!("{code} Inc."), "timezone": "Asia/Seoul" });
    json(app.post("/api/merchants", admin).json(&body).send().await.unwrap(), StatusCode::CREATED).await
}

async fn create_key(app: &TestApp, admin: &str, merchant: &str, role: &str) -> Value {
    let body = json!({ "name": format!("{role} server"), "role": role });
    let path = format!("/api/merchants/{merchant}/api-keys");
    json(app.post(&path, admin).json(&body).send().await.unwrap(), StatusCode::CREATED).await
}

async fn create_store(app: &TestApp, admin: &str, merchant: &str, code: &str) -> Value {
    let body = json!({ "code": code, "name": code });
    let path = format!("/api/merchants/{merchant}/stores");
    json(app.post(&path, admin).json(&body).send().await.unwrap(), StatusCode::CREATED).await
}

async fn place(app: &TestApp, key: &str, merchant: &str, store: Option<&str>) -> Value {
    let mut body = order_body();
    body["customerId"] = json!("shopper-1");
    if let Some(store) = store {
        body["storeId"] = json!(store);
    }
    let path = format!("/api/merchants/{merchant}/orders");
    json(app.post(&path, key).json(&body).send().await.unwrap(), StatusCode::CREATED).await
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}")).to_owned()
}

async fn a_merchant_walkthrough(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else { return };
    let admin = app.admin_token("ops");
    // Every deployment has DEFAULT, made by the migration.
    let list = json(app.get("/api/merchants", &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(list[0]["code"], "DEFAULT");
    assert_eq!(list[0]["id"], "00000000-0000-0000-0000-000000000001");
    let merchant = create_merchant(&app, &admin, " acme-01 ").await;
    assert_eq!((merchant["code"].as_str(), merchant["status"].as_str()), (Some("ACME-01"), Some("ACTIVE")));
    let again =
        app.post("/api/merchants", &admin).json(&json!({"code": "ACME-01", "name": "x"})).send().await;
    let again = json(again.unwrap(), StatusCode::CONFLICT).await;
    assert_eq!(again["code"], "DUPLICATE_MERCHANT_CODE");
    let id = s(&merchant["id"]);
    // Two creations of one code at once: one merchant, one 409 (the unique index decides).
    let race = |code: &'static str| {
        let body = json!({ "code": code, "name": "Race" });
        app.post("/api/merchants", &admin).json(&body).send()
    };
    let (one, two) = tokio::join!(race("race"), race(" RACE "));
    let mut statuses = [one.unwrap().status(), two.unwrap().status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::CREATED, StatusCode::CONFLICT]);
    let store = create_store(&app, &admin, &id, "gangnam").await;
    assert_eq!((store["code"].as_str(), store["timezone"].as_str()), (Some("GANGNAM"), Some("Asia/Seoul")));
    let dup =
        app.post(&format!("/api/merchants/{id}/stores"), &admin).json(&json!({"code":"GANGNAM","name":"x"}));
    assert_eq!(json(dup.send().await.unwrap(), StatusCode::CONFLICT).await["code"], "DUPLICATE_STORE_CODE");
    let key = create_key(&app, &admin, &id, "ORDERS").await;
    let plain = s(&key["key"]);
    assert!(plain.starts_with(&format!("mk_{}_", s(&key["prefix"]))));
    let order = place(&app, &plain, &id, Some(&s(&store["id"]))).await;
    assert_eq!(order["merchantId"], json!(id));
    assert_eq!(order["storeId"], store["id"]);
    // By id and by number; the list; the flow's events carry the merchant.
    let by_number = format!("/api/merchants/{id}/orders/{}", order["number"]);
    let read = json(app.get(&by_number, &plain).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(read["id"], order["id"]);
    let page =
        json(app.get(&format!("/api/merchants/{id}/orders"), &plain).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let flow_path = format!("/api/merchants/{id}/orders/{}/flow", s(&order["id"]));
    let flow = json(app.get(&flow_path, &plain).send().await.unwrap(), StatusCode::OK).await;
    let event = &flow["events"][0];
    let envelope: Value = serde_json::from_str(event["payload"].as_str().unwrap()).unwrap();
    let payload = &envelope["payload"];
    assert_eq!((&payload["merchantId"], &payload["storeId"]), (&json!(id), &store["id"]), "{event}");
    // The key's last use is recorded; an ORDERS key may not refund (403), an OPERATOR key
    // must name an Idempotency-Key, then refunds.
    let keys =
        json(app.get(&format!("/api/merchants/{id}/api-keys"), &admin).send().await.unwrap(), StatusCode::OK)
            .await;
    assert!(keys[0]["lastUsedAt"].is_string(), "{keys}");
    assert!(keys[0].get("key").is_none() && !keys.to_string().contains(&plain[16..]), "never the key again");
    let refund_path = format!("/api/merchants/{id}/orders/{}/refund", s(&order["id"]));
    let refused = app.post(&refund_path, &plain).header("Idempotency-Key", "r1").send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let operator = s(&create_key(&app, &admin, &id, "OPERATOR").await["key"]);
    let no_key = app.post(&refund_path, &operator).send().await.unwrap();
    assert_eq!(json(no_key, StatusCode::UNPROCESSABLE_ENTITY).await["field"], "Idempotency-Key");
    let refunded = app.post(&refund_path, &operator).header("Idempotency-Key", "r1").send().await.unwrap();
    assert_eq!(json(refunded, StatusCode::OK).await["status"], "CANCELLED");
    // A member: VIEWER reads, may not place; suspension refuses members and keys alike.
    let member_path = format!("/api/merchants/{id}/members/carol");
    let set = app
        .client
        .put(format!("{}{member_path}", app.base))
        .bearer_auth(&admin)
        .json(&json!({"role":"VIEWER"}));
    json(set.send().await.unwrap(), StatusCode::OK).await;
    let carol = app.token("carol");
    json(app.get(&by_number, &carol).send().await.unwrap(), StatusCode::OK).await;
    let carol_places =
        app.post(&format!("/api/merchants/{id}/orders"), &carol).json(&order_body()).send().await;
    assert_eq!(carol_places.unwrap().status(), StatusCode::FORBIDDEN);
    json(app.post(&format!("/api/merchants/{id}/suspend"), &admin).send().await.unwrap(), StatusCode::OK)
        .await;
    for token in [&plain, &carol] {
        assert_eq!(app.get(&by_number, token).send().await.unwrap().status(), StatusCode::FORBIDDEN);
    }
    // Without secrets.key, no merchant may hold a secret.
    let channels = json!({ "settlementWebhook": { "url": "https://hooks.example/s", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" } });
    let put = app
        .client
        .put(format!("{}/api/merchants/{id}/channels", app.base))
        .bearer_auth(&admin)
        .json(&channels);
    assert_eq!(json(put.send().await.unwrap(), StatusCode::CONFLICT).await["code"], "SECRETS_KEY_REQUIRED");
    let default_suspend = app.post("/api/merchants/00000000-0000-0000-0000-000000000001/suspend", &admin);
    assert_eq!(
        json(default_suspend.send().await.unwrap(), StatusCode::CONFLICT).await["code"],
        "INVALID_MERCHANT_STATE"
    );
    // Every change audited with its actor.
    let audit: Vec<(String, String)> = {
        use sea_orm::{ConnectionTrait, Statement};
        let rows = app
            .db
            .query_all_raw(Statement::from_string(
                app.db.get_database_backend(),
                "SELECT action, actor FROM audit_log WHERE entity_type IN ('merchant','store','merchant_member','api_key') ORDER BY id",
            ))
            .await
            .unwrap();
        rows.iter().map(|r| (r.try_get("", "action").unwrap(), r.try_get("", "actor").unwrap())).collect()
    };
    let actions: Vec<&str> = audit.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        actions,
        [
            "MERCHANT_CREATED",
            "MERCHANT_CREATED",
            "STORE_REGISTERED",
            "API_KEY_CREATED",
            "API_KEY_CREATED",
            "MEMBER_SET",
            "MERCHANT_SUSPENDED"
        ]
    );
    assert!(audit.iter().all(|(_, actor)| actor == "ops"), "{audit:?}");
}

async fn keys_are_refused_whole(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else { return };
    let admin = app.admin_token("ops");
    let id = s(&create_merchant(&app, &admin, "KEYS").await["id"]);
    let key = create_key(&app, &admin, &id, "OPERATOR").await;
    let plain = s(&key["key"]);
    let orders = format!("/api/merchants/{id}/orders");
    assert_eq!(app.get(&orders, &plain).send().await.unwrap().status(), StatusCode::OK);
    // One byte changed; a wrong secret behind the right prefix; the right secret behind
    // another prefix; cut short; a key of the right shape no one made.
    let mut off = plain.clone();
    let last = off.pop().unwrap();
    off.push(if last == '0' { '1' } else { '0' });
    let other = s(&create_key(&app, &admin, &id, "VIEWER").await["key"]);
    let wrong_secret = format!("{}{}", &plain[..16], &other[16..]);
    let wrong_prefix = format!("{}{}", &other[..16], &plain[16..]);
    let unknown = format!("mk_{}_{}", "0".repeat(12), "0".repeat(64));
    for bad in [&off, &wrong_secret, &wrong_prefix, &plain[..plain.len() - 1].to_owned(), &unknown] {
        let answer = app.get(&orders, bad).send().await.unwrap();
        assert_eq!(json(answer, StatusCode::UNAUTHORIZED).await["code"], "UNAUTHENTICATED", "{bad}");
    }
    // A key acts only under its merchant's path.
    let native = app.get("/api/orders", &plain).send().await.unwrap();
    assert_eq!(native.status(), StatusCode::FORBIDDEN);
    // Expired (at its expiresAt) and revoked: 401 from the next request on.
    let expiring = create_key(&app, &admin, &id, "ORDERS").await;
    {
        use sea_orm::{ConnectionTrait, Statement};
        let past = chrono::Utc::now() - chrono::Duration::seconds(1);
        app.db
            .execute_raw(Statement::from_sql_and_values(
                app.db.get_database_backend(),
                if backend == Backend::Postgres {
                    "UPDATE merchant_api_keys SET expires_at = $1 WHERE prefix = $2"
                } else {
                    "UPDATE merchant_api_keys SET expires_at = ? WHERE prefix = ?"
                },
                [past.into(), s(&expiring["prefix"]).into()],
            ))
            .await
            .unwrap();
    }
    assert_eq!(
        app.get(&orders, &s(&expiring["key"])).send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let revoke = format!("/api/merchants/{id}/api-keys/{}/revoke", s(&key["id"]));
    let revoked = json(
        app.post(&revoke, &admin).json(&json!({"reason": "leaked"})).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(revoked["revokedAt"].is_string());
    assert_eq!(app.get(&orders, &plain).send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    // The plain key is in no table and no metric: only its prefix and its secret's hash.
    let secret = &plain[16..];
    assert!(!dump_tables(&app).await.contains(secret), "a table holds the key's secret");
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(!metrics.contains(secret) && !metrics.contains(&plain[..16]), "a metric names the key");
}

/// Every row of every table of ours, as text.
async fn dump_tables(app: &TestApp) -> String {
    use sea_orm::{ConnectionTrait, DatabaseBackend, Statement};
    let backend = app.db.get_database_backend();
    let tables_sql = if backend == DatabaseBackend::Postgres {
        "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public'"
    } else {
        "SELECT name FROM sqlite_master WHERE type = 'table'"
    };
    let tables = app.db.query_all_raw(Statement::from_string(backend, tables_sql)).await.unwrap();
    let mut out = String::new();
    for table in tables {
        let name: String = table.try_get("", "name").unwrap();
        let sql = if backend == DatabaseBackend::Postgres {
            format!("SELECT CAST(t AS TEXT) AS row FROM \"{name}\" t")
        } else {
            // Every column, as text, joined.
            let cols = app
                .db
                .query_all_raw(Statement::from_string(
                    backend,
                    format!("SELECT name FROM pragma_table_info('{name}')"),
                ))
                .await
                .unwrap();
            let cols: Vec<String> = cols
                .iter()
                .map(|c| {
                    format!("COALESCE(CAST(\"{}\" AS TEXT), '')", c.try_get::<String>("", "name").unwrap())
                })
                .collect();
            format!("SELECT {} AS row FROM \"{name}\"", cols.join(" || '|' || "))
        };
        for row in app.db.query_all_raw(Statement::from_string(backend, sql)).await.unwrap() {
            out.push_str(&row.try_get::<String>("", "row").unwrap_or_default());
            out.push('\n');
        }
    }
    assert!(out.contains("API_KEY_CREATED"), "the dump reads the tables");
    out
}

/// One merchant's things: what a stranger must never see.
struct Side {
    id: String,
    order: String,
    number: String,
    store: String,
    key_id: String,
    notification: String,
    settlement: String,
}

impl Side {
    fn ids(&self) -> [&str; 6] {
        [&self.id, &self.order, &self.store, &self.key_id, &self.notification, &self.settlement]
    }
}

async fn side(app: &TestApp, admin: &str, code: &str) -> (Side, String) {
    let id = s(&create_merchant(app, admin, code).await["id"]);
    let store = s(&create_store(app, admin, &id, "S1").await["id"]);
    let key = create_key(app, admin, &id, "OPERATOR").await;
    let plain = s(&key["key"]);
    let order = place(app, &plain, &id, Some(&store)).await;
    let side = Side {
        id,
        order: s(&order["id"]),
        number: order["number"].to_string(),
        store,
        key_id: s(&key["id"]),
        notification: s(&order["notification"]["id"]),
        settlement: s(&order["settlement"]["id"]),
    };
    (side, plain)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential {
    Customer,
    Viewer,
    Operator,
    OrdersKey,
    ViewerKey,
    OperatorKey,
    RevokedKey,
    ExpiredKey,
    SuspendedKey,
    PlatformOperator,
}

const CREDENTIALS: [Credential; 10] = [
    Credential::Customer,
    Credential::Viewer,
    Credential::Operator,
    Credential::OrdersKey,
    Credential::ViewerKey,
    Credential::OperatorKey,
    Credential::RevokedKey,
    Credential::ExpiredKey,
    Credential::SuspendedKey,
    Credential::PlatformOperator,
];

/// Every operation of `/openapi.json` under `/api/` that asks for a bearer token.
async fn operations(app: &TestApp) -> Vec<(Method, String)> {
    let doc =
        json(app.client.get(format!("{}/openapi.json", app.base)).send().await.unwrap(), StatusCode::OK)
            .await;
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if path.starts_with("/api/") && op.get("security").is_some() {
                ops.push((method.to_uppercase().parse().unwrap(), path.clone()));
            }
        }
    }
    assert!(
        ops.iter().any(|(_, p)| p == "/api/merchants/{id}/orders/{order}/refund"),
        "the walk sees merchants"
    );
    ops
}

/// What A's own credential gets on A's path when the path's child is B's.
#[derive(Debug, PartialEq, Eq)]
enum Own {
    Forbidden,
    NotThere,
    Answers,
}

/// docs/merchants.md's table: what each route needs, what each credential's role allows.
fn expected_on_own_path(credential: Credential, method: &Method, path: &str) -> Own {
    use orchestrator::domain::merchant::{KeyRole, MemberRole, Need};
    let operator_only = path.contains("/members")
        || path.contains("/api-keys")
        || path.ends_with("/suspend")
        || path.ends_with("/resume")
        || path.ends_with("/channels")
        || (path == "/api/merchants" && *method == Method::POST);
    // An endpoint's secret is an OPERATOR's to read.
    let need = if path.ends_with("/secret") {
        Need::Write
    } else if *method == Method::GET {
        Need::Read
    } else if path.ends_with("/orders") {
        Need::PlaceOrders
    } else {
        Need::Write
    };
    let allowed = match credential {
        Credential::Viewer => MemberRole::Viewer.allows(need),
        Credential::Operator => MemberRole::Operator.allows(need),
        Credential::OrdersKey => KeyRole::Orders.allows(need),
        Credential::ViewerKey => KeyRole::Viewer.allows(need),
        Credential::OperatorKey => KeyRole::Operator.allows(need),
        _ => false,
    };
    let child =
        ["{order}", "{storeId}", "{keyId}", "{eventId}", "{settlementId}", "{subject}", "{endpointId}"]
            .iter()
            .any(|c| path.contains(c));
    match (operator_only, allowed, child) {
        (true, _, _) | (false, false, _) => Own::Forbidden,
        (false, true, true) => Own::NotThere,
        (false, true, false) => Own::Answers,
    }
}

/// `path` with its parameters filled: the merchant `merchant`'s path, children of `child`.
fn fill(path: &str, merchant: &Side, child: &Side, by_number: bool) -> String {
    let order = if by_number { &child.number } else { &child.order };
    path.replace("{id}", if path.starts_with("/api/merchants/") { &merchant.id } else { &child.order })
        .replace("{order}", order)
        .replace("{storeId}", &child.store)
        .replace("{keyId}", &child.key_id)
        .replace("{eventId}", &child.notification)
        .replace("{settlementId}", &child.settlement)
        .replace("{endpointId}", "0000000f-0000-4000-8000-000000000001")
        .replace("{subject}", "carol")
        .replace("{refundId}", &child.order)
}

async fn call(app: &TestApp, method: &Method, path: &str, token: &str) -> (StatusCode, String) {
    let body = if path.ends_with("/members/carol") {
        json!({ "role": "VIEWER" })
    } else if path.ends_with("/orders") || path == "/api/orders" {
        order_body()
    } else if *method == Method::PATCH {
        json!({ "description": "isolation" })
    } else if path.ends_with("/recover") {
        json!({ "since": "2026-01-01T00:00:00Z" })
    } else {
        // A reason: the repairs that require one then answer for their target, not their body.
        json!({ "reason": "isolation" })
    };
    let mut request = app.client.request(method.clone(), format!("{}{path}", app.base)).bearer_auth(token);
    request = request.header("Idempotency-Key", format!("iso-{}", uuid::Uuid::new_v4()));
    if [Method::POST, Method::PUT, Method::PATCH].contains(method) {
        request = request.json(&body);
    }
    let answer = request.send().await.unwrap();
    (answer.status(), answer.text().await.unwrap())
}

async fn isolation(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else { return };
    let admin = app.admin_token("ops");
    let (a, a_key) = side(&app, &admin, "AAA").await;
    let (b, _) = side(&app, &admin, "BBB").await;
    let (c, c_key) = side(&app, &admin, "CCC").await;
    json(app.post(&format!("/api/merchants/{}/suspend", c.id), &admin).send().await.unwrap(), StatusCode::OK)
        .await;
    for (subject, role) in [("viewer-a", "VIEWER"), ("operator-a", "OPERATOR")] {
        let path = format!("{}/api/merchants/{}/members/{subject}", app.base, a.id);
        let set = app.client.put(path).bearer_auth(&admin).json(&json!({ "role": role }));
        json(set.send().await.unwrap(), StatusCode::OK).await;
    }
    let revoked = create_key(&app, &admin, &a.id, "OPERATOR").await;
    let revoke = format!("/api/merchants/{}/api-keys/{}/revoke", a.id, s(&revoked["id"]));
    json(app.post(&revoke, &admin).send().await.unwrap(), StatusCode::OK).await;
    let expired = create_key(&app, &admin, &a.id, "OPERATOR").await;
    {
        use sea_orm::{ConnectionTrait, Statement};
        let sql = format!(
            "UPDATE merchant_api_keys SET revoked_at = NULL, expires_at = created_at WHERE prefix = '{}'",
            s(&expired["prefix"])
        );
        app.db.execute_raw(Statement::from_string(app.db.get_database_backend(), sql)).await.unwrap();
    }
    let orders_key = s(&create_key(&app, &admin, &a.id, "ORDERS").await["key"]);
    let viewer_key = s(&create_key(&app, &admin, &a.id, "VIEWER").await["key"]);
    let token = |credential: Credential| match credential {
        Credential::Customer => app.token("shopper-1"),
        Credential::Viewer => app.token("viewer-a"),
        Credential::Operator => app.token("operator-a"),
        Credential::OrdersKey => orders_key.clone(),
        Credential::ViewerKey => viewer_key.clone(),
        Credential::OperatorKey => a_key.clone(),
        Credential::RevokedKey => s(&revoked["key"]),
        Credential::ExpiredKey => s(&expired["key"]),
        Credential::SuspendedKey => c_key.clone(),
        Credential::PlatformOperator => admin.clone(),
    };
    let ops = operations(&app).await;
    let mut checked = 0;
    for credential in CREDENTIALS {
        let bearer = token(credential);
        for (method, path) in &ops {
            // B's path, B's children; then A's path with B's children.
            for (merchant, by_number) in [(&b, false), (&a, false), (&a, true)] {
                let url = fill(path, merchant, &b, by_number);
                let (status, body) = call(&app, method, &url, &bearer).await;
                checked += 1;
                let what = format!("{credential:?} {method} {url}: {status} {body}");
                assert!(status != StatusCode::INTERNAL_SERVER_ERROR, "{what}");
                let merchant_path = path.starts_with("/api/merchants");
                if matches!(credential, Credential::RevokedKey | Credential::ExpiredKey) {
                    // Looked up under a merchant's path; refused as presented anywhere else.
                    let expected =
                        if merchant_path { StatusCode::UNAUTHORIZED } else { StatusCode::FORBIDDEN };
                    assert_eq!(status, expected, "{what}");
                    continue;
                }
                if credential == Credential::PlatformOperator {
                    continue;
                }
                let key = matches!(
                    credential,
                    Credential::OrdersKey
                        | Credential::ViewerKey
                        | Credential::OperatorKey
                        | Credential::SuspendedKey
                );
                if key && !merchant_path {
                    assert_eq!(status, StatusCode::FORBIDDEN, "a key outside its merchant's path: {what}");
                }
                // The list of merchants answers everyone with theirs (none of B's: below).
                let listing = path == "/api/merchants" && *method == Method::GET;
                if merchant_path
                    && !listing
                    && (merchant.id == b.id
                        || credential == Credential::SuspendedKey
                        || credential == Credential::Customer)
                {
                    assert_eq!(status, StatusCode::FORBIDDEN, "{what}");
                    let problem: Value = serde_json::from_str(&body).unwrap();
                    assert_eq!(problem["code"], "FORBIDDEN", "{what}");
                } else if merchant_path && !listing && merchant.id == a.id {
                    // A's own credential on A's path, B's child: 403 unless its role may,
                    // then 404 for the child; a route with no child answers (no 401/403).
                    let expected = expected_on_own_path(credential, method, path);
                    match expected {
                        Own::Forbidden => assert_eq!(status, StatusCode::FORBIDDEN, "{what}"),
                        Own::NotThere => assert_eq!(status, StatusCode::NOT_FOUND, "{what}"),
                        Own::Answers => assert!(
                            !matches!(
                                status,
                                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND
                            ),
                            "{what}"
                        ),
                    }
                }
                for id in b.ids() {
                    assert!(!body.contains(id), "B's {id} in the answer: {what}");
                }
            }
        }
    }
    assert!(checked > 300, "{checked} calls");
    // The same invariant over random (credential, route, target) triples, targets mixing
    // both merchants' ids in every parameter.
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for _ in 0..150 {
        // Every credential but the platform operator's, which may see every merchant.
        let credential = CREDENTIALS[next(CREDENTIALS.len() - 1)];
        let (method, path) = &ops[next(ops.len())];
        let merchant = [&a, &b][next(2)];
        let url = fill(path, merchant, &b, next(2) == 0);
        let (status, body) = call(&app, method, &url, &token(credential)).await;
        let what = format!("{credential:?} {method} {url}: {status} {body}");
        assert!(status != StatusCode::INTERNAL_SERVER_ERROR, "{what}");
        for id in b.ids() {
            assert!(!body.contains(id), "B's {id} in the answer: {what}");
        }
    }
}

on_both_databases!(a_previous_release_migrates_to_default);

/// A database made by the release before merchants, with an order in every state, migrates
/// to every order `DEFAULT`'s and nothing else changed; a row an older release still writes
/// (naming no merchant) is `DEFAULT`'s too.
async fn a_previous_release_migrates_to_default(backend: Backend) {
    use migrations::{Migrator, MigratorTrait};
    use sea_orm::{ConnectionTrait, Statement};
    let Some(test_db) = crate::helpers::TestDb::create(backend).await else { return };
    let db = orchestrator::adapters::persistence::connect(&test_db.url, 4).await.unwrap();
    let before = Migrator::migrations()
        .iter()
        .position(|m| m.name() == "m20261209_000026_merchants")
        .expect("the merchants migration is listed") as u32;
    Migrator::up(&db, Some(before)).await.unwrap();
    let postgres = backend == Backend::Postgres;
    let uuid = |n: usize| {
        let id = format!("0000000c-0000-4000-8000-{n:012}");
        if postgres { format!("'{id}'") } else { format!("x'{}'", id.replace('-', "")) }
    };
    let statuses = [
        "CREATED",
        "AWAITING_PAYMENT",
        "PAYMENT_APPROVED",
        "SETTLEMENT_REQUESTED",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "PENDING_CONFIRMATION",
    ];
    let insert = |n: usize, status: &str| {
        format!(
            "INSERT INTO orders (id, customer_id, source, currency, total_amount, status, created_at, updated_at, version, saga_resumes, number) \
             VALUES ({}, 'alice', 'API', 'KRW', {}, '{status}', '2026-12-01 10:00:00+00:00', '2026-12-01 10:00:00+00:00', 3, 0, {n})",
            uuid(n),
            1000 * n
        )
    };
    for (n, status) in statuses.iter().enumerate() {
        db.execute_unprepared(&insert(n + 1, status)).await.unwrap();
    }
    let snapshot = async |db: &sea_orm::DatabaseConnection| -> Vec<String> {
        let sql = "SELECT status, total_amount, number, version, customer_id FROM orders ORDER BY number";
        let rows = db.query_all_raw(Statement::from_string(db.get_database_backend(), sql)).await.unwrap();
        rows.iter()
            .map(|r| {
                let status: String = r.try_get("", "status").unwrap();
                let total: i64 = r.try_get("", "total_amount").unwrap();
                let number: i64 = r.try_get("", "number").unwrap();
                let version: i64 = r.try_get("", "version").unwrap();
                let customer: String = r.try_get("", "customer_id").unwrap();
                format!("{status} {total} {number} {version} {customer}")
            })
            .collect()
    };
    let was = snapshot(&db).await;
    Migrator::up(&db, None).await.unwrap();
    assert_eq!(snapshot(&db).await, was, "nothing else changed");
    // What an older release writes after the migration: no merchant named.
    db.execute_unprepared(&insert(99, "CREATED")).await.unwrap();
    let default = if postgres {
        "'00000000-0000-0000-0000-000000000001'".to_owned()
    } else {
        "x'00000000000000000000000000000001'".to_owned()
    };
    let count = |sql: String| {
        let db = &db;
        async move {
            let row = db
                .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
                .await
                .unwrap()
                .unwrap();
            row.try_get::<i64>("", "n").unwrap()
        }
    };
    let owned =
        format!("SELECT COUNT(*) AS n FROM orders WHERE merchant_id = {default} AND store_id IS NULL");
    assert_eq!(count(owned).await, statuses.len() as i64 + 1);
    assert_eq!(count("SELECT COUNT(*) AS n FROM orders".to_owned()).await, statuses.len() as i64 + 1);
    let merchant = format!(
        "SELECT COUNT(*) AS n FROM merchants WHERE id = {default} AND code = 'DEFAULT' AND status = 'ACTIVE'"
    );
    assert_eq!(count(merchant).await, 1);
    // The service reads them as DEFAULT's.
    drop(db);
    let app = TestApp::spawn_on_database(test_db, &[], None).await;
    let admin = app.admin_token("ops");
    let page = json(app.get("/api/orders?limit=100", &admin).send().await.unwrap(), StatusCode::OK).await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), statuses.len() + 1);
    assert!(
        items
            .iter()
            .all(|o| o["merchantId"] == "00000000-0000-0000-0000-000000000001" && o["storeId"].is_null())
    );
}

on_both_databases!(repairs_and_the_daily_report);

/// A merchant's notification repairs under its path (a `VIEWER` reads, an `OPERATOR`
/// repairs, another merchant's is not there) and its daily report in its timezone.
async fn repairs_and_the_daily_report(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else { return };
    let admin = app.admin_token("ops");
    let (a, a_key) = side(&app, &admin, "REPAIR-A").await;
    let (b, _) = side(&app, &admin, "REPAIR-B").await;
    let viewer = s(&create_key(&app, &admin, &a.id, "VIEWER").await["key"]);
    // An order whose notification waits for an operator.
    let mut body = order_body();
    body["storeId"] = json!(a.store);
    let waiting = app
        .post(&format!("/api/merchants/{}/orders", a.id), &a_key)
        .header("X-Mock-Scenario", "notification=manual")
        .json(&body)
        .send()
        .await
        .unwrap();
    let waiting = json(waiting, StatusCode::CREATED).await;
    let event = s(&waiting["notification"]["id"]);
    let list = format!("/api/merchants/{}/notification-events?status=MANUAL_INTERVENTION_REQUIRED", a.id);
    let listed = json(app.get(&list, &viewer).send().await.unwrap(), StatusCode::OK).await;
    let ids: Vec<&str> =
        listed["items"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [event.as_str()], "only this merchant's: {listed}");
    let reprocess = format!("/api/merchants/{}/notification-events/{event}/reprocess", a.id);
    assert_eq!(app.post(&reprocess, &viewer).send().await.unwrap().status(), StatusCode::FORBIDDEN);
    let foreign = format!("/api/merchants/{}/notification-events/{}/reprocess", a.id, b.notification);
    assert_eq!(app.post(&foreign, &a_key).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    let repaired = json(app.post(&reprocess, &a_key).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(repaired["status"], "COMPLETED");
    let settlements = format!("/api/merchants/{}/settlements", a.id);
    let listed = json(app.get(&settlements, &viewer).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 2, "A's two orders' settlements: {listed}");
    assert!(!listed.to_string().contains(&b.settlement));
    // A partial refund, then the day's report: two orders of A's store, 60 000 gross.
    let refund = format!("/api/merchants/{}/orders/{}/refund", a.id, a.order);
    let refunded = app
        .post(&refund, &a_key)
        .header("Idempotency-Key", "part")
        .json(&json!({"amount": 5000}))
        .send()
        .await;
    json(refunded.unwrap(), StatusCode::OK).await;
    let today = chrono::Utc::now().with_timezone(&chrono_tz::Asia::Seoul).date_naive();
    let report = format!("/api/merchants/{}/reports/daily?date={today}", a.id);
    let report = json(app.get(&report, &viewer).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(report["timezone"], "Asia/Seoul");
    let total = &report["total"][0];
    assert_eq!(
        (&total["currency"], &total["orders"], &total["gross"], &total["refunds"], &total["net"]),
        (&json!("KRW"), &json!(2), &json!(60000), &json!(5000), &json!(55000)),
        "{report}"
    );
    assert_eq!(report["stores"][0]["storeId"], json!(a.store));
    assert!(total["fees"].is_null(), "no provider settlement yet: {report}");
    assert!(!report.to_string().contains(&b.id), "{report}");
    let bad = format!("/api/merchants/{}/reports/daily?date=06-12-2026", a.id);
    assert_eq!(
        json(app.get(&bad, &viewer).send().await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await["field"],
        "date"
    );
}

on_both_databases!(the_doors_orders_are_their_configured_merchants);

/// `http.dialects.commerce.merchant` names the merchant the commerce dialect's orders are:
/// its users see that merchant's orders and no other's; a code that names no merchant
/// refuses the start, naming the key.
async fn the_doors_orders_are_their_configured_merchants(backend: Backend) {
    use sea_orm::ConnectionTrait;
    let Some(test_db) = crate::helpers::TestDb::create(backend).await else { return };
    let db = test_db.connect().await;
    let id = "0000000d-0000-4000-8000-000000000001";
    let literal =
        if backend == Backend::Postgres { format!("'{id}'") } else { format!("x'{}'", id.replace('-', "")) };
    let now = if backend == Backend::Postgres { "CURRENT_TIMESTAMP" } else { "'2026-12-06 00:00:00+00:00'" };
    db.execute_unprepared(&format!(
        "INSERT INTO merchants (id, code, name, status, timezone, created_at, updated_at, version) \
         VALUES ({literal}, 'SHOP', 'Shop', 'ACTIVE', 'UTC', {now}, {now}, 0)"
    ))
    .await
    .unwrap();
    let settings = |merchant: &'static str| {
        [
            ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
            (
                "APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET",
                "commerce-orchestration-demo-secret-key-2026-commerce-orchestrati",
            ),
            ("APP__HTTP__DIALECTS__COMMERCE__DEMO_TOKEN", "true"),
            ("APP__HTTP__DIALECTS__COMMERCE__MERCHANT", merchant),
        ]
    };
    let refused =
        orchestrator::startup::Application::build(crate::helpers::settings(&test_db, &settings("NOBODY")))
            .await;
    let refused = refused.err().expect("a code that names no merchant refuses the start").to_string();
    assert!(refused.contains("http.dialects.commerce.merchant") && refused.contains("NOBODY"), "{refused}");
    drop(db);
    let app = TestApp::spawn_on_database(test_db, &settings("shop"), None).await;
    let base = app.commerce.clone().expect("the dialect listens");
    let minted: Value = app
        .client
        .post(format!("{base}/api/auth/token"))
        .json(&json!({ "username": "clerk" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = minted["data"]["accessToken"].as_str().unwrap().to_owned();
    let body = json!({ "customerId": "c-1", "totalAmount": 12000, "currency": "KRW", "description": "d" });
    let created: Value = app
        .client
        .post(format!("{base}/api/orders"))
        .bearer_auth(&token)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let number = created["data"]["orderId"].as_i64().unwrap_or_else(|| panic!("{created}"));
    let admin = app.admin_token("ops");
    let native =
        json(app.get(&format!("/api/orders/{number}"), &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(native["merchantId"], id, "{native}");
    // A DEFAULT order is not the dialect's to read.
    let default =
        json(app.place_order(&app.token("c-2"), &order_body(), None).await, StatusCode::CREATED).await;
    let read = app
        .client
        .get(format!("{base}/api/orders/{}", default["number"]))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::NOT_FOUND, "{}", read.text().await.unwrap());
}

on_both_databases!(a_merchants_own_channels_are_sealed_and_used);

/// 32 bytes, base64: `secrets.key` of the tests.
const SECRETS_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const NEW_SECRETS_KEY: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

/// A merchant's own settlement and notification webhooks: set by the platform operator,
/// stored sealed (no table holds the URL or the secret), never answered back, used for its
/// orders only (signed with its secret), and sealed again under a new `secrets.key` by
/// `app secrets rotate`.
async fn a_merchants_own_channels_are_sealed_and_used(backend: Backend) {
    use crate::channels::{Receiver, SECRETS};
    let Some(receiver) = Receiver::start(&SECRETS[..1]) else { return };
    let Some(app) = TestApp::spawn_with(backend, &[("APP__SECRETS__KEY", SECRETS_KEY)]).await else { return };
    let admin = app.admin_token("ops");
    let id = s(&create_merchant(&app, &admin, "OWN").await["id"]);
    let url = format!("{}/hooks/own?token=own-channel-token", receiver.url);
    let channels = json!({
        "settlementWebhook": { "url": url, "secret": SECRETS[0] },
        "notificationWebhook": { "url": url, "secret": SECRETS[0] },
    });
    let path = format!("{}/api/merchants/{id}/channels", app.base);
    let set = app.client.put(&path).bearer_auth(&admin).json(&channels).send().await.unwrap();
    let set = json(set, StatusCode::OK).await;
    assert_eq!(
        (&set["settlementWebhook"], &set["notificationWebhook"]),
        (&json!(true), &json!(true)),
        "{set}"
    );
    let read = json(app.client.get(&path).bearer_auth(&admin).send().await.unwrap(), StatusCode::OK).await;
    assert!(
        !read.to_string().contains("own-channel-token") && !read.to_string().contains(&SECRETS[0][6..]),
        "{read}"
    );
    let bad = json!({ "settlementWebhook": { "url": "ftp://x", "secret": SECRETS[0] } });
    let refused = app.client.put(&path).bearer_auth(&admin).json(&bad).send().await.unwrap();
    assert_eq!(json(refused, StatusCode::UNPROCESSABLE_ENTITY).await["field"], "settlementWebhook.url");
    let key = s(&create_key(&app, &admin, &id, "ORDERS").await["key"]);
    // A key of the merchant may not set its channels.
    let by_key = app.client.put(&path).bearer_auth(&key).json(&channels).send().await.unwrap();
    assert_eq!(by_key.status(), StatusCode::FORBIDDEN);
    let order = place(&app, &key, &id, None).await;
    assert_eq!(order["status"], "COMPLETED", "{order}");
    let ours = |deliveries: &[Value]| {
        deliveries.iter().filter(|d| d["body"]["orderId"] == order["id"]).cloned().collect::<Vec<_>>()
    };
    let delivered = ours(&receiver.deliveries().await);
    assert_eq!(delivered.len(), 2, "its settlement and its notification: {delivered:?}");
    assert!(delivered.iter().all(|d| d["verified"] == json!([0])), "signed with its secret: {delivered:?}");
    // A DEFAULT order goes the deployment's way (simulated): nothing more arrives.
    let before = receiver.deliveries().await.len();
    json(app.place_order(&app.token("c-9"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(receiver.deliveries().await.len(), before);
    let dump = dump_tables(&app).await;
    assert!(
        !dump.contains("own-channel-token") && !dump.contains(&SECRETS[0][6..]),
        "a table holds the channel open"
    );
    // Rotation: the old key becomes secrets.previous_key, the new one secrets.key.
    let rotate = |key: &str, previous: Option<&str>| {
        let dir = crate::cli::temp_dir();
        let mut cmd = crate::cli::app(&dir.0);
        cmd.env("APP__DATABASE__URL", app.database_url())
            .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
            .env("APP__SECRETS__KEY", key)
            .args(["secrets", "rotate"]);
        if let Some(previous) = previous {
            cmd.env("APP__SECRETS__PREVIOUS_KEY", previous);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let sealed_key = || async {
        use sea_orm::{ConnectionTrait, Statement};
        let row = app
            .db
            .query_one_raw(Statement::from_string(
                app.db.get_database_backend(),
                "SELECT key_id FROM merchant_channels",
            ))
            .await
            .unwrap()
            .unwrap();
        row.try_get::<String>("", "key_id").unwrap()
    };
    let old = sealed_key().await;
    assert_eq!(rotate(NEW_SECRETS_KEY, Some(SECRETS_KEY))["resealed"], 1);
    assert_ne!(sealed_key().await, old, "sealed under the new key");
    assert_eq!(rotate(NEW_SECRETS_KEY, None)["resealed"], 0, "nothing left under the old key");
}

on_both_databases!(a_registrations_order_is_the_configured_merchants);

/// `meetings.merchant`: the meeting service's registrations are that merchant's orders, and
/// its events say so.
async fn a_registrations_order_is_the_configured_merchants(backend: Backend) {
    use sea_orm::ConnectionTrait;
    let Some(test_db) = crate::helpers::TestDb::create(backend).await else { return };
    let db = test_db.connect().await;
    let id = "0000000e-0000-4000-8000-000000000001";
    let literal =
        if backend == Backend::Postgres { format!("'{id}'") } else { format!("x'{}'", id.replace('-', "")) };
    let now = if backend == Backend::Postgres { "CURRENT_TIMESTAMP" } else { "'2026-12-06 00:00:00+00:00'" };
    db.execute_unprepared(&format!(
        "INSERT INTO merchants (id, code, name, status, timezone, created_at, updated_at, version) \
         VALUES ({literal}, 'MEETUP', 'Meetup', 'ACTIVE', 'Asia/Seoul', {now}, {now}, 0)"
    ))
    .await
    .unwrap();
    drop(db);
    let Some((app, _broker, meeting, _workers)) =
        crate::meeting::start_on(test_db, &[("APP__MEETINGS__MERCHANT", "meetup")]).await
    else {
        return;
    };
    let body = crate::meeting::registered("ev-m-1", "m-9", "u-merchant", 5000);
    meeting.publish("meeting.participant.registered", &body, None).await;
    let orders = crate::meeting::settled(&app, "u-merchant").await;
    assert_eq!(orders[0]["merchantId"], id, "{:?}", orders[0]);
    let admin = app.admin_token("ops");
    let listed = format!("/api/merchants/{id}/orders");
    let page = json(app.get(&listed, &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(page["items"][0]["id"], orders[0]["id"]);
}
