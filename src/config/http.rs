//! `http.*`: the native listener and the two platforms' HTTP dialects (docs/spec.md §14), each
//! on a listener of its own.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::payment::{RawPayment, payment_is_mock};
use super::resolve::{address, positive};
use super::{ConfigError, invalid};
use crate::adapters::Secret;
use crate::adapters::http::auth::HMAC_SHORTEST;
use crate::adapters::http::commerce::CommerceDialectSettings;
use crate::adapters::http::momo::MomoDialectSettings;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub(super) bind: String,
    /// Other platforms' HTTP APIs (docs/spec.md §14).
    #[serde(default)]
    pub(super) dialects: RawDialects,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDialects {
    #[serde(default)]
    pub(super) commerce: RawCommerceDialect,
    #[serde(default)]
    pub(super) momo: RawMomoDialect,
}

/// `http.dialects.momo.*`: off while `bind` is unset.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMomoDialect {
    pub(super) bind: Option<String>,
    /// The platform's `jwt.secret.key`: its access tokens are HS256 over its UTF-8 bytes.
    pub(super) jwt_secret: Option<Secret>,
}

/// `http.dialects.commerce.*`: off while `bind` is unset.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCommerceDialect {
    pub(super) bind: Option<String>,
    pub(super) jwt_secret: Option<Secret>,
    /// `POST /api/auth/token` (the platform's demo tokens).
    #[serde(default)]
    pub(super) demo_token: bool,
    /// How long a demo token holds (the platform's `access-token-validity-seconds`).
    pub(super) token_validity: Option<String>,
    /// The demo tokens' `iss` (the platform's `app.security.jwt.issuer`).
    pub(super) issuer: Option<String>,
    /// How long an order made here waits in `CREATED` for its `orchestrate`.
    pub(super) hold_expiry: Option<String>,
    /// The code of the merchant whose orders the dialect's are (docs/spec.md §15).
    pub(super) merchant: String,
}

#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub bind: SocketAddr,
    /// `http.dialects.commerce` (docs/spec.md §14); `None` while its `bind` is unset.
    pub commerce: Option<CommerceDialectSettings>,
    /// `http.dialects.momo` (docs/spec.md §14); `None` while its `bind` is unset.
    pub momo: Option<MomoDialectSettings>,
    /// `http.dialects.commerce.hold_expiry` [24h]: read whether or not the dialect is on,
    /// so that orders held before it was switched off still expire.
    pub hold_expiry: Duration,
}

/// `http.dialects.commerce` (docs/spec.md §14): off while `bind` is unset. Its key is the
/// platform's: HMAC over the secret's UTF-8 bytes, which its JWT library refuses under 32
/// bytes; its demo tokens only with simulated payments, as the platform allows demo mode
/// only outside production.
pub(super) fn resolve_commerce_dialect(
    raw: RawCommerceDialect,
    payment: &RawPayment,
) -> Result<Option<CommerceDialectSettings>, ConfigError> {
    let payment_mock = payment_is_mock(payment);
    let Some(bind) = raw.bind.filter(|b| !b.trim().is_empty()) else {
        return Ok(None);
    };
    let bind = address("http.dialects.commerce.bind", &bind)?;
    let jwt_secret = raw
        .jwt_secret
        .filter(|s| !s.expose().is_empty())
        .ok_or_else(|| invalid("http.dialects.commerce.jwt_secret", "is required when its bind is set"))?;
    if jwt_secret.expose().len() < HMAC_SHORTEST {
        return Err(invalid(
            "http.dialects.commerce.jwt_secret",
            "must be at least 32 bytes (HS256's key size; 48 for HS384, 64 for HS512)",
        ));
    }
    if payment.provider.as_deref() == Some("toss") {
        // Toss charges what a customer authorized (its widget, a saved card); an order made
        // here carries neither, so every one would be declined (docs/dialects.md).
        return Err(invalid(
            "http.dialects.commerce.bind",
            "its orders carry no card for Toss to charge: use payment.provider = mock or external",
        ));
    }
    if raw.demo_token && !payment_mock {
        return Err(invalid(
            "http.dialects.commerce.demo_token",
            "mints tokens for anyone: only with payment.provider = mock",
        ));
    }
    let token_validity = match raw.token_validity.as_deref() {
        None => Duration::from_secs(3600),
        Some(text) => positive("http.dialects.commerce.token_validity", text)?,
    };
    let issuer = raw.issuer.unwrap_or_else(|| "commerce-orchestration-backend".to_owned());
    let merchant = super::merchant_code("http.dialects.commerce.merchant", &raw.merchant)?;
    Ok(Some(CommerceDialectSettings {
        bind,
        jwt_secret,
        demo_token: raw.demo_token,
        token_validity,
        issuer,
        merchant,
    }))
}

/// `http.dialects.momo` (docs/spec.md §14): off while `bind` is unset. Its key is the
/// platform's `jwt.secret.key`, which it refuses under 32 bytes.
pub(super) fn resolve_momo_dialect(raw: RawMomoDialect) -> Result<Option<MomoDialectSettings>, ConfigError> {
    let Some(bind) = raw.bind.filter(|b| !b.trim().is_empty()) else {
        return Ok(None);
    };
    let bind = address("http.dialects.momo.bind", &bind)?;
    let jwt_secret = raw
        .jwt_secret
        .filter(|s| !s.expose().is_empty())
        .ok_or_else(|| invalid("http.dialects.momo.jwt_secret", "is required when its bind is set"))?;
    if jwt_secret.expose().len() < HMAC_SHORTEST {
        return Err(invalid("http.dialects.momo.jwt_secret", "must be at least 32 bytes (HS256's key size)"));
    }
    Ok(Some(MomoDialectSettings { bind, jwt_secret }))
}
