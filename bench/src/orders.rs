//! `bench orders`: `POST /api/orders` at rising concurrency, against pgbench on the same server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orchestrator::startup;
use serde_json::json;

use crate::fixture::*;

/// `clients` callers each running `one` back to back for `seconds`: the latencies (ms) of
/// the calls that succeeded, sorted, and how many failed.
pub(crate) async fn closed_loop<F, Fut>(
    clients: usize,
    seconds: u64,
    one: F,
) -> Result<(Vec<f64>, usize), BoxError>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = (bool, f64)> + Send + 'static,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let one = one.clone();
        tasks.push(tokio::spawn(async move {
            let (mut samples, mut errors) = (Vec::new(), 0);
            while Instant::now() < deadline {
                let (ok, ms) = one().await;
                if ok { samples.push(ms) } else { errors += 1 }
            }
            (samples, errors)
        }));
    }
    let (mut all, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (s, e) = t.await?;
        all.extend(s);
        errors += e;
    }
    all.sort_by(f64::total_cmp);
    Ok((all, errors))
}

/// Runs pgbench's built-in TPC-B-like script against a scratch database; returns tps.
pub(crate) fn pgbench_tps(seconds: u64) -> Result<f64, BoxError> {
    let base = admin_url();
    let server = base.rsplit_once('/').map_or(base.as_str(), |(s, _)| s).to_owned();
    let name = format!("bench_pgbench_{}", uuid::Uuid::new_v4().simple());
    let url = format!("{server}/{name}");
    let run = |args: &[&str], db: &str| -> Result<String, BoxError> {
        let out = std::process::Command::new(args[0]).args(&args[1..]).arg(db).output()?;
        if !out.status.success() {
            return Err(format!("{} failed: {}", args[0], String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    run(&["psql", "-q", "-c", &format!("CREATE DATABASE {name}")], &base)?;
    let result = (|| {
        run(&["pgbench", "-i", "-q", "-s", "10"], &url)?;
        let secs = seconds.to_string();
        let text = run(&["pgbench", "-c", "8", "-j", "2", "-T", &secs], &url)?;
        text.lines()
            .find(|l| l.starts_with("tps = "))
            .and_then(|l| l.trim_start_matches("tps = ").split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| BoxError::from("no tps in pgbench output"))
    })();
    let _ = run(&["psql", "-q", "-c", &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")], &base);
    result
}

pub(crate) async fn orders_scenario(levels: &str, seconds: u64) -> Result<(), BoxError> {
    let fixture = Fixture::create().await?;
    let settings = fixture.settings(&[("APP__BROKER__KIND", "log"), ("APP__LOG__FORMAT", "json")])?;
    let app = startup::Application::build(settings).await.map_err(|e| e.to_string())?;
    let port = app.port();
    let token = app.services().jwt.mint("bench-customer", &[], Duration::from_secs(3600))?;
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
    let url = format!("http://127.0.0.1:{port}/api/orders");
    let body =
        json!({ "currency": "KRW", "items": [{ "sku": "TICKET-STD", "quantity": 2, "unitPrice": 15000 }] });
    let one = |client: reqwest::Client, url: String, token: String, body: serde_json::Value| async move {
        let started = Instant::now();
        let ok = client
            .post(&url)
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .map(|r| r.status() == reqwest::StatusCode::CREATED)
            .unwrap_or(false);
        (ok, started.elapsed().as_secs_f64() * 1000.0)
    };
    // Warm up connections and caches.
    for _ in 0..50 {
        one(client.clone(), url.clone(), token.clone(), body.clone()).await;
    }
    println!("orders: POST /api/orders on PostgreSQL, mock providers, {seconds}s per level");
    println!("| concurrency | orders/s | p50 ms | p99 ms | errors |\n|---:|---:|---:|---:|---:|");
    let mut results = Vec::new();
    let mut saturation = 0.0f64;
    for c in levels.split(',').filter_map(|c| c.trim().parse::<usize>().ok()) {
        let (client, url, token, body) = (client.clone(), url.clone(), token.clone(), body.clone());
        let (all, errors) =
            closed_loop(c, seconds, move || one(client.clone(), url.clone(), token.clone(), body.clone()))
                .await?;
        let rate = all.len() as f64 / seconds as f64;
        saturation = saturation.max(rate);
        println!(
            "| {c} | {rate:.0} | {:.1} | {:.1} | {errors} |",
            percentile(&all, 50.0),
            percentile(&all, 99.0)
        );
        results.push(json!({ "concurrency": c, "ordersPerSecond": rate, "p50": percentile(&all, 50.0), "p99": percentile(&all, 99.0), "errors": errors }));
    }
    // Open loop at half of saturation: latency when not overloaded.
    let target = (saturation / 2.0).max(1.0);
    let interval = Duration::from_secs_f64(1.0 / target);
    let samples: Arc<Mutex<Vec<f64>>> = Arc::default();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut handles = Vec::new();
    while Instant::now() < deadline {
        tick.tick().await;
        let (client, url, token, body, samples) =
            (client.clone(), url.clone(), token.clone(), body.clone(), samples.clone());
        handles.push(tokio::spawn(async move {
            let (ok, ms) = one(client, url, token, body).await;
            if ok {
                samples.lock().unwrap_or_else(|e| e.into_inner()).push(ms);
            }
        }));
    }
    for h in handles {
        h.await?;
    }
    let mut half = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
    half.sort_by(f64::total_cmp);
    println!(
        "| open loop at {target:.0}/s (50 % of saturation) | {:.0} | {:.1} | {:.1} | |",
        half.len() as f64 / seconds as f64,
        percentile(&half, 50.0),
        percentile(&half, 99.0)
    );
    let tps = pgbench_tps(seconds)?;
    println!(
        "\npgbench (TPC-B-like, scale 10, 8 clients, {seconds}s): {tps:.0} tps; saturation {saturation:.0} orders/s = {:.3} orders per pgbench transaction",
        saturation / tps
    );
    write_json(
        "orders",
        &json!({
            "levels": results, "saturation": saturation,
            "halfSaturation": { "rate": target, "p50": percentile(&half, 50.0), "p99": percentile(&half, 99.0) },
            "pgbenchTps": tps, "ordersPerPgbenchTps": saturation / tps,
        }),
    )?;
    fixture.drop_all().await;
    Ok(())
}

/// A webhook receiver as fast as one can be: reads each request (headers and
/// `Content-Length` body) and answers `204` on the same connection. Returns its port.
async fn fast_receiver() -> Result<u16, BoxError> {
    receiver(Duration::ZERO, Arc::default()).await
}

/// [`fast_receiver`], answering each request after `delay` and counting them in `count`.
pub(crate) async fn receiver(delay: Duration, count: Arc<AtomicU64>) -> Result<u16, BoxError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buffer = Vec::with_capacity(4096);
                let mut chunk = [0u8; 4096];
                loop {
                    // One request: up to the blank line, then its body.
                    let end = loop {
                        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    while buffer.len() < end + length {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buffer.drain(..end + length);
                    count.fetch_add(1, Ordering::Relaxed);
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    if socket
                        .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    Ok(port)
}

/// `bench orders --channels simulated,webhook`: the closed-loop levels once per channel
/// (both steps on it), each on a database of its own, in one run; the saturation of each and
/// its ratio to the first.
pub(crate) async fn channels_scenario(levels: &str, seconds: u64, channels: &str) -> Result<(), BoxError> {
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let port = fast_receiver().await?;
    let settle = format!("http://127.0.0.1:{port}/settlements");
    let notify = format!("http://127.0.0.1:{port}/notifications");
    println!(
        "orders by channel: POST /api/orders on PostgreSQL, mock payments, log broker, {seconds}s per level"
    );
    println!(
        "| channels | concurrency | orders/s | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|---:|"
    );
    let mut saturations: Vec<(String, f64)> = Vec::new();
    for channel in channels.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let fixture = Fixture::create().await?;
        let mut extra: Vec<(&str, &str)> = vec![
            ("APP__BROKER__KIND", "log"),
            ("APP__LOG__FORMAT", "json"),
            ("APP__SETTLEMENT__CHANNEL", channel),
            ("APP__NOTIFICATION__CHANNEL", channel),
        ];
        if channel == "webhook" {
            extra.extend([
                ("APP__SETTLEMENT__WEBHOOK__URL", settle.as_str()),
                ("APP__SETTLEMENT__WEBHOOK__SECRETS", SECRET),
                ("APP__NOTIFICATION__WEBHOOK__URL", notify.as_str()),
                ("APP__NOTIFICATION__WEBHOOK__SECRETS", SECRET),
            ]);
        }
        let settings = fixture.settings(&extra)?;
        let app = startup::Application::build(settings).await.map_err(|e| e.to_string())?;
        let app_port = app.port();
        let token = app.services().jwt.mint("bench-customer", &[], Duration::from_secs(3600))?;
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        let server = tokio::spawn(app.run_until_stopped(async move { stopped.cancelled().await }));
        let client = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
        let url = format!("http://127.0.0.1:{app_port}/api/orders");
        let body = json!({ "currency": "KRW", "items": [{ "sku": "TICKET-STD", "quantity": 2, "unitPrice": 15000 }] });
        let one = |client: reqwest::Client, url: String, token: String, body: serde_json::Value| async move {
            let started = Instant::now();
            let ok = client
                .post(&url)
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await
                .ok()
                .filter(|r| r.status() == reqwest::StatusCode::CREATED);
            let completed = match ok {
                Some(r) => {
                    r.json::<serde_json::Value>().await.ok().is_some_and(|o| o["status"] == "COMPLETED")
                }
                None => false,
            };
            (completed, started.elapsed().as_secs_f64() * 1000.0)
        };
        for _ in 0..50 {
            one(client.clone(), url.clone(), token.clone(), body.clone()).await;
        }
        let mut saturation = 0.0f64;
        for c in levels.split(',').filter_map(|c| c.trim().parse::<usize>().ok()) {
            let (client, url, token, body) = (client.clone(), url.clone(), token.clone(), body.clone());
            let (all, errors) = closed_loop(c, seconds, move || {
                one(client.clone(), url.clone(), token.clone(), body.clone())
            })
            .await?;
            let rate = all.len() as f64 / seconds as f64;
            saturation = saturation.max(rate);
            println!(
                "| {channel} | {c} | {rate:.0} | {:.1} | {:.1} | {errors} |",
                percentile(&all, 50.0),
                percentile(&all, 99.0)
            );
        }
        saturations.push((channel.to_owned(), saturation));
        stop.cancel();
        let _ = server.await;
        fixture.drop_all().await;
    }
    let base = saturations.first().map_or(1.0, |(_, s)| *s).max(1.0);
    for (channel, s) in &saturations {
        println!("saturation {channel}: {s:.0} orders/s completed, {:.2} of the first", s / base);
    }
    write_json(
        "orders-channels",
        &json!({ "saturation": saturations.iter().map(|(c, s)| json!({ "channels": c, "ordersPerSecond": s })).collect::<Vec<_>>() }),
    )?;
    Ok(())
}
