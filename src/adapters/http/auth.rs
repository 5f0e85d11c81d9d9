//! JWT bearer authentication (SPEC §5): keys chosen by `kid` so they can rotate; the first
//! configured key signs (`app token`), every configured key verifies.

use std::collections::HashMap;
use std::future::{Ready, ready};
use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::problem::ApiError;
use crate::application::Actor;
use crate::config::{AuthSettings, KeySettings};
use crate::domain::text;

pub const ADMIN_ROLE: &str = "admin";

/// How far a token's `iat`/`nbf` may lie in the future (clock skew between issuers).
pub const CLOCK_LEEWAY_SECS: u64 = 60;

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    roles: Vec<String>,
    exp: u64,
    iat: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nbf: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iss: Option<String>,
}

struct VerifyingKey {
    key: DecodingKey,
    validation: Validation,
}

/// The configured keys, ready to sign and verify.
pub struct JwtKeys {
    signing: (String, Algorithm, EncodingKey),
    verifying: HashMap<String, VerifyingKey>,
    issuer: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("auth.keys[{index}]: {reason}")]
    Invalid { index: usize, reason: String },
    #[error("cannot sign a token: {0}")]
    Sign(String),
}

fn algorithm(name: &str) -> Option<Algorithm> {
    match name {
        "HS256" => Some(Algorithm::HS256),
        "RS256" => Some(Algorithm::RS256),
        "EdDSA" => Some(Algorithm::EdDSA),
        _ => None,
    }
}

fn bytes(secret: &Option<crate::config::Secret>) -> &[u8] {
    secret.as_ref().map(|s| s.expose().as_bytes()).unwrap_or_default()
}

impl JwtKeys {
    /// Loads every configured key.
    ///
    /// # Errors
    /// A key whose material does not parse, naming its index (never its material).
    pub fn from_settings(settings: &AuthSettings) -> Result<JwtKeys, KeyError> {
        let mut verifying = HashMap::new();
        let mut signing = None;
        for (index, k) in settings.keys.iter().enumerate() {
            let invalid = |reason: &str| KeyError::Invalid { index, reason: reason.to_owned() };
            if verifying.contains_key(&k.kid) {
                // Two keys with one kid: a token would verify against whichever came last.
                return Err(invalid(&format!("kid `{}` is used by an earlier key", k.kid)));
            }
            let alg = algorithm(&k.algorithm).ok_or_else(|| invalid("unknown algorithm"))?;
            let (decoding, encoding) = Self::material(k, alg).map_err(|e| invalid(&e))?;
            let mut validation = Validation::new(alg);
            validation.validate_aud = false;
            validation.leeway = 30;
            validation.set_required_spec_claims(&["exp", "sub"]);
            if let Some(iss) = &settings.issuer {
                validation.set_issuer(&[iss]);
            }
            verifying.insert(k.kid.clone(), VerifyingKey { key: decoding, validation });
            if let (None, Some(encoding)) = (&signing, encoding) {
                signing = Some((k.kid.clone(), alg, encoding));
            }
        }
        let signing = signing.ok_or(KeyError::Invalid {
            index: 0,
            reason: "no key can sign (an RS256/EdDSA key needs private_key)".into(),
        })?;
        Ok(JwtKeys { signing, verifying, issuer: settings.issuer.clone() })
    }

    fn material(k: &KeySettings, alg: Algorithm) -> Result<(DecodingKey, Option<EncodingKey>), String> {
        let describe = |e: jsonwebtoken::errors::Error| format!("invalid key material ({:?})", e.kind());
        Ok(match alg {
            Algorithm::HS256 => (
                DecodingKey::from_secret(bytes(&k.secret)).map_err(describe)?,
                Some(EncodingKey::from_secret(bytes(&k.secret)).map_err(describe)?),
            ),
            Algorithm::RS256 => (
                DecodingKey::from_rsa_pem(bytes(&k.public_key)).map_err(describe)?,
                k.private_key
                    .as_ref()
                    .map(|p| EncodingKey::from_rsa_pem(p.expose().as_bytes()))
                    .transpose()
                    .map_err(describe)?,
            ),
            _ => (
                DecodingKey::from_ed_pem(bytes(&k.public_key)).map_err(describe)?,
                k.private_key
                    .as_ref()
                    .map(|p| EncodingKey::from_ed_pem(p.expose().as_bytes()))
                    .transpose()
                    .map_err(describe)?,
            ),
        })
    }

    /// Mints a token for `sub` with the signing key.
    ///
    /// # Errors
    /// The key cannot sign.
    pub fn mint(&self, sub: &str, roles: &[String], ttl: Duration) -> Result<String, KeyError> {
        let now = chrono::Utc::now().timestamp().max(0) as u64;
        let claims = Claims {
            sub: sub.to_owned(),
            roles: roles.to_vec(),
            iat: now,
            nbf: None,
            exp: now + ttl.as_secs(),
            iss: self.issuer.clone(),
        };
        let (kid, alg, key) = &self.signing;
        let mut header = Header::new(*alg);
        header.kid = Some(kid.clone());
        jsonwebtoken::encode(&header, &claims, key).map_err(|e| KeyError::Sign(format!("{:?}", e.kind())))
    }

    /// Verifies a bearer token and returns the caller it names.
    ///
    /// # Errors
    /// `401 INVALID_TOKEN` for a token that is malformed, expired, signed with an unknown
    /// `kid` or a wrong key. The reason is generic on purpose.
    pub fn verify(&self, token: &str) -> Result<Actor, ApiError> {
        let invalid = |why: &str| {
            ApiError::new(actix_web::http::StatusCode::UNAUTHORIZED, "INVALID_TOKEN", why.to_owned())
        };
        let header = jsonwebtoken::decode_header(token).map_err(|_| invalid("malformed token"))?;
        let kid = header.kid.ok_or_else(|| invalid("token has no kid"))?;
        let key = self.verifying.get(&kid).ok_or_else(|| invalid("unknown signing key"))?;
        let data = jsonwebtoken::decode::<Claims>(token, &key.key, &key.validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            match e.kind() {
                ErrorKind::ExpiredSignature => invalid("token expired"),
                ErrorKind::InvalidIssuer => invalid("wrong issuer"),
                _ => invalid("invalid token"),
            }
        })?;
        let claims = data.claims;
        let now = chrono::Utc::now().timestamp().max(0) as u64;
        if claims.iat > now + CLOCK_LEEWAY_SECS || claims.nbf.is_some_and(|nbf| nbf > now + CLOCK_LEEWAY_SECS)
        {
            return Err(invalid("token not valid yet"));
        }
        if claims.sub.trim().is_empty() {
            return Err(invalid("invalid subject"));
        }
        // SPEC §5: a claim is input like any other — control characters or an over-long
        // subject are 422 naming it, never stored.
        text::check("sub", &claims.sub, text::limits::ID).map_err(|e| {
            ApiError::field(actix_web::http::StatusCode::UNPROCESSABLE_ENTITY, e.field(), e.message())
        })?;
        let is_admin = claims.roles.iter().any(|r| r == ADMIN_ROLE);
        Ok(Actor { subject: claims.sub, is_admin })
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
    type Future = Ready<Result<Caller, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let result = (|| {
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
            keys.verify(token).map(Caller)
        })();
        ready(result)
    }
}

/// An authenticated caller with role `admin`; extracting it answers `401` without a valid
/// token and `403` without the role — before the request body is even read.
pub struct Admin(pub Actor);

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Admin, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let result = Caller::from_request(req, payload)
            .into_inner()
            .and_then(|caller| caller.require_admin().map(|actor| Admin(actor.clone())));
        ready(result)
    }
}
