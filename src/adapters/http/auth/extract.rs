//! The extractors handlers take: [`Caller`] (any valid bearer token), [`Admin`], and on
//! `/api/merchants` [`InMerchant`] and [`PlatformOperator`] — the only ones a merchant API
//! key (`mk_…`, docs/spec.md §15) passes: a key acts only under its merchant's path, and
//! anywhere else is `403`.

use std::marker::PhantomData;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::future::LocalBoxFuture;

use super::keys::JwtKeys;
use crate::adapters::http::problem::ApiError;

use crate::adapters::http::HttpState;
use crate::adapters::http::merchants::merchant_id;
use crate::application::Actor;
use crate::application::merchants::keys::{self, KEY_MARK};
use crate::application::merchants::{Authorized, FORBIDDEN};
use crate::domain::merchant::Need;

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

/// The caller of `req`: a verified token (a customer's of a merchant other than `DEFAULT`
/// only while that merchant exists and is active), or a merchant API key that lets its
/// bearer in; `401` for anything else.
fn authenticate(req: &HttpRequest) -> LocalBoxFuture<'static, Result<Actor, ApiError>> {
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
        let merchants = req.app_data::<web::Data<HttpState>>().map(|state| state.merchants.clone());
        Ok((keys.clone(), merchants, token.to_owned()))
    })();
    Box::pin(async move {
        let (keys, merchants, token) = found?;
        if token.starts_with(KEY_MARK) {
            // Never parsed as a JWT: a key, or nothing.
            let Some(merchants) = merchants else { return Err(ApiError::unauthenticated("invalid API key")) };
            return merchants
                .authenticate_key(&token)
                .await?
                .ok_or_else(|| ApiError::unauthenticated("invalid API key"));
        }
        let actor = keys.verify(&token).await?;
        if !actor.is_admin
            && let Some(merchants) = merchants
        {
            merchants.admit_customer(&actor).await?;
        }
        Ok(actor)
    })
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Caller, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        // A merchant key acts only under its merchant's path: anywhere else it is refused
        // as it is presented, without a look-up (so no body is read before the refusal, and
        // no answer here tells whether the key is good).
        let presented = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .filter(|token| token.starts_with(KEY_MARK))
            .map(|token| keys::presented(token).is_some());
        if let Some(well_formed) = presented {
            let refusal = if well_formed {
                ApiError::forbidden("a merchant API key acts only under /api/merchants/{id}")
            } else {
                ApiError::unauthenticated("invalid API key")
            };
            return Box::pin(async move { Err(refusal) });
        }
        let actor = authenticate(req);
        Box::pin(async move { actor.await.map(Caller) })
    }
}

/// `A`, then `B`: the second is extracted only once the first is. Actix polls a handler's
/// extractors together, so a body that fails to decode could answer before the caller is
/// refused; `Then<caller, body>` keeps the order of checks (`401`, `403`, then the body).
pub struct Then<A, B>(pub A, pub B);

impl<A, B> FromRequest for Then<A, B>
where
    A: FromRequest + 'static,
    B: FromRequest + 'static,
{
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Then<A, B>, actix_web::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let mut payload = payload.take();
        Box::pin(async move {
            let first = A::from_request(&req, &mut Payload::None).await.map_err(Into::into)?;
            let second = B::from_request(&req, &mut payload).await.map_err(Into::into)?;
            Ok(Then(first, second))
        })
    }
}

/// What a merchant's path asks of its caller: a marker naming a [`Need`].
pub trait Needs {
    const NEED: Need;
}

/// Reads the merchant's orders, stores and reports.
pub struct Reads;
/// Places orders.
pub struct Places;
/// Refunds, repairs, registers stores.
pub struct Writes;

impl Needs for Reads {
    const NEED: Need = Need::Read;
}
impl Needs for Places {
    const NEED: Need = Need::PlaceOrders;
}
impl Needs for Writes {
    const NEED: Need = Need::Write;
}

/// The caller of `/api/merchants/{id}/…`, authenticated (`401`) and authorized for the
/// merchant (`403`, the one answer to every "no") before anything else of the request is
/// read — its body included: the commerce backend's order of checks.
pub struct InMerchant<N> {
    /// The merchant and the caller scoped to it, handed to the use cases as it is.
    pub auth: Authorized,
    need: PhantomData<N>,
}

impl<N> std::ops::Deref for InMerchant<N> {
    type Target = Authorized;

    fn deref(&self) -> &Authorized {
        &self.auth
    }
}

impl<N: Needs + 'static> FromRequest for InMerchant<N> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<InMerchant<N>, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let actor = authenticate(req);
        let raw = req.match_info().get("id").unwrap_or_default().to_owned();
        let merchants = req.app_data::<web::Data<HttpState>>().map(|state| state.merchants.clone());
        Box::pin(async move {
            let caller = actor.await?;
            let merchants = merchants.ok_or_else(|| ApiError::forbidden("merchants are not served here"))?;
            let id = merchant_id(&caller, &raw)?;
            let auth = merchants.authorize(&caller, id, N::NEED).await?;
            Ok(InMerchant { auth, need: PhantomData })
        })
    }
}

/// Any authenticated caller of `/api/merchants`, a merchant key included: for the list of
/// the merchants it may act on.
pub struct MerchantsCaller(pub Actor);

impl FromRequest for MerchantsCaller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<MerchantsCaller, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let actor = authenticate(req);
        Box::pin(async move { actor.await.map(MerchantsCaller) })
    }
}

/// The platform operator on `/api/merchants…`: `401`, then `403` for anyone else (a
/// member, a key) — before the body is read.
pub struct PlatformOperator(pub Actor);

impl FromRequest for PlatformOperator {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<PlatformOperator, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let actor = authenticate(req);
        Box::pin(async move {
            let actor = actor.await?;
            if !actor.is_admin {
                return Err(ApiError::new(
                    actix_web::http::StatusCode::FORBIDDEN,
                    FORBIDDEN,
                    "not allowed for this merchant",
                ));
            }
            Ok(PlatformOperator(actor))
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
