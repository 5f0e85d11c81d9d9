//! Logging: JSON lines (or pretty, for people) through `tracing`, filtered by `RUST_LOG`.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::MakeWriterExt;

use crate::config::LogFormat;

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
        LogFormat::Pretty => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(writer)
            .try_init(),
    };
    let _ = result;
}
