//! `webhooks.*`: the rules of merchants' webhook endpoints (docs/spec.md §16).

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;
use super::resolve::positive;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhooks {
    pub(super) allow_http: bool,
    pub(super) rotation_overlap: String,
}

/// `webhooks.*` (docs/configuration.md).
#[derive(Debug, Clone)]
pub struct WebhooksSettings {
    /// `http://` endpoints allowed (development only).
    pub allow_http: bool,
    /// How long a rotated secret keeps signing beside the new one.
    pub rotation_overlap: Duration,
}

pub(super) fn resolve_webhooks(raw: RawWebhooks) -> Result<WebhooksSettings, ConfigError> {
    Ok(WebhooksSettings {
        allow_http: raw.allow_http,
        rotation_overlap: positive("webhooks.rotation_overlap", &raw.rotation_overlap)?,
    })
}
