//! `auth.*`: the keys tokens are signed and verified with, or a JWKS URL to fetch them from.

use serde::Deserialize;

use super::resolve::{duration, redact};
use super::{ConfigError, DEV_SECRET, invalid};
use crate::adapters::Secret;
use crate::adapters::http::auth::{AuthSettings, DEV_KID, HMAC_SHORTEST, KeyAlgorithm, KeySettings, RawKey};

/// `auth.keys` arrives as a list from a file, or as one JSON string from the environment.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawKeys {
    List(Vec<RawKey>),
    Json(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    /// Unset: the built-in development key, unless an identity provider is configured.
    pub(super) keys: Option<RawKeys>,
    pub(super) issuer: Option<String>,
    pub(super) audience: Option<String>,
    pub(super) roles_claim: String,
    pub(super) jwks_url: Option<String>,
    pub(super) jwks_refresh_interval: String,
}

/// `auth.*`. The built-in development key off SQLite is refused where the service starts
/// (`Settings::require_explicit_production`), beside every other key production needs.
pub(super) fn resolve_auth(raw: RawAuth) -> Result<AuthSettings, ConfigError> {
    let raw_keys: Vec<RawKey> = match raw.keys {
        // With an identity provider, tokens are verified with its keys only.
        None if raw.jwks_url.is_some() => Vec::new(),
        None => vec![RawKey {
            kid: DEV_KID.into(),
            algorithm: "HS256".into(),
            secret: Some(Secret::new(DEV_SECRET)),
            public_key: None,
            private_key: None,
        }],
        Some(RawKeys::List(keys)) => keys,
        Some(RawKeys::Json(json)) => serde_json::from_str(&json).map_err(|e| {
            invalid("auth.keys", format!("not a JSON array of keys: {}", redact(&e.to_string())))
        })?,
    };
    if raw_keys.is_empty() && raw.jwks_url.is_none() {
        return Err(invalid("auth.keys", "must hold at least one key (or set auth.jwks_url)"));
    }
    let keys = raw_keys.into_iter().enumerate().map(|(i, k)| resolve_key(i, k)).collect::<Result<_, _>>()?;
    if let Some(url) = &raw.jwks_url
        && !(url.starts_with("https://") || url.starts_with("http://"))
    {
        return Err(invalid("auth.jwks_url", "must be an http:// or https:// URL"));
    }
    if raw.roles_claim.is_empty() || raw.roles_claim.split('.').any(str::is_empty) {
        return Err(invalid(
            "auth.roles_claim",
            "must be a claim name or a dotted path such as realm_access.roles",
        ));
    }
    if raw.audience.as_deref().is_some_and(str::is_empty) {
        return Err(invalid("auth.audience", "must not be empty"));
    }
    let auth = AuthSettings {
        keys,
        issuer: raw.issuer,
        audience: raw.audience,
        roles_claim: raw.roles_claim,
        jwks_url: raw.jwks_url,
        jwks_refresh_interval: duration("auth.jwks_refresh_interval", &raw.jwks_refresh_interval)?,
    };
    Ok(auth)
}

/// Error messages from the config crate may quote values; never let one carry a secret.
/// One static key, its algorithm parsed once and its material checked for presence.
pub(super) fn resolve_key(i: usize, key: RawKey) -> Result<KeySettings, ConfigError> {
    let name = format!("auth.keys[{i}]");
    let algorithm = KeyAlgorithm::parse(&key.algorithm).ok_or_else(|| {
        invalid(
            &format!("{name}.algorithm"),
            format!("`{}` is not HS256, RS256, ES256 or EdDSA", key.algorithm),
        )
    })?;
    if algorithm.is_asymmetric() && key.public_key.is_none() {
        return Err(invalid(&format!("{name}.public_key"), "is required for RS256, ES256 and EdDSA"));
    }
    if !algorithm.is_asymmetric() && key.secret.as_ref().is_none_or(|s| s.expose().len() < HMAC_SHORTEST) {
        return Err(invalid(&format!("{name}.secret"), "HS256 needs a secret of at least 32 bytes"));
    }
    if key.kid.is_empty() {
        return Err(invalid(&format!("{name}.kid"), "must not be empty"));
    }
    Ok(KeySettings {
        kid: key.kid,
        algorithm,
        secret: key.secret,
        public_key: key.public_key,
        private_key: key.private_key,
    })
}
