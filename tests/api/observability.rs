//! What the alert rules (deploy/prometheus/alerts.yml) and the dashboard
//! (deploy/grafana/orchestrator.json) reference is what the binary exports: after a little
//! traffic of every kind — an HTTP order, a registration from the meeting service, a relay
//! that publishes and one that dead-letters — every metric name they use is in `/metrics`.

use std::collections::BTreeSet;

use orchestrator::adapters::persistence::SeaOrmStore;
use orchestrator::application::ports::{Changes, NewOutboxEvent, UnitOfWork};
use orchestrator::domain::ids::EventId;
use orchestrator::domain::outbox::OutboxStatus;
use reqwest::StatusCode;

use crate::helpers::{Backend, json, order_body, outbox_in, until};
use crate::meeting::{handled, registered, start};

/// Words in PromQL that are not metric names.
const PROMQL: &[&str] = &[
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "by",
    "without",
    "rate",
    "increase",
    "irate",
    "absent",
    "histogram_quantile",
    "min_over_time",
    "max_over_time",
    "and",
    "or",
    "unless",
    "on",
    "ignoring",
    "humanizeDuration",
    "humanizePercentage",
    "value",
    "labels",
];

/// The metric names a PromQL expression uses: identifiers outside label matchers and
/// `by (...)` groups that are not functions or keywords; `_bucket`/`_count`/`_sum` name the
/// histogram itself.
fn metric_names(expr: &str, out: &mut BTreeSet<String>) {
    let mut cleaned = String::new();
    let mut depth = 0;
    for c in expr.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ if depth == 0 => cleaned.push(c),
            _ => {}
        }
    }
    let mut words = Vec::new();
    let mut word = String::new();
    for c in cleaned.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            if !word.is_empty() {
                words.push((std::mem::take(&mut word), c));
            }
            if !c.is_whitespace() {
                words.push((c.to_string(), c));
            }
        }
    }
    let mut skip_group = false;
    for (i, (w, next)) in words.iter().enumerate() {
        if w == "by" || w == "without" {
            skip_group = true;
            continue;
        }
        if skip_group {
            if w == ")" {
                skip_group = false;
            }
            continue;
        }
        let is_ident = w.chars().next().is_some_and(|c| c.is_ascii_lowercase());
        let is_call = *next == '(' || words.get(i + 1).is_some_and(|(n, _)| n == "(");
        if is_ident && !is_call && !PROMQL.contains(&w.as_str()) && w.contains('_') {
            let name = ["_bucket", "_count", "_sum"].iter().find_map(|s| w.strip_suffix(s)).unwrap_or(w);
            out.insert(name.to_owned());
        }
    }
}

fn referenced() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let rules = std::fs::read_to_string("deploy/prometheus/alerts.yml").unwrap();
    // `expr: ...` on one line, or `expr: |` with the expression indented below it.
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(expr) = line.trim().strip_prefix("expr:") {
            let mut text = expr.trim().trim_start_matches('|').to_owned();
            while lines.peek().is_some_and(|l| l.starts_with("          ")) {
                text.push(' ');
                text.push_str(lines.next().unwrap().trim());
            }
            metric_names(&text, &mut names);
        }
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("deploy/grafana/orchestrator.json").unwrap()).unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            metric_names(target["expr"].as_str().unwrap(), &mut names);
        }
    }
    names
}

#[test]
fn the_expression_reader_finds_metric_names_and_nothing_else() {
    let mut names = BTreeSet::new();
    metric_names(
        r#"histogram_quantile(0.99, sum by (le, consumer) (rate(consumer_handling_duration_seconds_bucket{job="w"}[5m])))"#,
        &mut names,
    );
    metric_names(
        r#"sum(rate(http_requests_total{status=~"5.."}[5m])) / sum(rate(http_requests_total[5m])) > 0.05"#,
        &mut names,
    );
    metric_names(r#"absent(orchestrator_build_info{job="orchestrator-worker"})"#, &mut names);
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["consumer_handling_duration_seconds", "http_requests_total", "orchestrator_build_info"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_rules_and_the_dashboard_use_is_exported() {
    let names = referenced();
    assert!(names.len() >= 15, "the rules and the dashboard were read: {names:?}");
    let env = [("APP__OUTBOX__MAX_RETRIES", "0")];
    let Some((app, broker, meeting, workers)) = start(Backend::Postgres, &env).await else {
        return;
    };
    // An order over HTTP (and read back, and a probe of a path that does not exist); a
    // registration from the meeting service.
    let alice = app.token("alice");
    let order = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let id = order["id"].as_str().unwrap().to_owned();
    json(app.get(&format!("/api/orders/{id}"), &alice).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(app.get("/wp-admin/1234", &alice).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    meeting
        .publish("meeting.participant.registered", &registered("ev-obs", "m-obs", "u-obs", 1000), None)
        .await;
    until("the registration handled", || async { handled(&app, "participant-register").await == 1 }).await;
    // An event nobody routes: returned, and with no retries allowed, a dead letter.
    let store = SeaOrmStore::new(app.db.clone(), app.services.relay_wake.clone());
    let event_id = EventId::new();
    let lost = NewOutboxEvent {
        event_id,
        aggregate_type: "order".into(),
        aggregate_id: "obs-lost".into(),
        event_type: "order.lost".into(),
        routing_key: "nobody.listens".into(),
        payload: serde_json::json!({ "eventId": event_id.to_string() }).to_string(),
        correlation_id: None,
        created_at: chrono::Utc::now(),
    };
    store.commit(Changes { outbox: vec![lost], ..Default::default() }).await.unwrap();
    until("a dead letter", || async { outbox_in(&app.db, OutboxStatus::DeadLetter).await == 1 }).await;
    until("the events published", || async { broker.count() >= 4 }).await;

    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    let exported: BTreeSet<&str> = metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(|n| ["_bucket", "_count", "_sum"].iter().find_map(|s| n.strip_suffix(s)).unwrap_or(n))
        .collect();
    let missing: Vec<&String> = names.iter().filter(|n| !exported.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "referenced but not exported: {missing:?}\n{metrics}");
    // Routes by template: one series per route, whatever ids and probes arrive.
    assert!(metrics.contains(r#"route="/api/orders/{id}""#), "{metrics}");
    assert!(metrics.contains(r#"route="unmatched",status="404""#), "{metrics}");
    assert!(!metrics.contains(&id) && !metrics.contains("wp-admin"), "no raw path in a label");
    workers.shutdown(std::time::Duration::from_secs(10)).await;
}
