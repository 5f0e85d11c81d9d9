//! Logging: JSON lines (or pretty, for people) through `tracing`, filtered by `RUST_LOG`;
//! traces over OTLP/HTTP when `telemetry.otlp_endpoint` is set (nothing is exported, and no
//! OpenTelemetry layer installed, when it is not); the metrics registry.
//!
//! W3C trace context (`traceparent`) flows end to end: an HTTP request's header (or a new
//! trace) → the spans of the saga and its provider calls → each outbox event (stored with
//! it) → the AMQP message's `traceparent` header; a meeting-service message with one
//! continues its trace.

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

/// Where traces go (`telemetry.*`).
#[derive(Debug, Clone, Default)]
pub struct TelemetrySettings {
    /// An OTLP/HTTP collector, e.g. `http://otel-collector:4318` (spans are posted to
    /// `/v1/traces`); none: no traces.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans.
    pub service_name: String,
}

/// Keeps the span exporter alive; dropping it flushes what is buffered.
pub struct Telemetry(Option<opentelemetry_sdk::trace::SdkTracerProvider>);

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take() {
            let _ = provider.shutdown();
        }
    }
}

/// Whether spans are exported (an OTLP endpoint is configured): per-event spans are only
/// made then.
pub fn tracing_enabled() -> bool {
    TRACING.load(std::sync::atomic::Ordering::Relaxed)
}

static TRACING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The log lines written when `RUST_LOG` is unset.
const LOG_FILTER: &str = "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn";

/// The spans exported, whatever `RUST_LOG` says: every span of the service's own (requests,
/// saga steps, provider calls, publishes, consumed messages; all at info), and only warnings
/// and errors of its dependencies as span events.
const TRACE_FILTER: &str = "warn,orchestrator=info,app=info";

/// Installs the global subscriber once; later calls are no-ops (tests call it freely).
/// With an OTLP endpoint, spans are exported and the W3C trace context propagator is set.
/// Keep the returned guard for the life of the process.
pub fn init(format: LogFormat, settings: &TelemetrySettings) -> Telemetry {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    // Each layer has its own filter: `RUST_LOG` says which log lines are written, never which
    // spans are exported. With one filter on the whole subscriber, `RUST_LOG=warn` disabled
    // every (info-level) span, so nothing was exported and no `traceparent` reached the
    // outbox or the broker.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(LOG_FILTER));
    // Logs go to stderr so that stdout stays clean for `app token` and `app outbox stats`.
    let writer = std::io::stderr.with_max_level(tracing::Level::TRACE);
    let fmt = match format {
        // Each line carries the fields of every span it is in: the request's correlation id
        // and trace id, the saga step, the order.
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .with_writer(writer)
            .boxed(),
        LogFormat::Pretty => tracing_subscriber::fmt::layer().with_writer(writer).boxed(),
    };
    let provider = settings.otlp_endpoint.as_deref().and_then(|endpoint| {
        match tracer_provider(endpoint, &settings.service_name) {
            Ok(provider) => Some(provider),
            Err(why) => {
                eprintln!("telemetry: traces are off: {why}");
                None
            }
        }
    });
    let otel = provider.as_ref().map(|provider| {
        use opentelemetry::trace::TracerProvider;
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("orchestrator"))
            .with_filter(EnvFilter::new(TRACE_FILTER))
    });
    let installed =
        tracing_subscriber::registry().with(fmt.with_filter(filter)).with(otel).try_init().is_ok();
    if installed && provider.is_some() {
        TRACING.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    Telemetry(provider)
}

fn tracer_provider(
    endpoint: &str,
    service: &str,
) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, String> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(OtlpClient {
            client: crate::adapters::http_client::builder()
                .timeout(std::time::Duration::from_secs(10))
                .build()
                .map_err(|e| e.to_string())?,
            runtime: tokio::runtime::Handle::try_current().map_err(|e| e.to_string())?,
        })
        .with_endpoint(url)
        .build()
        .map_err(|e| e.to_string())?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(service.to_owned()).build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The OTLP exporter's HTTP client: our reqwest, run on the app's tokio runtime (the batch
/// exporter calls it from a thread of its own).
#[derive(Debug)]
struct OtlpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OtlpClient {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let mut builder = self.client.request(parts.method, parts.uri.to_string()).body(body);
        for (name, value) in &parts.headers {
            builder = builder.header(name, value);
        }
        let send = async move {
            let response = builder.send().await?;
            let status = response.status().as_u16();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        };
        let (status, body) = self.runtime.spawn(send).await??;
        Ok(http::Response::builder().status(status).body(body)?)
    }
}

/// The W3C `traceparent` of the current span, when traces are exported.
pub fn current_traceparent() -> Option<String> {
    if !tracing_enabled() {
        return None;
    }
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = tracing::Span::current().context();
    let span = context.span();
    let sc = span.span_context();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// Makes `span` a child of the remote context in `traceparent` (a W3C header value), and
/// records its ids as the span's `trace_id` and `span_id` fields (for the logs; declare
/// them `Empty`).
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    if !tracing_enabled() {
        return;
    }
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if let Some(value) = traceparent {
        let mut carrier = std::collections::HashMap::new();
        carrier.insert("traceparent".to_owned(), value.to_owned());
        let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
    }
    let context = span.context();
    let ids = context.span().span_context().clone();
    span.record("trace_id", tracing::field::display(ids.trace_id()));
    span.record("span_id", tracing::field::display(ids.span_id()));
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
            "webhook_messages_total",
            "webhook_reclaimed_total",
            "webhook_claims_lost_total",
        ] {
            metrics::counter!(name).absolute(0);
        }
        for reason in ["GONE", "FAILING"] {
            metrics::counter!("webhook_endpoints_disabled_total", "reason" => reason).absolute(0);
        }
        metrics::gauge!("webhook_oldest_undelivered_seconds").set(0.0);
        metrics::gauge!("webhook_fanout_behind_seconds").set(0.0);
        metrics::counter!("outbox_confirms_total", "outcome" => "ack").absolute(0);
        for outcome in ["succeeded", "failed", "skipped"] {
            metrics::counter!("notification_retries_total", "outcome" => outcome).absolute(0);
        }
    });
    Registry { meter, handle }
}
