//! `secrets.*`: the key that seals what the service keeps secret at rest — a merchant's
//! channel settings (docs/merchants.md) — and the key it replaces while a rotation runs.

use base64::Engine;
use serde::Deserialize;

use super::{ConfigError, invalid};
use crate::adapters::Secret;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSecrets {
    pub(super) key: Option<Secret>,
    pub(super) previous_key: Option<Secret>,
}

/// `secrets.*` (docs/configuration.md).
#[derive(Debug, Clone, Default)]
pub struct SecretsSettings {
    /// 32 bytes, base64: seals every new value. Required once a merchant holds a secret.
    pub key: Option<Secret>,
    /// The key `key` replaced: values sealed under it still open until `app secrets rotate`
    /// seals them again under `key`.
    pub previous_key: Option<Secret>,
}

/// `value` if it is 32 bytes of standard base64.
fn key(name: &str, value: Option<Secret>) -> Result<Option<Secret>, ConfigError> {
    let Some(value) = value.filter(|v| !v.expose().trim().is_empty()) else { return Ok(None) };
    match base64::engine::general_purpose::STANDARD.decode(value.expose().trim()) {
        Ok(bytes) if bytes.len() == 32 => Ok(Some(Secret::new(value.expose().trim()))),
        _ => Err(invalid(name, "must be 32 random bytes in base64 (openssl rand -base64 32)")),
    }
}

pub(super) fn resolve_secrets(raw: RawSecrets) -> Result<SecretsSettings, ConfigError> {
    let key_ = key("secrets.key", raw.key)?;
    let previous_key = key("secrets.previous_key", raw.previous_key)?;
    if previous_key.is_some() && key_.is_none() {
        return Err(invalid("secrets.previous_key", "needs secrets.key, the key that replaces it"));
    }
    Ok(SecretsSettings { key: key_, previous_key })
}
