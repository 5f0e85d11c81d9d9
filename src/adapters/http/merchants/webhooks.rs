//! `/api/merchants/{id}/webhook-endpoints` (docs/spec.md §16): a merchant's endpoints —
//! read by anyone let in under its path, managed by an `OPERATOR` (or the platform
//! operator), each secret shown at creation, on an `OPERATOR`'s request and at rotation.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::adapters::http::HttpState;
use crate::adapters::http::auth::{InMerchant, Reads, Then, Writes};
use crate::adapters::http::body::JsonBody;
use crate::adapters::http::problem::{ApiError, Problem};
use crate::application::webhooks::NewEndpoint;
use crate::domain::ids::WebhookEndpointId;
use crate::domain::webhook::Endpoint;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointRequest {
    /// `https://…` (`http://` only with `webhooks.allow_http`).
    #[schema(example = "https://erp.acme.example/hooks", max_length = 2000)]
    pub url: String,
    #[schema(max_length = 500)]
    pub description: Option<String>,
    /// Native event types (docs/spec.md §6), or `["*"]` for every one.
    #[schema(example = json!(["order.completed", "payment.refunded"]))]
    pub event_types: Vec<String>,
}

/// What to change; what is left out stays.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointPatch {
    pub url: Option<String>,
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointResponse {
    pub id: String,
    pub merchant_id: String,
    pub url: String,
    pub description: String,
    pub event_types: Vec<String>,
    pub enabled: bool,
    /// `GONE` (it answered 410) or `FAILING` (no success for `webhooks.disable_after`).
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl From<&Endpoint> for EndpointResponse {
    fn from(e: &Endpoint) -> Self {
        EndpointResponse {
            id: e.id.to_string(),
            merchant_id: e.merchant_id.to_string(),
            url: e.url.clone(),
            description: e.description.clone(),
            event_types: e.filter.names(),
            enabled: e.is_enabled(),
            disabled_reason: e.disabled.map(|r| r.as_str().to_owned()),
            created_at: e.created_at,
        }
    }
}

/// An endpoint just made, with its secret.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedEndpointResponse {
    #[serde(flatten)]
    pub endpoint: EndpointResponse,
    /// `whsec_<base64>`: verify each delivery with it (Standard Webhooks).
    pub secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretResponse {
    pub secret: String,
}

/// An endpoint id that is no id is no endpoint of this merchant: a fresh id finds nothing.
fn endpoint_id(raw: &str) -> WebhookEndpointId {
    raw.parse().unwrap_or_default()
}

fn no_store(mut response: HttpResponse) -> HttpResponse {
    response.headers_mut().insert(
        actix_web::http::header::CACHE_CONTROL,
        actix_web::http::header::HeaderValue::from_static("no-store"),
    );
    response
}

/// The merchant's webhook endpoints.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/webhook-endpoints",
    tag = "merchants",
    operation_id = "merchant_webhook_endpoints",
    params(("id" = String, Path, description = "Merchant id")),
    responses(
        (status = 200, body = Vec<EndpointResponse>),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list(state: web::Data<HttpState>, caller: InMerchant<Reads>) -> Result<HttpResponse, ApiError> {
    let endpoints = state.webhooks.list(&caller).await?;
    Ok(HttpResponse::Ok().json(endpoints.iter().map(EndpointResponse::from).collect::<Vec<_>>()))
}

/// Creates an endpoint (an `OPERATOR`); its secret is in the answer.
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/webhook-endpoints",
    tag = "merchants",
    operation_id = "merchant_create_webhook_endpoint",
    params(("id" = String, Path, description = "Merchant id")),
    request_body = EndpointRequest,
    responses(
        (status = 201, body = CreatedEndpointResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "SECRETS_KEY_REQUIRED", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "VALIDATION_FAILED naming url, description or eventTypes", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    state: web::Data<HttpState>,
    Then(caller, body): Then<InMerchant<Writes>, JsonBody<EndpointRequest>>,
) -> Result<HttpResponse, ApiError> {
    let EndpointRequest { url, description, event_types } = body.value;
    let new = NewEndpoint { url, description, event_types };
    let (endpoint, secret) = state.webhooks.create(&caller, new).await?;
    let body = CreatedEndpointResponse { endpoint: EndpointResponse::from(&endpoint), secret };
    Ok(no_store(HttpResponse::Created().json(body)))
}

/// One of the merchant's endpoints; another merchant's is `404`.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/webhook-endpoints/{endpointId}",
    tag = "merchants",
    operation_id = "merchant_webhook_endpoint",
    params(("id" = String, Path, description = "Merchant id"), ("endpointId" = String, Path, description = "Endpoint id")),
    responses(
        (status = 200, body = EndpointResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn get(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let endpoint = state.webhooks.get(&caller, endpoint_id(&path.1)).await?;
    Ok(HttpResponse::Ok().json(EndpointResponse::from(&endpoint)))
}

/// Changes an endpoint (an `OPERATOR`).
#[utoipa::path(
    patch,
    path = "/api/merchants/{id}/webhook-endpoints/{endpointId}",
    tag = "merchants",
    operation_id = "merchant_update_webhook_endpoint",
    params(("id" = String, Path, description = "Merchant id"), ("endpointId" = String, Path, description = "Endpoint id")),
    request_body = EndpointPatch,
    responses(
        (status = 200, body = EndpointResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn update(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    Then(caller, body): Then<InMerchant<Writes>, JsonBody<EndpointPatch>>,
) -> Result<HttpResponse, ApiError> {
    body.require_object()?;
    let EndpointPatch { url, description, event_types } = body.value;
    let id = endpoint_id(&path.1);
    let endpoint = state.webhooks.update(&caller, id, url, description, event_types).await?;
    Ok(HttpResponse::Ok().json(EndpointResponse::from(&endpoint)))
}

/// Deletes an endpoint and its messages (an `OPERATOR`).
#[utoipa::path(
    delete,
    path = "/api/merchants/{id}/webhook-endpoints/{endpointId}",
    tag = "merchants",
    operation_id = "merchant_delete_webhook_endpoint",
    params(("id" = String, Path, description = "Merchant id"), ("endpointId" = String, Path, description = "Endpoint id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn delete(
    state: web::Data<HttpState>,
    caller: InMerchant<Writes>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    state.webhooks.delete(&caller, endpoint_id(&path.1)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The endpoint's secret (an `OPERATOR`).
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/webhook-endpoints/{endpointId}/secret",
    tag = "merchants",
    operation_id = "merchant_webhook_endpoint_secret",
    params(("id" = String, Path, description = "Merchant id"), ("endpointId" = String, Path, description = "Endpoint id")),
    responses(
        (status = 200, body = SecretResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn secret(
    state: web::Data<HttpState>,
    caller: InMerchant<Writes>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let secret = state.webhooks.secret(&caller, endpoint_id(&path.1)).await?;
    Ok(no_store(HttpResponse::Ok().json(SecretResponse { secret })))
}

/// A new secret for the endpoint (an `OPERATOR`); the old one keeps signing beside it for
/// `webhooks.rotation_overlap`.
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/webhook-endpoints/{endpointId}/secret/rotate",
    tag = "merchants",
    operation_id = "merchant_rotate_webhook_secret",
    params(("id" = String, Path, description = "Merchant id"), ("endpointId" = String, Path, description = "Endpoint id")),
    responses(
        (status = 200, body = SecretResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn rotate(
    state: web::Data<HttpState>,
    caller: InMerchant<Writes>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let secret = state.webhooks.rotate_secret(&caller, endpoint_id(&path.1)).await?;
    Ok(no_store(HttpResponse::Ok().json(SecretResponse { secret })))
}

/// Turns a disabled endpoint back on (an `OPERATOR`).
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/webhook-endpoints/{endpointId}/enable",
    tag = "merchants",
    operation_id = "merchant_enable_webhook_endpoint",
    params(("id" = String, Path, description = "Merchant id"), ("endpointId" = String, Path, description = "Endpoint id")),
    responses(
        (status = 200, body = EndpointResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn enable(
    state: web::Data<HttpState>,
    caller: InMerchant<Writes>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let endpoint = state.webhooks.enable(&caller, endpoint_id(&path.1)).await?;
    Ok(HttpResponse::Ok().json(EndpointResponse::from(&endpoint)))
}
