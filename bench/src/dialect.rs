//! `bench dialect`: orders through the commerce dialect (docs/dialects.md) against the
//! native API, in one run, one process serving both listeners on one database. A native
//! order is one request (`POST /api/orders`, the saga runs to the end); a dialect order is
//! what the commerce backend's clients send: `POST /api/orders` (held in `CREATED`), then
//! `POST /api/orders/{orderId}/orchestrate` (the saga, answered with the flow).

use std::time::{Duration, Instant};

use orchestrator::startup;
use serde_json::{Value, json};

use crate::fixture::*;

const SECRET: &str = "bench-commerce-dialect-secret-0123456789abcdef";

struct Run {
    rate: f64,
    p50: f64,
    p99: f64,
    errors: usize,
}

/// One order, the way `dialect` says: `Some(ms)` when it completed.
async fn one(client: &reqwest::Client, base: &str, token: &str, dialect: bool) -> Option<f64> {
    let started = Instant::now();
    if !dialect {
        let body = json!({ "currency": "KRW", "items": [{ "sku": "TICKET-STD", "quantity": 1, "unitPrice": 12000 }] });
        let res =
            client.post(format!("{base}/api/orders")).bearer_auth(token).json(&body).send().await.ok()?;
        let order: Value = res.json().await.ok()?;
        return (order["status"] == "COMPLETED").then(|| started.elapsed().as_secs_f64() * 1000.0);
    }
    let body = json!({ "customerId": "bench-customer", "totalAmount": 12000, "currency": "KRW", "description": "bench" });
    let res = client.post(format!("{base}/api/orders")).bearer_auth(token).json(&body).send().await.ok()?;
    let created: Value = res.json().await.ok()?;
    let id = created["data"]["orderId"].as_i64()?;
    let res =
        client.post(format!("{base}/api/orders/{id}/orchestrate")).bearer_auth(token).send().await.ok()?;
    let flow: Value = res.json().await.ok()?;
    (flow["data"]["orderStatus"] == "COMPLETED").then(|| started.elapsed().as_secs_f64() * 1000.0)
}

/// 30 orders to warm up, then `clients` closed-loop callers for `seconds` (the orders
/// scenario's loop).
async fn run(
    base: String,
    token: String,
    dialect: bool,
    clients: usize,
    seconds: u64,
) -> Result<Run, BoxError> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
    for _ in 0..30 {
        one(&client, &base, &token, dialect).await;
    }
    let (all, errors) = crate::orders::closed_loop(clients, seconds, move || {
        let (client, base, token) = (client.clone(), base.clone(), token.clone());
        async move {
            match one(&client, &base, &token, dialect).await {
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

pub(crate) async fn dialect_scenario(clients: usize, seconds: u64) -> Result<(), BoxError> {
    let fixture = Fixture::create().await?;
    let result = async {
        let env = [
            ("APP__BROKER__KIND", "log"),
            ("APP__LOG__FORMAT", "json"),
            ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
            ("APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET", SECRET),
            ("APP__HTTP__DIALECTS__COMMERCE__DEMO_TOKEN", "true"),
        ];
        let app = startup::Application::build(fixture.settings(&env)?).await.map_err(|e| e.to_string())?;
        let native = format!("http://127.0.0.1:{}", app.port());
        let port = app.commerce_port().ok_or("the dialect's listener is off")?;
        let commerce = format!("http://127.0.0.1:{port}");
        let native_token = app.services().jwt.mint("bench-customer", &[], Duration::from_secs(3600))?;
        tokio::spawn(app.run_until_stopped(std::future::pending()));
        // A demo token, as its clients get one.
        let minted: Value = reqwest::Client::new()
            .post(format!("{commerce}/api/auth/token"))
            .json(&json!({ "username": "bench", "roles": ["ROLE_USER"] }))
            .send()
            .await?
            .json()
            .await?;
        let commerce_token = minted["data"]["accessToken"].as_str().ok_or("no demo token")?.to_owned();
        println!(
            "dialect: {clients} clients, {seconds}s each, PostgreSQL, log broker, mock providers; native then commerce in one run"
        );
        let n = run(native, native_token, false, clients, seconds).await?;
        let c = run(commerce, commerce_token, true, clients, seconds).await?;
        println!("| API | orders/s | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|");
        println!("| native (POST /api/orders) | {:.0} | {:.1} | {:.1} | {} |", n.rate, n.p50, n.p99, n.errors);
        println!(
            "| commerce dialect (create + orchestrate) | {:.0} | {:.1} | {:.1} | {} |",
            c.rate, c.p50, c.p99, c.errors
        );
        println!("\ncommerce / native orders/s = {:.2}", c.rate / n.rate);
        write_json(
            "dialect",
            &json!({
                "clients": clients, "seconds": seconds,
                "native": { "rate": n.rate, "p50": n.p50, "p99": n.p99, "errors": n.errors },
                "commerce": { "rate": c.rate, "p50": c.p50, "p99": c.p99, "errors": c.errors },
                "ratio": c.rate / n.rate,
            }),
        )?;
        Ok::<(), BoxError>(())
    }
    .await;
    fixture.drop_all().await;
    result
}
