//! What `auth.*` configures: the static keys, their algorithms, the identity provider's key
//! set, the roles' claim.

use std::time::Duration;

use jsonwebtoken::Algorithm;
use serde::Deserialize;

use crate::adapters::Secret;

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

    pub(super) fn jwt(self) -> Algorithm {
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
