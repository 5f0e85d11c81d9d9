//! `log.*` and `telemetry.*`: the log's level and format, and where traces go.

use serde::Deserialize;

use super::{ConfigError, invalid};
use crate::telemetry::{LogFormat, TelemetrySettings};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    /// Unset: no traces.
    pub(super) otlp_endpoint: Option<String>,
    pub(super) service_name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    /// Unset: pretty at a terminal, JSON lines otherwise.
    pub(super) format: Option<String>,
}

#[derive(Debug, Clone)]
pub struct LogSettings {
    pub format: LogFormat,
}

pub(super) fn resolve_telemetry(raw: RawTelemetry) -> Result<TelemetrySettings, ConfigError> {
    if let Some(url) = &raw.otlp_endpoint
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(invalid("telemetry.otlp_endpoint", "expected http(s)://host:4318"));
    }
    if raw.service_name.is_empty() {
        return Err(invalid("telemetry.service_name", "must not be empty"));
    }
    Ok(TelemetrySettings { otlp_endpoint: raw.otlp_endpoint, service_name: raw.service_name })
}

pub(super) fn resolve_log(raw: RawLog) -> Result<LogSettings, ConfigError> {
    let format = match raw.format.as_deref() {
        // Unset: pretty for a person at a terminal, JSON lines for a collector.
        None if std::io::IsTerminal::is_terminal(&std::io::stderr()) => LogFormat::Pretty,
        None | Some("json") => LogFormat::Json,
        Some("pretty") => LogFormat::Pretty,
        Some(other) => return Err(invalid("log.format", format!("`{other}` is not json or pretty"))),
    };
    Ok(LogSettings { format })
}
