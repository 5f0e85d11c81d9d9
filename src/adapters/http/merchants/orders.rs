//! A merchant's orders under its path (docs/spec.md §15): the native order use cases, run
//! for the caller as [`Merchants::authorize`](crate::application::merchants::Merchants::authorize)
//! scopes it — so another merchant's order under this path is `404`, never its data.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use crate::adapters::http::HttpState;
use crate::adapters::http::auth::{InMerchant, Places, Reads, Then, Writes};
use crate::adapters::http::body::{JsonBody, MaybeJson};
use crate::adapters::http::correlation::CorrelationId;
use crate::adapters::http::dto::{
    OrderDetailResponse, OrderFlowResponse, OrderItemRequest, OrderPageResponse, OrderResponse,
    PlaceOrderRequest, RefundBody,
};
use crate::adapters::http::orders::{command_of, order_detail, order_flow, order_ref, place, refund_as};
use crate::adapters::http::problem::{ApiError, Problem};
use crate::adapters::http::query_param;
use crate::application::queries::ListOrders;
use crate::domain::ids::{OrderId, StoreId};
use crate::domain::merchant::StoreStatus;
use crate::domain::order::OrderStatus;

/// `POST /api/merchants/{id}/orders`: §5's body and the store it is for.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MerchantOrderRequest {
    /// One of this merchant's `ACTIVE` stores.
    pub store_id: Option<String>,
    #[schema(max_length = 64)]
    pub customer_id: Option<String>,
    #[schema(max_length = 254, example = "alice@example.com")]
    pub customer_email: Option<String>,
    #[schema(example = "KRW", min_length = 3, max_length = 3)]
    pub currency: String,
    #[schema(min_items = 1, max_items = 100)]
    pub items: Vec<OrderItemRequest>,
}

fn unprocessable(field: &str, message: &str) -> ApiError {
    ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, message)
}

/// Places an order of the merchant (a key with role `ORDERS` or `OPERATOR`, an `OPERATOR`
/// member, the platform operator) and runs its saga.
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/orders",
    tag = "merchants",
    operation_id = "merchant_place_order",
    params(
        ("id" = String, Path, description = "Merchant id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Scoped to the key or the subject within this merchant, kept 24 h"),
    ),
    request_body = MerchantOrderRequest,
    responses(
        (status = 201, body = OrderDetailResponse),
        (status = 403, description = "FORBIDDEN: the same for every merchant the caller may not order for", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "The store is not this merchant's", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "VALIDATION_FAILED naming the field (storeId of an inactive store)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn place_order(
    state: web::Data<HttpState>,
    correlation: CorrelationId,
    req: HttpRequest,
    Then(caller, body): Then<InMerchant<Places>, JsonBody<MerchantOrderRequest>>,
) -> Result<HttpResponse, ApiError> {
    let actor = &caller.actor;
    let MerchantOrderRequest { store_id, customer_id, customer_email, currency, items } = body.value;
    let store_id = match store_id {
        None => None,
        Some(raw) => {
            let store_id = raw.parse::<StoreId>().map_err(|_| ApiError::not_found("store"))?;
            let store = state.merchants.store(&caller, store_id).await?;
            if store.status != StoreStatus::Active {
                return Err(unprocessable("storeId", "the store is not ACTIVE"));
            }
            Some(store.id)
        }
    };
    let request = PlaceOrderRequest { customer_id, customer_email, currency, items };
    place(&state, actor, &req, &body.canonical, command_of(request, store_id, correlation)).await
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct MerchantOrdersQuery {
    /// An order status, e.g. `COMPLETED`.
    status: Option<String>,
    /// Only this store's orders.
    store_id: Option<String>,
    /// Created at or after this instant (RFC 3339).
    from: Option<String>,
    /// Created before this instant (RFC 3339).
    to: Option<String>,
    /// 1 to 100, default 20.
    limit: Option<String>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
}

fn instant(name: &str, value: Option<String>) -> Result<Option<chrono::DateTime<chrono::Utc>>, ApiError> {
    query_param(name, value, 40)?
        .map(|v| {
            chrono::DateTime::parse_from_rfc3339(&v)
                .map(|t| t.to_utc())
                .map_err(|_| unprocessable(name, "must be an RFC 3339 instant (2026-12-06T00:00:00+09:00)"))
        })
        .transpose()
}

/// The merchant's orders, newest first.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/orders",
    tag = "merchants",
    operation_id = "merchant_list_orders",
    params(("id" = String, Path, description = "Merchant id"), MerchantOrdersQuery),
    responses(
        (status = 200, body = OrderPageResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad status, storeId, from, to, limit or cursor", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list_orders(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
    query: web::Query<MerchantOrdersQuery>,
) -> Result<HttpResponse, ApiError> {
    let actor = caller.auth.actor;
    let q = query.into_inner();
    let status = query_param("status", q.status, 32)?
        .map(|s| OrderStatus::parse(&s).ok_or_else(|| unprocessable("status", "not an order status")))
        .transpose()?;
    let store_id = query_param("storeId", q.store_id, 64)?
        .map(|s| s.parse::<StoreId>().map_err(|_| unprocessable("storeId", "not a store id")))
        .transpose()?;
    let limit = query_param("limit", q.limit, 16)?
        .map(|l| l.parse::<u32>().map_err(|_| unprocessable("limit", "must be a number between 1 and 100")))
        .transpose()?;
    let cursor = query_param("cursor", q.cursor, 64)?
        .map(|c| c.parse::<OrderId>().map_err(|_| unprocessable("cursor", "not a cursor from this API")))
        .transpose()?;
    let query = ListOrders {
        merchant_id: actor.merchant,
        store_id,
        from: instant("from", q.from)?,
        to: instant("to", q.to)?,
        status,
        limit,
        cursor,
        ..ListOrders::default()
    };
    let page = state.queries.list_orders(&actor, query).await?;
    Ok(HttpResponse::Ok().json(OrderPageResponse {
        items: page.items.iter().map(OrderResponse::from).collect(),
        next_cursor: page.next_cursor.map(|c| c.to_string()),
    }))
}

/// One of the merchant's orders, by id or number; another merchant's is `404`.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/orders/{order}",
    tag = "merchants",
    operation_id = "merchant_get_order",
    params(("id" = String, Path, description = "Merchant id"), ("order" = String, Path, description = "Order id (UUID) or order number")),
    responses(
        (status = 200, body = OrderDetailResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn get_order(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let id = order_ref(&state, &path.1).await?;
    order_detail(&state, &caller.actor, id).await
}

/// One of the merchant's orders' steps, events and audit rows.
#[utoipa::path(
    get,
    path = "/api/merchants/{id}/orders/{order}/flow",
    tag = "merchants",
    operation_id = "merchant_flow",
    params(("id" = String, Path, description = "Merchant id"), ("order" = String, Path, description = "Order id (UUID) or order number")),
    responses(
        (status = 200, body = OrderFlowResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn flow(
    state: web::Data<HttpState>,
    caller: InMerchant<Reads>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let id = order_ref(&state, &path.1).await?;
    order_flow(&state, &caller.actor, id).await
}

/// Refunds one of the merchant's orders (an `OPERATOR` key or member, the platform
/// operator), as `POST /api/orders/{id}/refund` does; the `Idempotency-Key` is required.
#[utoipa::path(
    post,
    path = "/api/merchants/{id}/orders/{order}/refund",
    tag = "merchants",
    operation_id = "merchant_refund",
    params(
        ("id" = String, Path, description = "Merchant id"),
        ("order" = String, Path, description = "Order id (UUID) or order number"),
        ("Idempotency-Key" = String, Header, description = "Required: the same key is the same refund"),
    ),
    request_body(content = Option<RefundBody>, description = "Optional reason and amount (minor units; absent: the whole balance)"),
    responses(
        (status = 200, body = OrderDetailResponse),
        (status = 202, description = "The provider's answer was lost: the refund is recorded and finished by the worker", body = OrderDetailResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "REFUND_NOT_ALLOWED, ORDER_BUSY or REFUND_FAILED", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Idempotency-Key missing, or REFUND_AMOUNT_INVALID", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn refund(
    state: web::Data<HttpState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    Then(caller, body): Then<InMerchant<Writes>, MaybeJson<RefundBody>>,
) -> Result<HttpResponse, ApiError> {
    let actor = caller.auth.actor;
    let id = order_ref(&state, &path.1).await?;
    // Another merchant's order is not there (404), before anything is asked of it.
    state.queries.get_order(&actor, id).await?;
    refund_as(&state, &actor, &req, id, body, true).await
}
