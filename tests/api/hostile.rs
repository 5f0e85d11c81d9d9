//! The edges of issue 27, each reproduced from outside first: what a hostile client can do
//! to `/metrics`, and traces at the log level production runs with (traces.rs).

use std::collections::BTreeSet;

use reqwest::{Method, StatusCode};

use crate::helpers::{Backend, TestApp};

/// Every label value of `name`'s series in a Prometheus text page, by label.
fn label_values(metrics: &str, name: &str, label: &str) -> BTreeSet<String> {
    let prefix = format!("{name}{{");
    let key = format!("{label}=\"");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let start = l.find(&key)? + key.len();
            let len = l[start..].find('"')?;
            Some(l[start..start + len].to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_metric_label_takes_a_value_the_client_chose() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    // Made-up methods (short, long, one per request), probes of made-up paths, and a real
    // request for comparison.
    for i in 0..60 {
        let made_up = format!("X{}{i}", "ABCDEFGHIJ".repeat(if i % 2 == 0 { 1 } else { 100 }));
        let method = Method::from_bytes(made_up.as_bytes()).unwrap();
        let path = if i % 3 == 0 { format!("/health/live?{i}") } else { format!("/probe-{i}/{made_up}") };
        let answer = app.client.request(method, format!("{}{path}", app.base)).send().await.unwrap();
        assert!(answer.status().is_client_error(), "{path}: {}", answer.status());
    }
    let live = app.client.get(format!("{}/health/live", app.base)).send().await.unwrap();
    assert_eq!(live.status(), StatusCode::OK);

    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    let known: BTreeSet<&str> =
        ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "_OTHER"].into();
    for name in ["http_requests_total", "http_request_duration_seconds_count"] {
        let methods = label_values(&metrics, name, "method");
        assert!(methods.contains("GET") && methods.contains("_OTHER"), "{name}: {methods:?}");
        assert!(methods.iter().all(|m| known.contains(m.as_str())), "{name}: {methods:?}");
        let routes = label_values(&metrics, name, "route");
        assert!(
            routes.iter().all(|r| !r.contains("probe") && !r.contains("ABCDEFGHIJ")),
            "{name}: {routes:?}"
        );
    }
    let series = metrics.lines().filter(|l| l.starts_with("http_requests_total{")).count();
    assert!(series <= 6, "a handful of series, not one per request: {series}\n{metrics}");
    assert!(!metrics.contains("ABCDEFGHIJ"), "no client-chosen text anywhere in /metrics");
}
