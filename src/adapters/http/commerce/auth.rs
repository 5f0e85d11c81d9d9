//! The platform's demo tokens: HMAC over the UTF-8 bytes of `jwt_secret`, the algorithm
//! chosen by the key's length as its JWT library does (64 bytes or more: HS512; 48: HS384;
//! else HS256), claims `sub, iss, iat, exp, roles`. A token is accepted under any of the
//! three the key is long enough for; its signature and expiry are checked, its issuer not
//! (as the platform).

use std::future::{Ready, ready};
use std::time::{SystemTime, UNIX_EPOCH};

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, web};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::CommerceApi;
use super::CommerceDialectSettings;
use super::envelope::CommerceError;
use crate::application::Actor;
use crate::domain::ids::MerchantId;

pub type Roles = Vec<String>;

/// The dialect's key, to mint (demo tokens) and to verify.
pub struct CommerceKeys {
    signing: (Algorithm, EncodingKey),
    decoding: DecodingKey,
    /// The algorithms the key is long enough for.
    accepted: Vec<Algorithm>,
    issuer: String,
    validity_secs: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iat: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nbf: Option<serde_json::Value>,
    exp: u64,
    /// A list of names, or nothing: any other shape (an object, a number) refuses the token
    /// rather than grant a role by accident.
    #[serde(default)]
    roles: Option<Roles>,
}

impl CommerceKeys {
    /// # Errors
    /// The key cannot be made from the secret.
    pub fn new(settings: &CommerceDialectSettings) -> Result<Self, crate::adapters::SetupError> {
        let secret = settings.jwt_secret.expose().as_bytes();
        let accepted = crate::adapters::http::auth::hmac_algorithms(secret.len());
        // The strongest the key allows signs, as the platform's library picks it; the
        // settings refuse a key under 32 bytes, so there is always one.
        let strongest = accepted.first().copied().unwrap_or(Algorithm::HS256);
        let bad = |e: jsonwebtoken::errors::Error| {
            crate::adapters::SetupError(format!("http.dialects.commerce.jwt_secret: {e}"))
        };
        Ok(CommerceKeys {
            signing: (strongest, EncodingKey::from_secret(secret).map_err(bad)?),
            decoding: DecodingKey::from_secret(secret).map_err(bad)?,
            accepted,
            issuer: settings.issuer.clone(),
            validity_secs: settings.token_validity.as_secs(),
        })
    }

    /// A demo token for `username` with `roles`.
    ///
    /// # Errors
    /// Signing failed (it does not with an HMAC key).
    pub fn mint(&self, username: &str, roles: &[String]) -> Result<String, jsonwebtoken::errors::Error> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let claims = Claims {
            sub: username.to_owned(),
            iss: Some(self.issuer.clone()),
            iat: Some(now.into()),
            nbf: None,
            exp: now + self.validity_secs,
            roles: Some(roles.to_vec()),
        };
        jsonwebtoken::encode(&Header::new(self.signing.0), &claims, &self.signing.1)
    }

    /// The caller a token names, if its signature and expiry hold.
    fn verify(&self, token: &str) -> Option<Caller> {
        let alg = jsonwebtoken::decode_header(token).ok()?.alg;
        if !self.accepted.contains(&alg) {
            return None;
        }
        let mut validation = Validation::new(alg);
        validation.leeway = 0;
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp", "sub"]);
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation).ok()?.claims;
        if claims.sub.trim().is_empty()
            || crate::adapters::http::auth::not_valid_yet(claims.iat.as_ref(), claims.nbf.as_ref())
        {
            return None;
        }
        Some(Caller { username: claims.sub, roles: claims.roles.unwrap_or_default(), merchant: None })
    }
}

/// Who called, as the platform's security sees it: a user name and roles.
#[derive(Debug, Clone)]
pub struct Caller {
    pub username: String,
    pub roles: Roles,
    /// The merchant the dialect's orders are (`http.dialects.commerce.merchant`; `None`:
    /// `DEFAULT`).
    pub merchant: Option<MerchantId>,
}

/// The caller of `req`: `401 UNAUTHORIZED` without a valid bearer token (the platform
/// answers an invalid or expired one 500; docs/dialects.md).
///
/// # Errors
/// No token, or one that does not verify.
pub fn caller_of(req: &HttpRequest) -> Result<Caller, CommerceError> {
    let api = req.app_data::<web::Data<CommerceApi>>().ok_or_else(CommerceError::internal)?;
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(CommerceError::unauthorized)?;
    let caller = api.keys.verify(token.trim()).ok_or_else(CommerceError::unauthorized)?;
    Ok(Caller { merchant: api.merchant, ..caller })
}

/// The role its `/api/admin/**` paths need.
pub const ADMIN_ROLE: &str = "ROLE_ADMIN";

impl Caller {
    /// Who this caller is in our audit log and use cases. The platform authorizes its
    /// order paths by authentication alone (any signed-in user orders for any `customerId`
    /// and reads any order), so a caller here may act on any order (docs/dialects.md); only
    /// its `ROLE_ADMIN` is our operator role.
    pub fn actor(&self) -> Actor {
        let subject = format!("commerce:{}", self.username);
        if self.roles.iter().any(|r| r == ADMIN_ROLE) {
            Actor::admin(subject)
        } else {
            // Any order of the dialect's merchant, no other's.
            Actor::any_order(subject).in_merchant(self.merchant)
        }
    }
}

/// A handler's signed-in caller (`/api/**`): `401` without a valid token.
pub struct SignedIn(pub Caller);

impl FromRequest for SignedIn {
    type Error = CommerceError;
    type Future = Ready<Result<Self, CommerceError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(req).map(SignedIn))
    }
}

/// A handler's operator (`/api/admin/**`): `401` without a valid token, `403 FORBIDDEN`
/// without `ROLE_ADMIN` in its `roles`.
pub struct Operator(pub Caller);

impl FromRequest for Operator {
    type Error = CommerceError;
    type Future = Ready<Result<Self, CommerceError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller_of(req).and_then(|caller| {
            if caller.roles.iter().any(|r| r == ADMIN_ROLE) {
                Ok(Operator(caller))
            } else {
                Err(CommerceError::forbidden())
            }
        }))
    }
}
