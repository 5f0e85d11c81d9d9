//! `bench toss`: orders through Toss's checkout against the fake Toss API (`fake-toss`,
//! started as a process: needs `cargo build --release -p fake-toss`) beside the same load in
//! mock mode, in one run, each on a database of its own. A mock order is one request (`POST
//! /api/orders`, the saga runs to the end); a Toss order is the checkout as a client makes it:
//! `POST /api/orders` (AWAITING_PAYMENT), the widget (the fake's stand-in), `POST
//! /api/orders/{id}/payment` (the confirm, then the saga).

use std::time::{Duration, Instant};

use orchestrator::startup;
use serde_json::{Value, json};

use crate::fixture::*;

const SECRET: &str = "test_sk_bench_0000000000000000";

/// The JSON answer of a request, or `None` if it failed on the way.
async fn answer(request: reqwest::RequestBuilder) -> Option<Value> {
    request.send().await.ok()?.json().await.ok()
}

struct Run {
    rate: f64,
    p50: f64,
    p99: f64,
    /// The service's own part of a Toss order (placing and paying), without the widget.
    service_p50: f64,
    errors: usize,
}

async fn closed_loop(
    base: String,
    token: String,
    toss: Option<String>,
    clients: usize,
    seconds: u64,
) -> Result<Run, BoxError> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
    let body =
        json!({ "currency": "KRW", "items": [{ "sku": "TICKET-STD", "quantity": 2, "unitPrice": 15000 }] });
    let one = {
        let (client, base, token, toss, body) =
            (client.clone(), base.clone(), token.clone(), toss.clone(), body.clone());
        move || {
            let (client, base, token, toss, body) =
                (client.clone(), base.clone(), token.clone(), toss.clone(), body.clone());
            async move {
                let started = Instant::now();
                let placed = client
                    .post(format!("{base}/api/orders"))
                    .bearer_auth(&token)
                    .json(&body)
                    .send()
                    .await
                    .ok()?;
                if placed.status() != reqwest::StatusCode::CREATED {
                    return None;
                }
                let order: Value = placed.json().await.ok()?;
                let Some(fake) = toss else {
                    let ms = started.elapsed().as_secs_f64() * 1000.0;
                    return (order["status"] == "COMPLETED").then_some((ms, ms));
                };
                let placing = started.elapsed();
                let widget = Instant::now();
                let widget_body =
                    json!({ "orderId": order["checkout"]["orderId"], "amount": order["totalAmount"] });
                let session =
                    answer(client.post(format!("{fake}/__fake/checkout")).json(&widget_body)).await?;
                let widget = widget.elapsed();
                let pay_body = json!({ "paymentKey": session["paymentKey"], "amount": order["totalAmount"] });
                let pay_url = format!("{base}/api/orders/{}/payment", order["id"].as_str()?);
                let paid = answer(client.post(pay_url).bearer_auth(&token).json(&pay_body)).await?;
                let total = started.elapsed();
                let service = total.saturating_sub(widget).max(placing);
                (paid["status"] == "COMPLETED")
                    .then_some((total.as_secs_f64() * 1000.0, service.as_secs_f64() * 1000.0))
            }
        }
    };
    for _ in 0..30 {
        one().await;
    }
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let one = one.clone();
        tasks.push(tokio::spawn(async move {
            let (mut samples, mut errors) = (Vec::new(), 0);
            while Instant::now() < deadline {
                match one().await {
                    Some(s) => samples.push(s),
                    None => errors += 1,
                }
            }
            (samples, errors)
        }));
    }
    let (mut all, mut service, mut errors) = (Vec::new(), Vec::new(), 0);
    for t in tasks {
        let (s, e) = t.await?;
        all.extend(s.iter().map(|(t, _)| *t));
        service.extend(s.iter().map(|(_, s)| *s));
        errors += e;
    }
    all.sort_by(f64::total_cmp);
    service.sort_by(f64::total_cmp);
    Ok(Run {
        rate: all.len() as f64 / seconds as f64,
        p50: percentile(&all, 50.0),
        p99: percentile(&all, 99.0),
        service_p50: percentile(&service, 50.0),
        errors,
    })
}

async fn serve(fixture: &Fixture, extra: &[(&str, &str)]) -> Result<(String, String), BoxError> {
    let mut env = vec![("APP__BROKER__KIND", "log"), ("APP__LOG__FORMAT", "json")];
    env.extend_from_slice(extra);
    let app = startup::Application::build(fixture.settings(&env)?).await.map_err(|e| e.to_string())?;
    let base = format!("http://127.0.0.1:{}", app.port());
    let token = app.services().jwt.mint("bench-customer", &[], Duration::from_secs(3600))?;
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    Ok((base, token))
}

pub(crate) async fn toss_scenario(clients: usize, seconds: u64) -> Result<(), BoxError> {
    let (mut fake, fake_url) = start_fake_toss(SECRET).await?;
    let result = async {
        let mock_db = Fixture::create().await?;
        let toss_db = Fixture::create().await?;
        let (mock_base, mock_token) = serve(&mock_db, &[]).await?;
        let toss_env = [
            ("APP__PAYMENT__PROVIDER", "toss"),
            ("APP__PAYMENT__TOSS__SECRET_KEY", SECRET),
            ("APP__PAYMENT__TOSS__BASE_URL", fake_url.as_str()),
        ];
        let (toss_base, toss_token) = serve(&toss_db, &toss_env).await?;
        println!("toss: {clients} clients, {seconds}s each, PostgreSQL, log broker; mock and toss in one run");
        let mock = closed_loop(mock_base, mock_token, None, clients, seconds).await?;
        let toss = closed_loop(toss_base, toss_token, Some(fake_url.clone()), clients, seconds).await?;
        println!("| mode | orders/s | p50 ms | p99 ms | service's p50 ms | errors |\n|---|---:|---:|---:|---:|---:|");
        println!("| mock (1 request) | {:.0} | {:.1} | {:.1} | {:.1} | {} |", mock.rate, mock.p50, mock.p99, mock.service_p50, mock.errors);
        println!(
            "| toss (place, widget, pay) | {:.0} | {:.1} | {:.1} | {:.1} | {} |",
            toss.rate, toss.p50, toss.p99, toss.service_p50, toss.errors
        );
        println!("\ntoss / mock orders/s = {:.2}", toss.rate / mock.rate);
        write_json(
            "toss",
            &json!({
                "clients": clients, "seconds": seconds,
                "mock": { "rate": mock.rate, "p50": mock.p50, "p99": mock.p99, "errors": mock.errors },
                "toss": { "rate": toss.rate, "p50": toss.p50, "p99": toss.p99, "serviceP50": toss.service_p50, "errors": toss.errors },
                "ratio": toss.rate / mock.rate,
            }),
        )?;
        mock_db.drop_all().await;
        toss_db.drop_all().await;
        Ok::<(), BoxError>(())
    }
    .await;
    let _ = fake.kill();
    let _ = fake.wait();
    result
}
