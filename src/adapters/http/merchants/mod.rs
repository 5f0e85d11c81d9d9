//! `/api/merchants` (docs/spec.md §15): the platform operator's merchants, their stores,
//! members and API keys. Every handler's caller is an [`InMerchant`] or a
//! [`PlatformOperator`], extracted before its body ([`Then`]): `401` first, then the one
//! `403` for every "no", and only then a body's `422` or a child resource's `404`.

pub mod dto;
pub mod orders;
pub mod repairs;
pub mod webhook_messages;
pub mod webhooks;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};

use super::HttpState;
use super::auth::{InMerchant, MerchantsCaller, PlatformOperator, Reads, Then, Writes};
use super::body::{JsonBody, MaybeJson};
use super::dto::ReasonRequest;
use super::problem::{ApiError, Problem};
use crate::application::Actor;
use crate::application::merchants::{FORBIDDEN, NewKey, NewMerchant};
use crate::domain::ids::{ApiKeyId, MerchantId, StoreId};
use crate::domain::merchant::{KeyRole, MemberRole};
use dto::{
    ApiKeyResponse, ChannelsRequest, ChannelsResponse, CreateKeyRequest, CreateMerchantRequest,
    CreateStoreRequest, CreatedKeyResponse, DailyReportResponse, MemberResponse, MerchantResponse,
    SetMemberRequest, StoreResponse,
};

/// The merchant a path names. One that is no id is no merchant: `403` like any merchant the
/// caller may not act on, `404` only to the platform operator.
pub(crate) fn merchant_id(actor: &Actor, raw: &str) -> Result<MerchantId, ApiError> {
    raw.parse().map_err(|_| {
        if actor.is_admin {
            ApiError::not_found("merchant")
        } else {
            ApiError::new(StatusCode::FORBIDDEN, FORBIDDEN, "not allowed for this merchant")
        }
    })
}

fn unprocessable(field: &str, message: &str) -> ApiError {
    ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, message)
}

/// Creates a merchant (platform operator).
#[utoipa::path(
    post,
    path = "/api/merchants",
    tag = "merchants",
    operation_id = "merchant_create",
    request_body = CreateMerchantRequest,
    responses(
        (status = 201, body = MerchantResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "DUPLICATE_MERCHANT_CODE", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "VALIDATION_FAILED naming code, name or timezone", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    state: web::Data<HttpState>,
    Then(caller, body): Then<PlatformOperator, JsonBody<CreateMerchantRequest>>,
) -> Result<HttpResponse, ApiError> {
    let CreateMerchantRequest { code, name, timezone } = body.value;
    let merchant = state.merchants.create(&caller.0, NewMerchant { code, name, timezone }).await?;
    Ok(HttpResponse::Created().json(MerchantResponse::from(&merchant)))
}

/// The merchants the caller may act on, by code: every one to the platform operator, a
/// key's own, a member's `ACTIVE` merchants; none to anyone else (the console's picker).
#[utoipa::path(
    get,
    path = "/api/merchants",
    tag = "merchants",
    operation_id = "merchant_list",
    responses(
        (status = 200, body = Vec<MerchantResponse>),
        (status = 401, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list(state: web::Data<HttpState>, caller: MerchantsCaller) -> Result<HttpResponse, ApiError> {
    let merchants = state.merchants.list(&caller.0).await?;
    Ok(HttpResponse::Ok().json(merchants.iter().map(MerchantResponse::from).collect::<Vec<_>>()))
}

/// One merchant, to anyone who may read it.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}",
    tag = "merchants",
    operation_id = "merchant_get",
    params(("id" = String, Path, description = "Merchant id")),
    responses(
        (status = 200, body = MerchantResponse),
        (status = 403, description = "FORBIDDEN: the same for every merchant the caller may not read", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn get(caller: InMerchant<Reads>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(MerchantResponse::from(&caller.merchant)))
}

async fn set_suspended(
    state: &HttpState,
    caller: &PlatformOperator,
    raw: &str,
    suspend: bool,
    body: MaybeJson<ReasonRequest>,
) -> Result<HttpResponse, ApiError> {
    let id = merchant_id(&caller.0, raw)?;
    let reason = ReasonRequest::of(body)?;
    let merchant = state.merchants.set_suspended(&caller.0, id, suspend, reason).await?;
    Ok(HttpResponse::Ok().json(MerchantResponse::from(&merchant)))
}

/// Suspends a merchant (platform operator): its members and keys are refused and it takes
/// no new order; its sagas in flight finish.
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/suspend",
    tag = "merchants",
    operation_id = "merchant_suspend",
    params(("id" = String, Path, description = "Merchant id")),
    request_body(content = Option<ReasonRequest>, description = "Optional reason, recorded in the audit log"),
    responses(
        (status = 200, body = MerchantResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "INVALID_MERCHANT_STATE: already suspended, or the DEFAULT merchant", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn suspend(
    state: web::Data<HttpState>,
    path: web::Path<String>,
    Then(caller, body): Then<PlatformOperator, MaybeJson<ReasonRequest>>,
) -> Result<HttpResponse, ApiError> {
    set_suspended(&state, &caller, &path, true, body).await
}

/// Resumes a suspended merchant (platform operator).
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/resume",
    tag = "merchants",
    operation_id = "merchant_resume",
    params(("id" = String, Path, description = "Merchant id")),
    request_body(content = Option<ReasonRequest>, description = "Optional reason, recorded in the audit log"),
    responses(
        (status = 200, body = MerchantResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "INVALID_MERCHANT_STATE: not suspended", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn resume(
    state: web::Data<HttpState>,
    path: web::Path<String>,
    Then(caller, body): Then<PlatformOperator, MaybeJson<ReasonRequest>>,
) -> Result<HttpResponse, ApiError> {
    set_suspended(&state, &caller, &path, false, body).await
}

/// The merchant's stores, by code.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/stores",
    tag = "merchants",
    operation_id = "merchant_stores",
    params(("id" = String, Path, description = "Merchant id")),
    responses(
        (status = 200, body = Vec<StoreResponse>),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn stores(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
) -> Result<HttpResponse, ApiError> {
    let stores = state.merchants.stores(&caller).await?;
    Ok(HttpResponse::Ok().json(stores.iter().map(StoreResponse::from).collect::<Vec<_>>()))
}

/// Registers a store (the platform operator or an `OPERATOR`); it takes the merchant's
/// timezone.
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/stores",
    tag = "merchants",
    operation_id = "merchant_register_store",
    params(("id" = String, Path, description = "Merchant id")),
    request_body = CreateStoreRequest,
    responses(
        (status = 201, body = StoreResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "DUPLICATE_STORE_CODE", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "VALIDATION_FAILED naming code or name", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn register_store(
    state: web::Data<HttpState>,
    Then(caller, body): Then<InMerchant<Writes>, JsonBody<CreateStoreRequest>>,
) -> Result<HttpResponse, ApiError> {
    let request = body.value;
    let store = state.merchants.register_store(&caller, &request.code, &request.name).await?;
    Ok(HttpResponse::Created().json(StoreResponse::from(&store)))
}

/// One of the merchant's stores; another merchant's is `404`.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/stores/{storeId}",
    tag = "merchants",
    operation_id = "merchant_store",
    params(("id" = String, Path, description = "Merchant id"), ("storeId" = String, Path, description = "Store id")),
    responses(
        (status = 200, body = StoreResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn store(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    // A store id that is no id is no store of this merchant: a fresh id finds nothing.
    let store_id = path.1.parse::<StoreId>().unwrap_or_default();
    let store = state.merchants.store(&caller, store_id).await?;
    Ok(HttpResponse::Ok().json(StoreResponse::from(&store)))
}

/// A member of the merchant (platform operator).
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/members/{subject}",
    tag = "merchants",
    operation_id = "merchant_member",
    params(("id" = String, Path, description = "Merchant id"), ("subject" = String, Path, description = "A token's sub")),
    responses(
        (status = 200, body = MemberResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn member(
    state: web::Data<HttpState>,
    caller: PlatformOperator,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let id = merchant_id(&caller.0, &path.0)?;
    let members = state.merchants.members(&caller.0, id, Some(&path.1)).await?;
    let member = members.first().ok_or_else(|| ApiError::not_found("member"))?;
    Ok(HttpResponse::Ok().json(MemberResponse::from(member)))
}

/// Gives a subject a role in the merchant, or changes it (platform operator).
#[utoipa::path(
    put,
    path = "/api/merchants/{id}/members/{subject}",
    tag = "merchants",
    operation_id = "merchant_set_member",
    params(("id" = String, Path, description = "Merchant id"), ("subject" = String, Path, description = "A token's sub")),
    request_body = SetMemberRequest,
    responses(
        (status = 200, body = MemberResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "VALIDATION_FAILED naming role or subject", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn set_member(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    Then(caller, body): Then<PlatformOperator, JsonBody<SetMemberRequest>>,
) -> Result<HttpResponse, ApiError> {
    let id = merchant_id(&caller.0, &path.0)?;
    let role =
        MemberRole::parse(&body.value.role).ok_or_else(|| unprocessable("role", "VIEWER or OPERATOR"))?;
    let member = state.merchants.set_member(&caller.0, id, &path.1, role).await?;
    Ok(HttpResponse::Ok().json(MemberResponse::from(&member)))
}

/// Removes a subject's membership (platform operator).
#[utoipa::path(
    delete,
    path = "/api/merchants/{id}/members/{subject}",
    tag = "merchants",
    operation_id = "merchant_remove_member",
    params(("id" = String, Path, description = "Merchant id"), ("subject" = String, Path, description = "A token's sub")),
    responses(
        (status = 204, description = "Removed"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn remove_member(
    state: web::Data<HttpState>,
    caller: PlatformOperator,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let id = merchant_id(&caller.0, &path.0)?;
    state.merchants.remove_member(&caller.0, id, &path.1).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The merchant's API keys, never their secrets (platform operator).
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/api-keys",
    tag = "merchants",
    operation_id = "merchant_keys",
    params(("id" = String, Path, description = "Merchant id")),
    responses(
        (status = 200, body = Vec<ApiKeyResponse>),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn keys(
    state: web::Data<HttpState>,
    caller: PlatformOperator,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = merchant_id(&caller.0, &path)?;
    let keys = state.merchants.keys(&caller.0, id).await?;
    Ok(HttpResponse::Ok().json(keys.iter().map(ApiKeyResponse::from).collect::<Vec<_>>()))
}

/// Makes an API key (platform operator). The key is in this answer once and nowhere else:
/// only its secret's hash is kept.
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/api-keys",
    tag = "merchants",
    operation_id = "merchant_create_key",
    params(("id" = String, Path, description = "Merchant id")),
    request_body = CreateKeyRequest,
    responses(
        (status = 201, body = CreatedKeyResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "VALIDATION_FAILED naming name, role or expiresAt", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn create_key(
    state: web::Data<HttpState>,
    path: web::Path<String>,
    Then(caller, body): Then<PlatformOperator, JsonBody<CreateKeyRequest>>,
) -> Result<HttpResponse, ApiError> {
    let id = merchant_id(&caller.0, &path)?;
    let CreateKeyRequest { name, role, expires_at } = body.value;
    let role = KeyRole::parse(&role).ok_or_else(|| unprocessable("role", "ORDERS, VIEWER or OPERATOR"))?;
    let created = state.merchants.create_key(&caller.0, id, NewKey { name, role, expires_at }).await?;
    let mut response = HttpResponse::Created().json(CreatedKeyResponse::from(&created));
    // The key is in this body: no cache keeps it.
    response.headers_mut().insert(
        actix_web::http::header::CACHE_CONTROL,
        actix_web::http::header::HeaderValue::from_static("no-store"),
    );
    Ok(response)
}

/// Revokes an API key (platform operator): refused from its next request on.
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/api-keys/{keyId}/revoke",
    tag = "merchants",
    operation_id = "merchant_revoke_key",
    params(("id" = String, Path, description = "Merchant id"), ("keyId" = String, Path, description = "API key id")),
    request_body(content = Option<ReasonRequest>, description = "Optional reason, recorded in the audit log"),
    responses(
        (status = 200, body = ApiKeyResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn revoke_key(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    Then(caller, body): Then<PlatformOperator, MaybeJson<ReasonRequest>>,
) -> Result<HttpResponse, ApiError> {
    let id = merchant_id(&caller.0, &path.0)?;
    let reason = ReasonRequest::of(body)?;
    // A key id that is no id is no key of this merchant: a random id finds nothing.
    let key_id = path.1.parse::<ApiKeyId>().unwrap_or_default();
    let key = state.merchants.revoke_key(&caller.0, id, key_id, reason).await?;
    Ok(HttpResponse::Ok().json(ApiKeyResponse::from(&key)))
}

#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReportQuery {
    /// `YYYY-MM-DD`, a day of the merchant's timezone.
    date: Option<String>,
}

/// The merchant's day (in its timezone): orders, gross, refunds, net, and the provider's
/// fees and payouts where it has settled them — per store and in total, per currency.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/reports/daily",
    tag = "merchants",
    operation_id = "merchant_daily_report",
    params(("id" = String, Path, description = "Merchant id"), ReportQuery),
    responses(
        (status = 200, body = DailyReportResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "date missing or not YYYY-MM-DD", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn daily_report(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
    query: web::Query<ReportQuery>,
) -> Result<HttpResponse, ApiError> {
    let date = super::query_param("date", query.into_inner().date, 10)?
        .and_then(|d| chrono::NaiveDate::parse_from_str(&d, "%Y-%m-%d").ok())
        .ok_or_else(|| unprocessable("date", "must be a day, YYYY-MM-DD"))?;
    let report = state.merchants.daily_report(&caller, date).await?;
    Ok(HttpResponse::Ok().json(DailyReportResponse::from(&report)))
}

/// Which of the merchant's channels are its own (platform operator): never their URLs or
/// secrets.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/channels",
    tag = "merchants",
    operation_id = "merchant_channels",
    params(("id" = String, Path, description = "Merchant id")),
    responses(
        (status = 200, body = ChannelsResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn channels(
    state: web::Data<HttpState>,
    caller: PlatformOperator,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = merchant_id(&caller.0, &path)?;
    let view = state.merchants.channels(&caller.0, id).await?;
    Ok(HttpResponse::Ok().json(ChannelsResponse::from(&view)))
}

/// Sets the merchant's own settlement and notification webhooks (platform operator),
/// sealed under `secrets.key` before they are stored; an empty body's `{}` removes them.
#[utoipa::path(
    put,
    path = "/api/merchants/{id}/channels",
    tag = "merchants",
    operation_id = "merchant_set_channels",
    params(("id" = String, Path, description = "Merchant id")),
    request_body = ChannelsRequest,
    responses(
        (status = 200, body = ChannelsResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "SECRETS_KEY_REQUIRED: secrets.key is not set", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "VALIDATION_FAILED naming the field", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn set_channels(
    state: web::Data<HttpState>,
    path: web::Path<String>,
    Then(caller, body): Then<PlatformOperator, JsonBody<ChannelsRequest>>,
) -> Result<HttpResponse, ApiError> {
    let id = merchant_id(&caller.0, &path)?;
    body.require_object()?;
    let view = state.merchants.set_channels(&caller.0, id, body.value.into()).await?;
    Ok(HttpResponse::Ok().json(ChannelsResponse::from(&view)))
}

/// The merchant's members, by subject (platform operator).
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/members",
    tag = "merchants",
    operation_id = "merchant_members",
    params(("id" = String, Path, description = "Merchant id")),
    responses(
        (status = 200, body = Vec<MemberResponse>),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn members(
    state: web::Data<HttpState>,
    caller: PlatformOperator,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = merchant_id(&caller.0, &path)?;
    let members = state.merchants.members(&caller.0, id, None).await?;
    Ok(HttpResponse::Ok().json(members.iter().map(MemberResponse::from).collect::<Vec<_>>()))
}
