//! `bench merchants`: orders through a merchant API key (`POST /api/merchants/{id}/orders`,
//! docs/merchants.md) against the native token path (`POST /api/orders`), in one run on one
//! server and database; then the key path again with 1 000 merchants of 10 keys each
//! beside it. A key is read from its row on every request and checked against its hash; its
//! `lastUsedAt` is written at most once a minute — the run counts the key table's updates
//! (`pg_stat_user_tables.n_tup_upd`) to show it.

use std::time::{Duration, Instant};

use orchestrator::startup;
use sea_orm::{ConnectionTrait, Statement};
use serde_json::{Value, json};

use crate::fixture::*;

struct Run {
    rate: f64,
    p50: f64,
    p99: f64,
    errors: usize,
}

/// One order: `Some(ms)` when it completed.
async fn one(client: &reqwest::Client, url: &str, bearer: &str) -> Option<f64> {
    let started = Instant::now();
    let body = json!({ "customerId": "bench-customer", "currency": "KRW", "items": [{ "sku": "TICKET-STD", "quantity": 1, "unitPrice": 12000 }] });
    let res = client.post(url).bearer_auth(bearer).json(&body).send().await.ok()?;
    let order: Value = res.json().await.ok()?;
    (order["status"] == "COMPLETED").then(|| started.elapsed().as_secs_f64() * 1000.0)
}

/// 30 orders to warm up, then `clients` closed-loop callers for `seconds`.
async fn run(url: String, bearer: String, clients: usize, seconds: u64) -> Result<Run, BoxError> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
    for _ in 0..30 {
        one(&client, &url, &bearer).await;
    }
    let (all, errors) = crate::orders::closed_loop(clients, seconds, move || {
        let (client, url, bearer) = (client.clone(), url.clone(), bearer.clone());
        async move {
            match one(&client, &url, &bearer).await {
                Some(ms) => (true, ms),
                None => (false, 0.0),
            }
        }
    })
    .await?;
    Ok(Run {
        rate: all.len() as f64 / seconds as f64,
        p50: percentile(&all, 50.0),
        p99: percentile(&all, 99.0),
        errors,
    })
}

/// Rows updated in `merchant_api_keys` so far.
async fn key_updates(db: &sea_orm::DatabaseConnection) -> Result<i64, BoxError> {
    let row = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT n_tup_upd AS n FROM pg_stat_user_tables WHERE relname = 'merchant_api_keys'",
        ))
        .await?
        .ok_or("no statistics for merchant_api_keys")?;
    Ok(row.try_get("", "n")?)
}

/// 1 000 merchants with 10 keys each, made by SQL (their keys are never presented; their
/// rows only have to be there).
async fn crowd(db: &sea_orm::DatabaseConnection) -> Result<(), BoxError> {
    db.execute_unprepared(
        "INSERT INTO merchants (id, code, name, status, timezone, created_at, updated_at, version) \
         SELECT md5('m' || i)::uuid, 'CROWD-' || i, 'Crowd ' || i, 'ACTIVE', 'UTC', now(), now(), 0 \
         FROM generate_series(1, 1000) i",
    )
    .await?;
    db.execute_unprepared(
        "INSERT INTO merchant_api_keys (id, merchant_id, name, role, prefix, secret_hash, created_at) \
         SELECT md5('k' || i || '-' || k)::uuid, md5('m' || i)::uuid, 'key ' || k, 'ORDERS', \
                substr(md5('p' || i || '-' || k), 1, 12), md5('s' || i || '-' || k) || md5('t' || i || '-' || k), now() \
         FROM generate_series(1, 1000) i, generate_series(1, 10) k",
    )
    .await?;
    db.execute_unprepared("ANALYZE merchants; ANALYZE merchant_api_keys").await?;
    Ok(())
}

fn row(name: &str, r: &Run) -> String {
    format!("| {name} | {:.0} | {:.1} | {:.1} | {} |", r.rate, r.p50, r.p99, r.errors)
}

pub(crate) async fn merchants_scenario(clients: usize, seconds: u64) -> Result<(), BoxError> {
    let fixture = Fixture::create().await?;
    let result = async {
        let env = [("APP__BROKER__KIND", "log"), ("APP__LOG__FORMAT", "json")];
        let app = startup::Application::build(fixture.settings(&env)?).await.map_err(|e| e.to_string())?;
        let base = format!("http://127.0.0.1:{}", app.port());
        let token = app.services().jwt.mint("bench-customer", &[], Duration::from_secs(3600))?;
        let admin = app.services().jwt.mint("bench-ops", &["admin".to_owned()], Duration::from_secs(3600))?;
        tokio::spawn(app.run_until_stopped(std::future::pending()));
        let client = reqwest::Client::new();
        let merchant: Value = client
            .post(format!("{base}/api/merchants"))
            .bearer_auth(&admin)
            .json(&json!({ "code": "BENCH", "name": "Bench" }))
            .send()
            .await?
            .json()
            .await?;
        let id = merchant["id"].as_str().ok_or("no merchant")?.to_owned();
        let key: Value = client
            .post(format!("{base}/api/merchants/{id}/api-keys"))
            .bearer_auth(&admin)
            .json(&json!({ "name": "bench", "role": "ORDERS" }))
            .send()
            .await?
            .json()
            .await?;
        let key = key["key"].as_str().ok_or("no key")?.to_owned();
        println!(
            "merchants: {clients} clients, {seconds}s each, PostgreSQL, log broker, mock providers; native, key, then key beside 1 000 merchants x 10 keys, in one run"
        );
        let native_url = format!("{base}/api/orders");
        let key_url = format!("{base}/api/merchants/{id}/orders");
        let native = run(native_url, token, clients, seconds).await?;
        let updates_before = key_updates(&fixture.db).await?;
        let started = Instant::now();
        let keyed = run(key_url.clone(), key.clone(), clients, seconds).await?;
        let keyed_minutes = started.elapsed().as_secs_f64() / 60.0;
        let updates = key_updates(&fixture.db).await? - updates_before;
        crowd(&fixture.db).await?;
        let crowded = run(key_url, key, clients, seconds).await?;
        println!("| path | orders/s | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|");
        println!("{}", row("native token (POST /api/orders)", &native));
        println!("{}", row("merchant API key (POST /api/merchants/{id}/orders)", &keyed));
        println!("{}", row("the key, beside 1 000 merchants x 10 keys", &crowded));
        println!("\nkey / native orders/s = {:.2}", keyed.rate / native.rate);
        println!("crowded key / key orders/s = {:.2}", crowded.rate / keyed.rate);
        println!(
            "key-table updates during the key run: {updates} ({:.0} requests in {keyed_minutes:.1} min; at most one per key per minute)",
            keyed.rate * seconds as f64
        );
        write_json(
            "merchants",
            &json!({
                "clients": clients, "seconds": seconds,
                "native": { "rate": native.rate, "p50": native.p50, "p99": native.p99, "errors": native.errors },
                "key": { "rate": keyed.rate, "p50": keyed.p50, "p99": keyed.p99, "errors": keyed.errors },
                "crowded": { "rate": crowded.rate, "p50": crowded.p50, "p99": crowded.p99, "errors": crowded.errors },
                "ratio": keyed.rate / native.rate,
                "crowded_ratio": crowded.rate / keyed.rate,
                "key_updates": updates,
            }),
        )?;
        Ok::<(), BoxError>(())
    }
    .await;
    fixture.drop_all().await;
    result
}
