//! JWT bearer authentication (docs/spec.md §5). Keys are chosen by `kid` so they can rotate:
//! static keys from `auth.keys` (the first that can sign mints `app token`, all verify), and
//! an identity provider's published key set (`auth.jwks_url`) — fetched at start, cached,
//! fetched again when a token names a `kid` the cache lacks (at most once per
//! `auth.jwks_refresh_interval`) and in the background once the cached set is older than
//! [`JWKS_MAX_AGE`]. Roles are read from `auth.roles_claim` (a claim or a dotted path).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::future::LocalBoxFuture;
use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm as JwkAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::problem::ApiError;
use crate::adapters::Secret;
use crate::adapters::clock::SystemClock;
use crate::application::Actor;
use crate::application::error::Chain;
use crate::application::ports::{Cause, Clock};
use crate::domain::text;

pub const ADMIN_ROLE: &str = "admin";

/// The built-in signing key's id. It exists for the embedded default only.
pub const DEV_KID: &str = "dev";

/// How a static key signs and verifies (`auth.keys[].algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    Hs256,
    Rs256,
    Es256,
    EdDsa,
}

impl KeyAlgorithm {
    /// The algorithm a setting names (`HS256`, `RS256`, `ES256`, `EdDSA`).
    pub fn parse(name: &str) -> Option<KeyAlgorithm> {
        match name {
            "HS256" => Some(KeyAlgorithm::Hs256),
            "RS256" => Some(KeyAlgorithm::Rs256),
            "ES256" => Some(KeyAlgorithm::Es256),
            "EdDSA" => Some(KeyAlgorithm::EdDsa),
            _ => None,
        }
    }

    /// Whether its keys are public/private pairs (else a shared secret).
    pub fn is_asymmetric(self) -> bool {
        self != KeyAlgorithm::Hs256
    }

    fn jwt(self) -> Algorithm {
        match self {
            KeyAlgorithm::Hs256 => Algorithm::HS256,
            KeyAlgorithm::Rs256 => Algorithm::RS256,
            KeyAlgorithm::Es256 => Algorithm::ES256,
            KeyAlgorithm::EdDsa => Algorithm::EdDSA,
        }
    }
}

/// One static JWT key; the first that can sign mints tokens, all verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySettings {
    pub kid: String,
    pub algorithm: KeyAlgorithm,
    pub secret: Option<Secret>,
    pub public_key: Option<Secret>,
    pub private_key: Option<Secret>,
}

/// One key as a settings source writes it (`auth.keys`), before its algorithm is checked.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RawKey {
    pub kid: String,
    pub algorithm: String,
    #[serde(default)]
    pub secret: Option<Secret>,
    #[serde(default)]
    pub public_key: Option<Secret>,
    #[serde(default)]
    pub private_key: Option<Secret>,
}

/// Where tokens' keys come from and what a token must carry (`auth.*`).
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// Static keys (`auth.keys`); none when only an identity provider's key set is used.
    pub keys: Vec<KeySettings>,
    pub issuer: Option<String>,
    /// Required `aud` of every token (`auth.audience`); unchecked when unset.
    pub audience: Option<String>,
    /// Where the roles are in a token (`auth.roles_claim` \[roles\]): a claim name, or a
    /// dotted path such as `realm_access.roles`.
    pub roles_claim: String,
    /// An identity provider's published key set (`auth.jwks_url`).
    pub jwks_url: Option<String>,
    /// The least time between two fetches of the key set (`auth.jwks_refresh_interval`
    /// \[1m\]).
    pub jwks_refresh_interval: Duration,
}

impl AuthSettings {
    /// Whether the only key is the built-in development key.
    pub fn only_dev_key(&self) -> bool {
        self.jwks_url.is_none() && self.keys.iter().all(|k| k.kid == DEV_KID)
    }
}

/// How far a token's `iat`/`nbf` may lie in the future (clock skew between issuers).
pub const CLOCK_LEEWAY_SECS: u64 = 60;

/// A cached key set older than this is fetched again in the background (so a key the
/// provider withdrew stops verifying within this time).
pub const JWKS_MAX_AGE: Duration = Duration::from_secs(600);

/// After a failed fetch the set is tried again no sooner than this (or the refresh
/// interval, when that is shorter): a provider down at start is picked up within seconds.
const JWKS_RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// Deadline of one key-set fetch, and the most of it we read.
const JWKS_TIMEOUT: Duration = Duration::from_secs(5);
const JWKS_MAX_BYTES: usize = 1 << 20;

/// Why the identity provider's key set could not be used; tokens wait for a later fetch.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JwksError {
    /// No answer (refused, timed out, cut): reqwest's error with its chain.
    #[error("cannot fetch the key set")]
    Fetch(#[source] Cause),
    #[error("the identity provider answered {0}")]
    Status(u16),
    #[error("the key set is not JSON")]
    NotJson(#[source] Cause),
    #[error("{0}")]
    Unusable(&'static str),
}

/// What `app token` writes into a token.
#[derive(Debug, Serialize)]
struct MintedClaims<'a> {
    sub: &'a str,
    roles: &'a [String],
    exp: u64,
    iat: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    iss: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aud: Option<&'a str>,
}

#[derive(Clone)]
struct VerifyingKey {
    key: DecodingKey,
    validation: Validation,
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

fn bytes(secret: &Option<Secret>) -> &[u8] {
    secret.as_ref().map(|s| s.expose().as_bytes()).unwrap_or_default()
}

/// How tokens signed with `alg` are checked: signature, `exp` (30 s leeway), `sub`, and the
/// configured issuer and audience.
fn validation(alg: Algorithm, issuer: Option<&str>, audience: Option<&str>) -> Validation {
    let mut validation = Validation::new(alg);
    validation.leeway = 30;
    validation.set_required_spec_claims(&["exp", "sub"]);
    if let Some(iss) = issuer {
        validation.set_issuer(&[iss]);
    }
    match audience {
        Some(aud) => {
            validation.set_audience(&[aud]);
            // Without this a token that carries no `aud` at all would pass.
            validation.set_required_spec_claims(&["exp", "sub", "aud"]);
        }
        None => validation.validate_aud = false,
    }
    validation
}

fn invalid(why: &str) -> ApiError {
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
            let (decoding, encoding) = Self::material(k, alg).map_err(|e| invalid(&e))?;
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

    fn material(k: &KeySettings, alg: Algorithm) -> Result<(DecodingKey, Option<EncodingKey>), String> {
        let describe = |e: jsonwebtoken::errors::Error| format!("invalid key material ({:?})", e.kind());
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

    fn check(&self, token: &str, key: &VerifyingKey) -> Result<Actor, ApiError> {
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
        let now = chrono::Utc::now().timestamp().max(0) as u64;
        let future = |name: &str| {
            claims.get(name).and_then(Value::as_f64).is_some_and(|t| t > (now + CLOCK_LEEWAY_SECS) as f64)
        };
        if future("iat") || future("nbf") {
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
        Ok(Actor { subject: sub.to_owned(), is_admin, email })
    }
}

/// The roles a token carries at `path`: a claim of that exact name (Auth0's namespaced
/// claims are URLs with dots), else the dotted path (`realm_access.roles`). An array of
/// strings, or one space-separated string; anything else carries no role.
fn roles<'a>(claims: &'a Map<String, Value>, path: &str) -> Box<dyn Iterator<Item = &'a str> + 'a> {
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

/// An identity provider's key set and when it was fetched.
struct Jwks {
    url: String,
    client: reqwest::Client,
    refresh_interval: Duration,
    issuer: Option<String>,
    audience: Option<String>,
    state: RwLock<JwksState>,
    /// One fetch at a time: requests that find a fetch under way wait for its result.
    fetching: tokio::sync::Mutex<()>,
    clock: Arc<dyn Clock>,
}

#[derive(Default)]
struct JwksState {
    keys: HashMap<String, VerifyingKey>,
    fetched_at: Option<DateTime<Utc>>,
    attempted_at: Option<DateTime<Utc>>,
    /// The last fetch made because a token named a kid the cache lacked.
    unknown_kid_at: Option<DateTime<Utc>>,
    failure: Option<JwksError>,
}

fn unavailable() -> ApiError {
    ApiError::new(
        actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
        "AUTH_UNAVAILABLE",
        "the identity provider's signing keys cannot be fetched; retry later",
    )
}

impl Jwks {
    fn new(
        url: String,
        refresh_interval: Duration,
        issuer: Option<String>,
        audience: Option<String>,
        clock: Arc<dyn Clock>,
    ) -> Jwks {
        Jwks {
            clock,
            url,
            // Building a client fails only without a TLS provider; startup installs one.
            client: reqwest::Client::builder().timeout(JWKS_TIMEOUT).build().unwrap_or_default(),
            refresh_interval,
            issuer,
            audience,
            state: RwLock::new(JwksState::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, JwksState> {
        // A poisoned lock only means a panic elsewhere while writing plain data: keep going.
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long ago `at` was, by the clock (zero for an instant in the future).
    fn since(&self, at: DateTime<Utc>) -> Duration {
        (self.clock.now() - at).to_std().unwrap_or_default()
    }

    fn key(&self, kid: &str) -> Option<VerifyingKey> {
        self.read().keys.get(kid).cloned()
    }

    /// The least time before the next fetch after `state`'s last attempt.
    fn wait_after(&self, state: &JwksState) -> Duration {
        if state.failure.is_some() {
            self.refresh_interval.min(JWKS_RETRY_AFTER_FAILURE)
        } else {
            self.refresh_interval
        }
    }

    /// A token names a `kid` we lack: fetch the set again unless one was fetched (or tried)
    /// within the refresh interval.
    ///
    /// # Errors
    /// `503 AUTH_UNAVAILABLE` when the last fetch failed.
    async fn refresh_for_unknown_kid(&self) -> Result<(), ApiError> {
        let _one = self.fetching.lock().await;
        let recent = {
            let state = self.read();
            // After a failure any attempt counts (the provider is not hammered while down);
            // otherwise only fetches made for unknown kids do (a rotation right after start
            // or a background fetch is still picked up at once).
            let last = if state.failure.is_some() { state.attempted_at } else { state.unknown_kid_at };
            last.is_some_and(|at| self.since(at) < self.wait_after(&state)).then(|| state.failure.is_none())
        };
        match recent {
            Some(true) => Ok(()),
            Some(false) => Err(unavailable()),
            None => {
                let fetched = self.fetch_locked().await;
                self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner).unknown_kid_at =
                    Some(self.clock.now());
                fetched.map(|_| ()).map_err(|_| unavailable())
            }
        }
    }

    /// Starts a background fetch when the cached set is older than [`JWKS_MAX_AGE`].
    fn refresh_if_old(self: &Arc<Self>) {
        // No task while a fetch is under way (`try_lock` fails then).
        if self.old() && self.fetching.try_lock().is_ok() {
            let jwks = self.clone();
            tokio::spawn(async move {
                let _one = jwks.fetching.lock().await;
                // Requests that found the set old at the same moment each spawned this: only
                // the first still finds it old once it holds the lock.
                if jwks.old() {
                    let _ = jwks.fetch_locked().await;
                }
            });
        }
    }

    /// The cached set is older than [`JWKS_MAX_AGE`] and no fetch was tried too recently.
    fn old(&self) -> bool {
        let state = self.read();
        state.fetched_at.is_some_and(|at| self.since(at) >= JWKS_MAX_AGE)
            && state.attempted_at.is_none_or(|at| self.since(at) >= self.wait_after(&state))
    }

    async fn fetch(&self) -> Result<usize, JwksError> {
        let _one = self.fetching.lock().await;
        self.fetch_locked().await
    }

    /// Fetches and replaces the set (keys the provider withdrew stop verifying). A failed
    /// fetch keeps the cached keys. The caller holds `fetching`.
    async fn fetch_locked(&self) -> Result<usize, JwksError> {
        let result = self.download().await;
        let mut state = self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.attempted_at = Some(self.clock.now());
        match result {
            Ok(keys) => {
                let n = keys.len();
                state.keys = keys;
                state.fetched_at = state.attempted_at;
                state.failure = None;
                tracing::info!(url = %self.url, keys = n, "identity provider key set fetched");
                Ok(n)
            }
            Err(why) => {
                tracing::warn!(url = %self.url, error = %Chain(&why), "identity provider key set cannot be fetched; cached keys kept");
                state.failure = Some(why.clone());
                Err(why)
            }
        }
    }

    async fn download(&self) -> Result<HashMap<String, VerifyingKey>, JwksError> {
        let fetch = |e: reqwest::Error| JwksError::Fetch(Cause::new(e));
        let mut response = self.client.get(&self.url).send().await.map_err(fetch)?;
        if !response.status().is_success() {
            return Err(JwksError::Status(response.status().as_u16()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(fetch)? {
            if body.len() + chunk.len() > JWKS_MAX_BYTES {
                return Err(JwksError::Unusable("the key set is over 1 MiB"));
            }
            body.extend_from_slice(&chunk);
        }
        let set: Value = serde_json::from_slice(&body).map_err(|e| JwksError::NotJson(Cause::new(e)))?;
        let entries =
            set.get("keys").and_then(Value::as_array).ok_or(JwksError::Unusable("no `keys` array"))?;
        let mut keys = HashMap::new();
        for entry in entries {
            // One key we cannot use (an encryption key, another algorithm) never hides the others.
            let Ok(jwk) = serde_json::from_value::<Jwk>(entry.clone()) else { continue };
            if let Some((kid, key)) = self.usable(&jwk) {
                keys.insert(kid, key);
            }
        }
        if keys.is_empty() {
            return Err(JwksError::Unusable(
                "the key set holds no RS256, ES256 or EdDSA signing key with a kid",
            ));
        }
        Ok(keys)
    }

    fn usable(&self, jwk: &Jwk) -> Option<(String, VerifyingKey)> {
        let kid = jwk.common.key_id.clone()?;
        if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
            return None;
        }
        let alg = match (jwk.common.key_algorithm, &jwk.algorithm) {
            (Some(JwkAlgorithm::RS256), AlgorithmParameters::RSA(_)) => Algorithm::RS256,
            (Some(JwkAlgorithm::ES256), AlgorithmParameters::EllipticCurve(p))
                if p.curve == EllipticCurve::P256 =>
            {
                Algorithm::ES256
            }
            (Some(JwkAlgorithm::EdDSA), AlgorithmParameters::OctetKeyPair(p))
                if p.curve == EllipticCurve::Ed25519 =>
            {
                Algorithm::EdDSA
            }
            (None, AlgorithmParameters::RSA(_)) => Algorithm::RS256,
            (None, AlgorithmParameters::EllipticCurve(p)) if p.curve == EllipticCurve::P256 => {
                Algorithm::ES256
            }
            (None, AlgorithmParameters::OctetKeyPair(p)) if p.curve == EllipticCurve::Ed25519 => {
                Algorithm::EdDSA
            }
            _ => return None,
        };
        let key = DecodingKey::from_jwk(jwk).ok()?;
        Some((
            kid,
            VerifyingKey {
                key,
                validation: validation(alg, self.issuer.as_deref(), self.audience.as_deref()),
            },
        ))
    }
}

/// The token of an `Authorization` value whose scheme is `Bearer` in any case (RFC 9110:
/// auth schemes are case-insensitive).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The authenticated caller of a handler. Extracting it answers `401` without a valid token.
pub struct Caller(pub Actor);

impl Caller {
    /// `403` unless the caller is an admin.
    ///
    /// # Errors
    /// `403 FORBIDDEN` for a non-admin.
    pub fn require_admin(&self) -> Result<&Actor, ApiError> {
        if self.0.is_admin { Ok(&self.0) } else { Err(ApiError::forbidden("admin role required")) }
    }
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Caller, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let found = (|| {
            let keys = req
                .app_data::<web::Data<JwtKeys>>()
                .ok_or_else(|| ApiError::unauthenticated("authentication is not configured"))?;
            let mut headers = req.headers().get_all(actix_web::http::header::AUTHORIZATION);
            let header = headers.next().ok_or_else(|| ApiError::unauthenticated("missing bearer token"))?;
            if headers.next().is_some() {
                // Which one would count is a guess an attacker could steer: refuse both.
                return Err(ApiError::unauthenticated("more than one Authorization header"));
            }
            let value =
                header.to_str().map_err(|_| ApiError::unauthenticated("malformed Authorization header"))?;
            let token = bearer_token(value)
                .ok_or_else(|| ApiError::unauthenticated("expected `Authorization: Bearer <token>`"))?;
            Ok((keys.clone(), token.to_owned()))
        })();
        Box::pin(async move {
            let (keys, token) = found?;
            keys.verify(&token).await.map(Caller)
        })
    }
}

/// An authenticated caller with role `admin`; extracting it answers `401` without a valid
/// token and `403` without the role — before the request body is even read.
pub struct Admin(pub Actor);

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Admin, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let caller = Caller::from_request(req, payload);
        Box::pin(async move {
            let caller = caller.await?;
            caller.require_admin().map(|actor| Admin(actor.clone()))
        })
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
