//! [`JwtKeys`]: the configured keys by `kid`, ready to mint (`app token`) and to verify a
//! bearer token into an [`Actor`], its roles read at `auth.roles_claim`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use serde::Serialize;
use serde_json::{Map, Value};

use super::jwks::{Jwks, JwksError};
use super::settings::{ADMIN_ROLE, AuthSettings, KeySettings};
use super::verifying::{VerifyingKey, validation};
use crate::adapters::http::problem::ApiError;

use crate::adapters::clock::SystemClock;
use crate::adapters::{Secret, SetupError};
use crate::application::Actor;
use crate::application::ports::Clock;
use crate::domain::ids::MerchantId;
use crate::domain::text;

/// The HMAC algorithms a shared secret of `len` bytes is long enough for, strongest first:
/// a key is as long as its hash at least (RFC 7518 §3.2: HS256 32 bytes, HS384 48, HS512
/// 64), as the platforms' JWT libraries require (docs/dialects.md).
pub fn hmac_algorithms(len: usize) -> Vec<Algorithm> {
    [(64, Algorithm::HS512), (48, Algorithm::HS384), (32, Algorithm::HS256)]
        .into_iter()
        .filter(|(least, _)| len >= *least)
        .map(|(_, alg)| alg)
        .collect()
}

/// The shortest shared secret any HMAC algorithm takes (HS256's 32 bytes).
pub const HMAC_SHORTEST: usize = 32;

/// How far a token's `iat`/`nbf` may lie in the future (clock skew between issuers).
pub const CLOCK_LEEWAY_SECS: u64 = 60;

/// docs/spec.md §5: whether a token says it was issued, or becomes valid, more than
/// [`CLOCK_LEEWAY_SECS`] from now — refused on every listener (the native one and each
/// dialect's), whatever the issuer's library would have done.
pub fn not_valid_yet(iat: Option<&Value>, nbf: Option<&Value>) -> bool {
    let now = chrono::Utc::now().timestamp().max(0) as u64;
    let future = |claim: Option<&Value>| {
        claim.and_then(Value::as_f64).is_some_and(|t| t > (now + CLOCK_LEEWAY_SECS) as f64)
    };
    future(iat) || future(nbf)
}

/// What `app token` writes into a token.
#[derive(Debug, Serialize)]
pub(super) struct MintedClaims<'a> {
    sub: &'a str,
    roles: &'a [String],
    exp: u64,
    iat: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    iss: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aud: Option<&'a str>,
}

/// The configured keys, ready to sign and verify.
pub struct JwtKeys {
    signing: Option<(String, Algorithm, EncodingKey)>,
    verifying: HashMap<String, VerifyingKey>,
    issuer: Option<String>,
    audience: Option<String>,
    roles_claim: String,
    jwks: Option<Arc<Jwks>>,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("auth.keys[{index}]: {reason}")]
    Invalid { index: usize, reason: String },
    #[error("cannot sign a token: {0}")]
    Sign(String),
}

pub(super) fn bytes(secret: &Option<Secret>) -> &[u8] {
    secret.as_ref().map(|s| s.expose().as_bytes()).unwrap_or_default()
}

pub(super) fn invalid(why: &str) -> ApiError {
    ApiError::new(actix_web::http::StatusCode::UNAUTHORIZED, "INVALID_TOKEN", why.to_owned())
}

impl JwtKeys {
    /// Loads every configured static key; the identity provider's key set, if configured,
    /// is fetched by [`JwtKeys::load_key_set`] or on the first token that needs it.
    ///
    /// # Errors
    /// A key whose material does not parse, naming its index (never its material).
    pub fn from_settings(settings: &AuthSettings) -> Result<JwtKeys, KeyError> {
        Self::from_settings_with_clock(settings, Arc::new(SystemClock))
    }

    /// [`JwtKeys::from_settings`] on `clock`, which times the key set's fetches (tests
    /// move it by hand).
    ///
    /// # Errors
    /// As [`JwtKeys::from_settings`].
    pub fn from_settings_with_clock(
        settings: &AuthSettings,
        clock: Arc<dyn Clock>,
    ) -> Result<JwtKeys, KeyError> {
        let mut verifying = HashMap::new();
        let mut signing = None;
        for (index, k) in settings.keys.iter().enumerate() {
            let invalid = |reason: &str| KeyError::Invalid { index, reason: reason.to_owned() };
            if verifying.contains_key(&k.kid) {
                // Two keys with one kid: a token would verify against whichever came last.
                return Err(invalid(&format!("kid `{}` is used by an earlier key", k.kid)));
            }
            let alg = k.algorithm.jwt();
            let (decoding, encoding) = Self::material(k, alg).map_err(|e| invalid(&e.0))?;
            let validation = validation(alg, settings.issuer.as_deref(), settings.audience.as_deref());
            verifying.insert(k.kid.clone(), VerifyingKey { key: decoding, validation });
            if let (None, Some(encoding)) = (&signing, encoding) {
                signing = Some((k.kid.clone(), alg, encoding));
            }
        }
        let jwks = settings.jwks_url.as_ref().map(|url| {
            Arc::new(Jwks::new(
                url.clone(),
                settings.jwks_refresh_interval,
                settings.issuer.clone(),
                settings.audience.clone(),
                clock.clone(),
            ))
        });
        if signing.is_none() && jwks.is_none() {
            return Err(KeyError::Invalid {
                index: 0,
                reason: "no key can sign (an RS256/ES256/EdDSA key needs private_key)".into(),
            });
        }
        Ok(JwtKeys {
            signing,
            verifying,
            issuer: settings.issuer.clone(),
            audience: settings.audience.clone(),
            roles_claim: settings.roles_claim.clone(),
            jwks,
        })
    }

    pub(super) fn material(
        k: &KeySettings,
        alg: Algorithm,
    ) -> Result<(DecodingKey, Option<EncodingKey>), SetupError> {
        let describe =
            |e: jsonwebtoken::errors::Error| SetupError(format!("invalid key material ({:?})", e.kind()));
        let private = |parse: fn(&[u8]) -> jsonwebtoken::errors::Result<EncodingKey>| {
            k.private_key.as_ref().map(|p| parse(p.expose().as_bytes())).transpose().map_err(describe)
        };
        Ok(match alg {
            Algorithm::HS256 => (
                DecodingKey::from_secret(bytes(&k.secret)).map_err(describe)?,
                Some(EncodingKey::from_secret(bytes(&k.secret)).map_err(describe)?),
            ),
            Algorithm::RS256 => (
                DecodingKey::from_rsa_pem(bytes(&k.public_key)).map_err(describe)?,
                private(EncodingKey::from_rsa_pem)?,
            ),
            Algorithm::ES256 => (
                DecodingKey::from_ec_pem(bytes(&k.public_key)).map_err(describe)?,
                private(EncodingKey::from_ec_pem)?,
            ),
            _ => (
                DecodingKey::from_ed_pem(bytes(&k.public_key)).map_err(describe)?,
                private(EncodingKey::from_ed_pem)?,
            ),
        })
    }

    /// Fetches the identity provider's key set now (at start). Does nothing without
    /// `auth.jwks_url`.
    ///
    /// # Errors
    /// The set cannot be fetched or holds no usable key; tokens then wait for a later fetch.
    pub async fn load_key_set(&self) -> Result<usize, JwksError> {
        match &self.jwks {
            Some(jwks) => jwks.fetch().await,
            None => Ok(0),
        }
    }

    /// Mints a token for `sub` with the signing key.
    ///
    /// # Errors
    /// No static key can sign, or the key cannot.
    pub fn mint(&self, sub: &str, roles: &[String], ttl: Duration) -> Result<String, KeyError> {
        let Some((kid, alg, key)) = &self.signing else {
            return Err(KeyError::Sign(
                "no auth.keys entry can sign; tokens come from the identity provider at auth.jwks_url".into(),
            ));
        };
        let now = chrono::Utc::now().timestamp().max(0) as u64;
        let claims = MintedClaims {
            sub,
            roles,
            iat: now,
            exp: now + ttl.as_secs(),
            iss: self.issuer.as_deref(),
            aud: self.audience.as_deref(),
        };
        let mut header = Header::new(*alg);
        header.kid = Some(kid.clone());
        jsonwebtoken::encode(&header, &claims, key).map_err(|e| KeyError::Sign(format!("{:?}", e.kind())))
    }

    /// Verifies a bearer token and returns the caller it names.
    ///
    /// # Errors
    /// `401 INVALID_TOKEN` for a token that is malformed, expired, for another issuer or
    /// audience, signed with an unknown `kid` or a wrong key (the reason is generic on
    /// purpose); `503 AUTH_UNAVAILABLE` when its `kid` may be in the identity provider's
    /// key set but the set cannot be fetched.
    pub async fn verify(&self, token: &str) -> Result<Actor, ApiError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| invalid("malformed token"))?;
        let kid = header.kid.ok_or_else(|| invalid("token has no kid"))?;
        if let Some(key) = self.verifying.get(&kid) {
            return self.check(token, key);
        }
        let Some(jwks) = &self.jwks else { return Err(invalid("unknown signing key")) };
        if let Some(key) = jwks.key(&kid) {
            jwks.refresh_if_old();
            return self.check(token, &key);
        }
        jwks.refresh_for_unknown_kid().await?;
        match jwks.key(&kid) {
            Some(key) => self.check(token, &key),
            None => Err(invalid("unknown signing key")),
        }
    }

    pub(super) fn check(&self, token: &str, key: &VerifyingKey) -> Result<Actor, ApiError> {
        let data =
            jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &key.validation).map_err(|e| {
                use jsonwebtoken::errors::ErrorKind;
                match e.kind() {
                    ErrorKind::ExpiredSignature => invalid("token expired"),
                    ErrorKind::InvalidIssuer => invalid("wrong issuer"),
                    ErrorKind::InvalidAudience => invalid("wrong audience"),
                    _ => invalid("invalid token"),
                }
            })?;
        let claims = data.claims;
        if not_valid_yet(claims.get("iat"), claims.get("nbf")) {
            return Err(invalid("token not valid yet"));
        }
        let sub = claims.get("sub").and_then(Value::as_str).ok_or_else(|| invalid("invalid subject"))?;
        if sub.trim().is_empty() {
            return Err(invalid("invalid subject"));
        }
        // docs/spec.md §5: a claim is input like any other — control characters or an over-long
        // subject are 422 naming it, never stored.
        text::check("sub", sub, text::limits::ID).map_err(|e| {
            ApiError::field(actix_web::http::StatusCode::UNPROCESSABLE_ENTITY, e.field(), e.message())
        })?;
        let is_admin = roles(&claims, &self.roles_claim).any(|r| r == ADMIN_ROLE);
        // A claim that is no address we send to is not used (never a reason to refuse the token).
        let email =
            claims.get("email").and_then(Value::as_str).filter(|e| text::is_email(e)).map(str::to_owned);
        // docs/spec.md §15: a customer of another merchant than `DEFAULT` carries its id.
        let merchant = match claims.get("merchant") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_str()
                    .and_then(|m| m.parse::<MerchantId>().ok())
                    .ok_or_else(|| invalid("invalid merchant claim"))?,
            ),
        };
        // The operator acts on every merchant: a claim on its token narrows nothing.
        let actor = if is_admin { Actor::admin(sub) } else { Actor::customer(sub).in_merchant(merchant) };
        Ok(actor.with_email(email))
    }
}

/// The roles a token carries at `path`: a claim of that exact name (Auth0's namespaced
/// claims are URLs with dots), else the dotted path (`realm_access.roles`). An array of
/// strings, or one space-separated string; anything else carries no role.
pub(super) fn roles<'a>(
    claims: &'a Map<String, Value>,
    path: &str,
) -> Box<dyn Iterator<Item = &'a str> + 'a> {
    let found = claims.get(path).or_else(|| {
        let mut parts = path.split('.');
        let first = claims.get(parts.next()?)?;
        parts.try_fold(first, |value, part| value.get(part))
    });
    match found {
        Some(Value::Array(items)) => Box::new(items.iter().filter_map(Value::as_str)),
        Some(Value::String(s)) => Box::new(s.split_whitespace()),
        _ => Box::new(std::iter::empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_read_at_a_claim_name_or_a_dotted_path() {
        let claims: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "roles": ["admin", 7],
            "scope": "orders:read admin",
            "realm_access": { "roles": ["offline_access", "admin"] },
            "https://shop.example/roles": ["admin"],
            "nested": { "roles": { "admin": true } }
        }))
        .unwrap();
        for (path, expected) in [
            ("roles", vec!["admin"]),
            ("scope", vec!["orders:read", "admin"]),
            ("realm_access.roles", vec!["offline_access", "admin"]),
            ("https://shop.example/roles", vec!["admin"]),
            ("nested.roles", vec![]),
            ("realm_access.missing", vec![]),
            ("absent", vec![]),
        ] {
            assert_eq!(roles(&claims, path).collect::<Vec<_>>(), expected, "{path}");
        }
    }
}
