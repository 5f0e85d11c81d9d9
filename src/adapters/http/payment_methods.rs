//! `/api/payment-methods`: the caller's saved card (docs/spec.md §10). The billing key never
//! appears in an answer: only the customer's key (which the billing-auth widget needs) and
//! what the provider lets be shown of the card.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::HttpState;
use super::auth::Caller;
use super::body::JsonBody;
use super::problem::{ApiError, Problem};
use crate::application::money::payment_methods::PaymentMethodView;

/// The billing-auth widget's redirect gave the client this one-time key.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterCardRequest {
    #[schema(min_length = 1, max_length = 300)]
    pub auth_key: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CardResponse {
    pub company: Option<String>,
    /// Masked by the provider.
    pub number: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentMethodResponse {
    /// The caller's key at Toss, for the billing-auth widget.
    pub customer_key: String,
    /// `null` until a card is saved.
    pub card: Option<CardResponse>,
}

impl From<PaymentMethodView> for PaymentMethodResponse {
    fn from(v: PaymentMethodView) -> Self {
        PaymentMethodResponse {
            customer_key: v.customer_key,
            card: v.card.map(|c| CardResponse { company: c.company, number: c.number }),
        }
    }
}

/// The caller's key at the provider and their saved card (`null` if none).
#[utoipa::path(
    get,
    path = "/api/payment-methods",
    tag = "payments",
    responses(
        (status = 200, body = PaymentMethodResponse),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "NOT_SUPPORTED: the provider keeps no saved cards", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn view(state: web::Data<HttpState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let view = state.payment_methods.view(&caller.0).await?;
    Ok(HttpResponse::Ok().json(PaymentMethodResponse::from(view)))
}

/// Saves the card the caller registered in Toss's billing-auth widget (replacing theirs).
#[utoipa::path(
    post,
    path = "/api/payment-methods",
    tag = "payments",
    request_body = RegisterCardRequest,
    responses(
        (status = 201, body = PaymentMethodResponse),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "NOT_SUPPORTED", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A bad authKey, or CARD_REFUSED by the provider", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The provider or the database is unavailable; nothing saved", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn register(
    state: web::Data<HttpState>,
    caller: Caller,
    body: JsonBody<RegisterCardRequest>,
) -> Result<HttpResponse, ApiError> {
    let view = state.payment_methods.register(&caller.0, &body.value.auth_key).await?;
    Ok(HttpResponse::Created().json(PaymentMethodResponse::from(view)))
}

/// Forgets the caller's saved card.
#[utoipa::path(
    delete,
    path = "/api/payment-methods",
    tag = "payments",
    responses(
        (status = 204, description = "Forgotten"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No saved card", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn forget(state: web::Data<HttpState>, caller: Caller) -> Result<HttpResponse, ApiError> {
    state.payment_methods.forget(&caller.0).await?;
    Ok(HttpResponse::NoContent().finish())
}
