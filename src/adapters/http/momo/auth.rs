//! The platform's access tokens, as its `JwtFilter` and `JwtTokenProvider` read them: from
//! the `Authorization=Bearer_<jwt>` cookie, else the `Authorization: Bearer <jwt>` header;
//! HMAC over the UTF-8 bytes of `jwt_secret` (its library takes HS256, and HS384/HS512
//! where the key is long enough); `sub` the user id, `category` `access`. Each refusal is a
//! 401 with its text (docs/dialects.md lists where it answers 500 instead).

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::MomoApi;
use super::envelope::{MomoError, text};
use crate::application::Actor;

/// The dialect's key.
pub struct MomoKeys {
    decoding: DecodingKey,
    /// The HMAC algorithms the key is long enough for.
    accepted: Vec<Algorithm>,
}

impl MomoKeys {
    /// # Errors
    /// The key cannot be made from the secret.
    pub fn new(secret: &[u8]) -> Result<Self, crate::adapters::SetupError> {
        let accepted = crate::adapters::http::auth::hmac_algorithms(secret.len());
        let decoding = DecodingKey::from_secret(secret)
            .map_err(|e| crate::adapters::SetupError(format!("http.dialects.momo.jwt_secret: {e}")))?;
        Ok(MomoKeys { decoding, accepted })
    }

    /// The user a token names, or the platform's text for why not.
    pub fn verify(&self, token: &str) -> Result<i64, &'static str> {
        #[derive(Deserialize)]
        struct Claims {
            sub: Option<String>,
            category: Option<String>,
            iat: Option<serde_json::Value>,
            nbf: Option<serde_json::Value>,
        }
        if token.trim().is_empty() {
            return Err(text::BAD_TOKEN);
        }
        // Its library reads the header's `alg` itself: one it cannot verify with an HMAC key
        // (`none`, RS256, …) is unsupported; a header it cannot read is malformed.
        let alg = match header_alg(token).as_deref() {
            None => return Err(text::BAD_SIGNATURE),
            Some("HS256") => Algorithm::HS256,
            Some("HS384") => Algorithm::HS384,
            Some("HS512") => Algorithm::HS512,
            Some(_) => return Err(text::UNSUPPORTED),
        };
        if !self.accepted.contains(&alg) {
            // A key too short for the algorithm: its library's weak-key refusal.
            return Err(text::BAD_SIGNATURE);
        }
        let mut validation = Validation::new(alg);
        validation.leeway = 0;
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp"]);
        let claims = match jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation) {
            Ok(data) => data.claims,
            Err(e) => {
                return Err(match e.kind() {
                    ErrorKind::ExpiredSignature => text::EXPIRED,
                    ErrorKind::MissingRequiredClaim(_) => text::BAD_TOKEN,
                    _ => text::BAD_SIGNATURE,
                });
            }
        };
        // docs/spec.md §5: issued, or valid only, in the future (beyond the leeway).
        if crate::adapters::http::auth::not_valid_yet(claims.iat.as_ref(), claims.nbf.as_ref()) {
            return Err(text::BAD_TOKEN);
        }
        if claims.category.as_deref() != Some("access") {
            return Err(text::NOT_ACCESS);
        }
        claims.sub.and_then(|s| s.parse::<i64>().ok()).ok_or(text::BAD_TOKEN)
    }
}

/// The `alg` of a compact JWT's header, if the header is readable.
fn header_alg(token: &str) -> Option<String> {
    use base64::Engine;
    let segment = token.split('.').next()?;
    let bytes =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(segment.trim_end_matches('=')).ok()?;
    let header: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    header.get("alg")?.as_str().map(str::to_owned)
}

/// The token came from the cookie: the answer clears it and hands the token back in the
/// `Authorization` header, as its filter does.
#[derive(Clone)]
pub struct FromCookie(pub String);

/// The `Authorization` cookie's value, if the request has one.
fn cookie(req: &HttpRequest) -> Option<String> {
    req.headers().get_all(header::COOKIE).filter_map(|v| v.to_str().ok()).find_map(|line| {
        line.split(';').find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == "Authorization").then(|| value.trim_matches('"').to_owned())
        })
    })
}

/// A request that changes something, sent from another site: a browser sends the cookie
/// with a cross-site form post, so a cookie is not proof of the member's intent there
/// (`Sec-Fetch-Site: cross-site`, or an `Origin` whose host is not this one).
fn cross_site(req: &HttpRequest) -> bool {
    if req.method().is_safe() {
        return false;
    }
    let header = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
    if header("sec-fetch-site").is_some_and(|site| site.eq_ignore_ascii_case("cross-site")) {
        return true;
    }
    let Some(origin) = header("origin") else { return false };
    let host = header("host").unwrap_or_default();
    let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    origin == "null" || !origin_host.eq_ignore_ascii_case(host)
}

/// The member calling: `401` with its text without a valid access token.
pub struct Member(pub Actor);

/// The caller of `req`.
///
/// # Errors
/// No token, or one its filter refuses.
pub fn member_of(req: &HttpRequest) -> Result<Actor, MomoError> {
    let api = req.app_data::<web::Data<MomoApi>>().ok_or_else(|| {
        MomoError::new(chrono_tz::Tz::UTC, StatusCode::INTERNAL_SERVER_ERROR, text::INTERNAL)
    })?;
    let unauthorized = |message| MomoError::new(api.zone, StatusCode::UNAUTHORIZED, message);
    // docs/spec.md §5: two credentials are none.
    if req.headers().get_all(header::AUTHORIZATION).count() > 1 {
        return Err(unauthorized(text::BAD_TOKEN));
    }
    let token = match cookie(req) {
        Some(value) => {
            if cross_site(req) {
                return Err(MomoError::new(api.zone, StatusCode::FORBIDDEN, text::CROSS_SITE));
            }
            let token = value
                .strip_prefix("Bearer_")
                .or_else(|| value.strip_prefix("Bearer "))
                .ok_or_else(|| unauthorized(text::BAD_FORMAT))?
                .to_owned();
            req.extensions_mut().insert(FromCookie(token.clone()));
            token
        }
        None => req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned)
            .ok_or_else(|| unauthorized(text::UNAUTHENTICATED))?,
    };
    let user = api.keys.verify(token.trim()).map_err(unauthorized)?;
    Ok(Actor::customer(user.to_string()).in_merchant(api.merchant))
}

impl FromRequest for Member {
    type Error = MomoError;
    type Future = Ready<Result<Self, MomoError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(member_of(req).map(Member))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};

    const SECRET: &[u8] = b"momo-platform-secret-key-0123456789";

    fn token(alg: Algorithm, claims: serde_json::Value) -> String {
        jsonwebtoken::encode(&Header::new(alg), &claims, &EncodingKey::from_secret(SECRET).unwrap()).unwrap()
    }

    #[test]
    fn its_refusals_carry_its_texts() {
        let keys = MomoKeys::new(SECRET).unwrap();
        let exp = chrono::Utc::now().timestamp() + 600;
        let good =
            token(Algorithm::HS256, serde_json::json!({ "sub": "7", "category": "access", "exp": exp }));
        assert_eq!(keys.verify(&good), Ok(7));
        let expired =
            token(Algorithm::HS256, serde_json::json!({ "sub": "7", "category": "access", "exp": 1 }));
        assert_eq!(keys.verify(&expired), Err(text::EXPIRED));
        let refresh =
            token(Algorithm::HS256, serde_json::json!({ "sub": "7", "category": "refresh", "exp": exp }));
        assert_eq!(keys.verify(&refresh), Err(text::NOT_ACCESS));
        let forged = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &serde_json::json!({ "sub": "7", "category": "access", "exp": exp }),
            &EncodingKey::from_secret(b"another-secret-another-secret-another").unwrap(),
        )
        .unwrap();
        assert_eq!(keys.verify(&forged), Err(text::BAD_SIGNATURE));
        assert_eq!(keys.verify("not.a.jwt"), Err(text::BAD_SIGNATURE));
        assert_eq!(keys.verify(""), Err(text::BAD_TOKEN));
        // 35 bytes: too short for HS384, as its library's weak-key check says.
        let strong =
            token(Algorithm::HS384, serde_json::json!({ "sub": "7", "category": "access", "exp": exp }));
        assert_eq!(keys.verify(&strong), Err(text::BAD_SIGNATURE));
        let unsigned = format!(
            "{}.{}.",
            base64_url(br#"{"alg":"none"}"#),
            base64_url(format!(r#"{{"sub":"7","category":"access","exp":{exp}}}"#).as_bytes())
        );
        assert_eq!(keys.verify(&unsigned), Err(text::UNSUPPORTED));
        let named =
            token(Algorithm::HS256, serde_json::json!({ "sub": "alice", "category": "access", "exp": exp }));
        assert_eq!(keys.verify(&named), Err(text::BAD_TOKEN));
        // docs/spec.md §5: issued or valid only in the future, beyond a minute's leeway.
        let now = chrono::Utc::now().timestamp();
        for (claim, at, accepted) in [
            ("iat", now + 3600, false),
            ("nbf", now + 3600, false),
            ("iat", now + 30, true),
            ("nbf", now - 5, true),
        ] {
            let t = token(
                Algorithm::HS256,
                serde_json::json!({ "sub": "7", "category": "access", "exp": exp, claim: at }),
            );
            let expected = if accepted { Ok(7) } else { Err(text::BAD_TOKEN) };
            assert_eq!(keys.verify(&t), expected, "{claim} {at}");
        }
    }

    fn base64_url(bytes: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }
}
