//! The extractors handlers take: [`Caller`] (any valid bearer token) and [`Admin`].

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::future::LocalBoxFuture;

use super::keys::JwtKeys;
use crate::adapters::http::problem::ApiError;

use crate::application::Actor;

/// The token of an `Authorization` value whose scheme is `Bearer` in any case (RFC 9110:
/// auth schemes are case-insensitive).
pub(super) fn bearer_token(value: &str) -> Option<&str> {
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
