//! The identity provider's published key set (`auth.jwks_url`): fetched at start, cached,
//! fetched again for a `kid` the cache lacks (at most once per `auth.jwks_refresh_interval`)
//! and in the background once older than [`JWKS_MAX_AGE`].

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm as JwkAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use super::verifying::{VerifyingKey, validation};
use crate::adapters::http::problem::ApiError;

use crate::application::error::Chain;
use crate::application::ports::{Cause, Clock};

/// A cached key set older than this is fetched again in the background (so a key the
/// provider withdrew stops verifying within this time).
pub const JWKS_MAX_AGE: Duration = Duration::from_secs(600);

/// After a failed fetch the set is tried again no sooner than this (or the refresh
/// interval, when that is shorter): a provider down at start is picked up within seconds.
pub(super) const JWKS_RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// Deadline of one key-set fetch, and the most of it we read.
pub(super) const JWKS_TIMEOUT: Duration = Duration::from_secs(5);
pub(super) const JWKS_MAX_BYTES: usize = 1 << 20;

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

/// An identity provider's key set and when it was fetched.
pub(super) struct Jwks {
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
pub(super) struct JwksState {
    keys: HashMap<String, VerifyingKey>,
    fetched_at: Option<DateTime<Utc>>,
    attempted_at: Option<DateTime<Utc>>,
    /// The last fetch made because a token named a kid the cache lacked.
    unknown_kid_at: Option<DateTime<Utc>>,
    failure: Option<JwksError>,
}

pub(super) fn unavailable() -> ApiError {
    ApiError::new(
        actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
        "AUTH_UNAVAILABLE",
        "the identity provider's signing keys cannot be fetched; retry later",
    )
}

impl Jwks {
    pub(super) fn new(
        url: String,
        refresh_interval: Duration,
        issuer: Option<String>,
        audience: Option<String>,
        clock: Arc<dyn Clock>,
    ) -> Jwks {
        Jwks {
            clock,
            url,
            // Building a client fails only without a TLS provider, which the builder installs.
            client: crate::adapters::http_client::builder().timeout(JWKS_TIMEOUT).build().unwrap_or_default(),
            refresh_interval,
            issuer,
            audience,
            state: RwLock::new(JwksState::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, JwksState> {
        // A poisoned lock only means a panic elsewhere while writing plain data: keep going.
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long ago `at` was, by the clock (zero for an instant in the future).
    pub(super) fn since(&self, at: DateTime<Utc>) -> Duration {
        (self.clock.now() - at).to_std().unwrap_or_default()
    }

    pub(super) fn key(&self, kid: &str) -> Option<VerifyingKey> {
        self.read().keys.get(kid).cloned()
    }

    /// The least time before the next fetch after `state`'s last attempt.
    pub(super) fn wait_after(&self, state: &JwksState) -> Duration {
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
    pub(super) async fn refresh_for_unknown_kid(&self) -> Result<(), ApiError> {
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
    pub(super) fn refresh_if_old(self: &Arc<Self>) {
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
    pub(super) fn old(&self) -> bool {
        let state = self.read();
        state.fetched_at.is_some_and(|at| self.since(at) >= JWKS_MAX_AGE)
            && state.attempted_at.is_none_or(|at| self.since(at) >= self.wait_after(&state))
    }

    pub(super) async fn fetch(&self) -> Result<usize, JwksError> {
        let _one = self.fetching.lock().await;
        self.fetch_locked().await
    }

    /// Fetches and replaces the set (keys the provider withdrew stop verifying). A failed
    /// fetch keeps the cached keys. The caller holds `fetching`.
    pub(super) async fn fetch_locked(&self) -> Result<usize, JwksError> {
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

    pub(super) async fn download(&self) -> Result<HashMap<String, VerifyingKey>, JwksError> {
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

    pub(super) fn usable(&self, jwk: &Jwk) -> Option<(String, VerifyingKey)> {
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
