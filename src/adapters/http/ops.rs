//! Unauthenticated operations endpoints: liveness, readiness, the OpenAPI document and a
//! self-contained docs page (no asset is downloaded at build or run time).

use actix_web::{HttpResponse, web};
use serde_json::json;
use utoipa::OpenApi;

use super::HttpState;

/// The process is up.
#[utoipa::path(get, path = "/health/live", tag = "ops", responses((status = 200, description = "Alive")))]
pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "UP" }))
}

/// The database and broker answer.
#[utoipa::path(
    get,
    path = "/health/ready",
    tag = "ops",
    responses((status = 200, description = "Ready"), (status = 503, description = "A dependency is down"))
)]
pub async fn ready(state: web::Data<HttpState>) -> HttpResponse {
    let (ready, checks) = state.readiness.check().await;
    let checks: serde_json::Map<String, serde_json::Value> = checks
        .into_iter()
        .map(|(name, ok)| (name.to_owned(), json!(if ok { "UP" } else { "DOWN" })))
        .collect();
    let mut body = json!({ "status": if ready { "UP" } else { "DOWN" }, "checks": checks });
    if !state.readiness.warnings().is_empty() {
        body["warnings"] = json!(state.readiness.warnings());
    }
    if ready { HttpResponse::Ok().json(body) } else { HttpResponse::ServiceUnavailable().json(body) }
}

/// Prometheus text: orders by status, outbox rows by status and backlog age, publish,
/// confirm, retry and dead-letter counters, commit-to-confirm latency, and what waits for
/// an operator (`operator_attention{kind}`).
#[utoipa::path(get, path = "/metrics", tag = "ops", responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(state: web::Data<HttpState>) -> HttpResponse {
    let meter = &state.metrics.meter;
    // Gauges that describe stored state are read at scrape time.
    if let Ok(counts) = state.queries.count_by_status().await {
        meter.record(|| {
            for (status, n) in counts {
                metrics::gauge!("orders", "status" => status.as_str()).set(n as f64);
            }
        });
    }
    if let Ok(stats) = state.outbox_admin.stats_for_metrics().await {
        let now = chrono::Utc::now();
        let age = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0)
        };
        meter.record(|| {
            for (status, n) in &stats.by_status {
                metrics::gauge!("outbox_rows", "status" => status.as_str()).set(*n as f64);
            }
            metrics::gauge!("outbox_oldest_ready_age_seconds").set(age(stats.oldest_ready_created_at));
            metrics::gauge!("outbox_oldest_claim_age_seconds").set(age(stats.oldest_claim_at));
            metrics::gauge!("outbox_blocked_aggregates").set(stats.blocked_aggregates as f64);
            for (event_type, n) in &stats.dead_letters_by_type {
                metrics::gauge!("outbox_dead_letters", "event_type" => event_type.clone()).set(*n as f64);
            }
        });
    }
    if let Ok(attention) = state.reconciliation.needs_operator().await {
        meter.record(|| {
            for (kind, n) in attention {
                metrics::gauge!("operator_attention", "kind" => kind).set(n as f64);
            }
        });
    }
    let body = state.metrics.handle.render();
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(body)
}

pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok().json(super::ApiDoc::openapi())
}

pub async fn docs() -> HttpResponse {
    HttpResponse::Ok().content_type("text/html; charset=utf-8").body(DOCS_PAGE)
}

/// Renders `/openapi.json` in the browser with a few lines of inline script.
const DOCS_PAGE: &str = r##"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Order orchestration API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:15px/1.5 system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{margin-bottom:0}.op{border:1px solid #ddd;border-radius:6px;margin:.6rem 0;padding:.5rem .8rem}
.m{display:inline-block;min-width:4.5rem;font-weight:700;text-transform:uppercase}
.get{color:#0a7}.post{color:#06c}.path{font-family:monospace;font-size:1rem}
details pre{background:#f6f6f6;padding:.6rem;overflow:auto;font-size:12px}small{color:#666}
</style></head><body>
<h1>Order orchestration API</h1><p><small>Rendered from <a href="/openapi.json">/openapi.json</a>.
Authenticate with <code>Authorization: Bearer $(app token --sub alice)</code>.</small></p>
<div id="ops">Loading…</div>
<script>
fetch('/openapi.json').then(r=>r.json()).then(spec=>{
  const root=document.getElementById('ops');root.textContent='';
  const esc=s=>String(s??'').replace(/[&<>]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]));
  for(const [path,item] of Object.entries(spec.paths)){
    for(const [method,op] of Object.entries(item)){
      const d=document.createElement('div');d.className='op';
      const params=(op.parameters||[]).map(p=>`${p.in} <b>${esc(p.name)}</b>${p.required?' (required)':''}: ${esc(p.description)}`).join('<br>');
      const resp=Object.entries(op.responses||{}).map(([c,r])=>`<b>${c}</b> ${esc(r.description)}`).join('<br>');
      d.innerHTML=`<span class="m ${method}">${method}</span> <span class="path">${esc(path)}</span>
        <div>${esc(op.summary||'')} ${esc(op.description||'')}</div>
        ${params?`<div><small>${params}</small></div>`:''}<div><small>${resp}</small></div>
        <details><summary>schema</summary><pre>${esc(JSON.stringify(op,null,2))}</pre></details>`;
      root.appendChild(d);
    }
  }
  const s=document.createElement('details');s.innerHTML='<summary>Schemas</summary><pre>'+esc(JSON.stringify(spec.components,null,2))+'</pre>';root.appendChild(s);
}).catch(e=>{document.getElementById('ops').textContent='Cannot load /openapi.json: '+e});
</script></body></html>"##;
