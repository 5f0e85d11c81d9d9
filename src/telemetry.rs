//! Logging: JSON lines (or pretty, for people) through `tracing`, filtered by `RUST_LOG`.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::MakeWriterExt;

use crate::application::meter::Meter;

/// How log lines are written (`log.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// For people at a terminal.
    Pretty,
}

/// Installs the global subscriber once; later calls are no-ops (tests call it freely).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn"));
    // Logs go to stderr so that stdout stays clean for `app token` and `app outbox stats`.
    let writer = std::io::stderr.with_max_level(tracing::Level::TRACE);
    let result = match format {
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_env_filter(filter)
            .with_writer(writer)
            .try_init(),
        LogFormat::Pretty => tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).try_init(),
    };
    let _ = result;
}

/// One app's Prometheus registry: where its services record ([`Meter`]) and what
/// `/metrics` renders. Not installed globally, so apps in one process stay apart.
#[derive(Clone)]
pub struct Registry {
    pub meter: Meter,
    pub handle: metrics_exporter_prometheus::PrometheusHandle,
}

/// A new registry, with the latency histograms' buckets.
pub fn registry() -> Registry {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    const LATENCY: &[f64] =
        &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
    let builder = PrometheusBuilder::new();
    // Only an empty bucket list is refused, and this one is not.
    let builder = match builder.set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY) {
        Ok(with_buckets) => with_buckets,
        Err(_) => PrometheusBuilder::new(),
    };
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    let meter = Meter::new(std::sync::Arc::new(recorder));
    meter.record(|| {
        metrics::gauge!("orchestrator_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        // Counters exist from process start (at 0), so that a scrape before the first event
        // and `increase()` over a restart both see them.
        for name in [
            "outbox_published_total",
            "outbox_retries_total",
            "compensations_exhausted_total",
            "payment_callbacks_rejected_total",
        ] {
            metrics::counter!(name).absolute(0);
        }
        metrics::counter!("outbox_confirms_total", "outcome" => "ack").absolute(0);
        for outcome in ["succeeded", "failed", "skipped"] {
            metrics::counter!("notification_retries_total", "outcome" => outcome).absolute(0);
        }
    });
    Registry { meter, handle }
}
