//! `/api/orders`: checkout with idempotency keys, detail, listing, saga resumption.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::auth::Caller;
use super::body::{JsonBody, MaybeJson};
use super::correlation::CorrelationId;
use super::dto::{
    AuditResponse, CheckoutResponse, OrderDetailResponse, OrderFlowResponse, OrderPageResponse,
    OrderResponse, OutboxEventResponse, PayOrderRequest, PlaceOrderRequest, RefundBody, StepResponse,
};
use super::ledger::PaymentPayoutResponse;
use super::problem::{ApiError, Problem};
use super::{HttpState, query_param};
use crate::application::idempotency::Keyed;
use crate::application::money::refunds::{RefundOutcome, RefundRequest};
use crate::application::orchestration::{Orchestrator, PayOrder, PlaceOrder};
use crate::application::ports::{OrderRecord, Scenario, StoredResponse};
use crate::application::queries::ListOrders;
use crate::application::{Actor, AppError};
use crate::domain::ids::{OrderId, PaymentId, StoreId};
use crate::domain::order::{NewOrderItem, OrderSource, OrderStart, OrderStatus};

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const MOCK_SCENARIO: &str = "x-mock-scenario";

/// A header used as data; one that is not visible ASCII is `422` naming the header as it is
/// documented (`Idempotency-Key`), like every other refusal of its value.
fn header<'a>(req: &'a HttpRequest, name: &'static str) -> Result<Option<&'a str>, ApiError> {
    req.headers()
        .get(name)
        .map(|v| {
            v.to_str().map_err(|_| {
                ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, documented(name), "must be visible ASCII")
            })
        })
        .transpose()
}

/// How the API documents a header it reads.
fn documented(name: &'static str) -> &'static str {
    match name {
        IDEMPOTENCY_KEY => "Idempotency-Key",
        MOCK_SCENARIO => "X-Mock-Scenario",
        other => other,
    }
}

/// The scenario of `X-Mock-Scenario`, honoured only with the simulated providers.
pub fn scenario(state: &HttpState, req: &HttpRequest) -> Result<Scenario, ApiError> {
    if !state.honour_mock_scenario {
        return Ok(Scenario::default());
    }
    match header(req, MOCK_SCENARIO)? {
        None => Ok(Scenario::default()),
        Some(text) => Scenario::parse(text)
            .map_err(|e| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "X-Mock-Scenario", e.to_string())),
    }
}

fn json_response(status: StatusCode, body: String) -> HttpResponse {
    HttpResponse::build(status).content_type("application/json").body(body)
}

pub fn parse_order_id(text: &str) -> Result<OrderId, ApiError> {
    text.parse().map_err(|_| ApiError::not_found("order"))
}

/// An order named in a path by its id (a UUID) or by its `number` (docs/spec.md §3: the
/// number the platforms' clients and the support desk know, `100001`). Whether the caller
/// may see it is the use case's: another's order is the same `404` as none.
///
/// # Errors
/// `404` when it names no order.
pub async fn order_ref(state: &HttpState, text: &str) -> Result<OrderId, ApiError> {
    match text.parse::<i64>() {
        Ok(number) if number > 0 && text.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(state.queries.id_by_number(number).await?)
        }
        _ => parse_order_id(text),
    }
}

/// Place an order and run its saga.
#[utoipa::path(
    post,
    path = "/api/orders",
    tag = "orders",
    request_body = PlaceOrderRequest,
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "At most 255 visible ASCII characters, scoped to the caller, kept 24 h"),
        ("X-Mock-Scenario" = Option<String>, Header, description = "Mock mode only: e.g. `payment=decline`, `settlement=fail`, `notification=auto_retry:2`"),
        ("X-Correlation-Id" = Option<String>, Header, description = "Echoed back; generated when absent"),
    ),
    responses(
        (status = 201, description = "The order and how far its saga got", body = OrderDetailResponse),
        (status = 400, description = "Malformed JSON or header", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No valid token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Ordering for another customer", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "IDEMPOTENCY_KEY_IN_PROGRESS", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body over 64 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Not JSON", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "VALIDATION_FAILED (naming the field) or IDEMPOTENCY_KEY_REUSED", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn place_order(
    state: web::Data<HttpState>,
    caller: Caller,
    correlation: CorrelationId,
    req: HttpRequest,
    body: JsonBody<PlaceOrderRequest>,
) -> Result<HttpResponse, ApiError> {
    let command = command_of(body.value, None, correlation);
    place(&state, &caller.0, &req, &body.canonical, command).await
}

/// What a §5 body asks for: an `API` order that waits for its checkout.
pub(super) fn command_of(
    request: PlaceOrderRequest,
    store_id: Option<StoreId>,
    correlation: CorrelationId,
) -> PlaceOrder {
    PlaceOrder {
        order_id: OrderId::new(),
        customer_id: request.customer_id,
        source: OrderSource::Api,
        start: OrderStart::AwaitCheckout,
        meeting_id: None,
        currency: request.currency,
        items: request
            .items
            .into_iter()
            .map(|i| NewOrderItem { sku: i.sku, quantity: i.quantity, unit_price: i.unit_price })
            .collect(),
        scenario: Scenario::default(),
        correlation_id: Some(correlation.0),
        inbox: None,
        customer_email: request.customer_email,
        description: None,
        keyed_in: None,
        merchant: None,
        store_id,
    }
}

/// Places `command` for `actor` and runs its saga; with an `Idempotency-Key` (scoped to the
/// caller: its subject, or its merchant key) once per key and body (`canonical`).
pub(super) async fn place(
    state: &HttpState,
    actor: &Actor,
    req: &HttpRequest,
    canonical: &str,
    mut command: PlaceOrder,
) -> Result<HttpResponse, ApiError> {
    let scenario = scenario(state, req)?;
    command.scenario = scenario;
    let Some(key) = header(req, IDEMPOTENCY_KEY)?.map(str::to_owned) else {
        let record = state.orchestrator.place_order(actor, command).await?;
        return Ok(HttpResponse::Created().json(detail(state, &record)));
    };
    let fingerprint = {
        let mut hash = Sha256::new();
        hash.update(canonical.as_bytes());
        hash.update(b"\n");
        hash.update(scenario.to_string().as_bytes());
        format!("{:x}", hash.finalize())
    };
    let orchestrator = &state.orchestrator;
    let outcome = state
        .idempotency
        .run(actor, &key, &fingerprint, |order_id| async move {
            command.order_id = order_id;
            let record = orchestrator.place_order(actor, command).await?;
            let body = serde_json::to_string(&detail_of(orchestrator, &record))
                .map_err(|e| AppError::internal(format!("cannot serialise the order: {e}")))?;
            Ok(StoredResponse { status: StatusCode::CREATED.as_u16(), body })
        })
        .await?;
    Ok(match outcome {
        Keyed::Ran(stored) => json_response(StatusCode::CREATED, stored.body),
        Keyed::Replayed(stored) => {
            let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
            let mut response = json_response(status, stored.body);
            response.headers_mut().insert(
                actix_web::http::header::HeaderName::from_static("idempotent-replayed"),
                actix_web::http::header::HeaderValue::from_static("true"),
            );
            response
        }
    })
}

/// One order with its payment, settlement, notification and steps.
#[utoipa::path(
    get,
    path = "/api/orders/{id}",
    tag = "orders",
    params(("id" = String, Path, description = "Order id (UUID) or order number")),
    responses(
        (status = 200, body = OrderDetailResponse),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such order, or another customer's", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn get_order(
    state: web::Data<HttpState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = order_ref(&state, &path).await?;
    order_detail(&state, &caller.0, id).await
}

/// The order's detail, with its payout once the provider settled it.
pub(super) async fn order_detail(
    state: &HttpState,
    actor: &Actor,
    id: OrderId,
) -> Result<HttpResponse, ApiError> {
    let record = state.queries.get_order(actor, id).await?;
    let mut detail = detail(state, &record);
    if let (Some(payment), Some(view)) = (&record.payment, detail.payment.as_mut()) {
        view.payout = payout(state, Some(payment.id)).await?;
    }
    Ok(HttpResponse::Ok().json(detail))
}

/// A payment's payouts netted, once the provider settled it (docs/spec.md §13).
async fn payout(
    state: &HttpState,
    payment: Option<PaymentId>,
) -> Result<Option<PaymentPayoutResponse>, ApiError> {
    let Some(payment) = payment else { return Ok(None) };
    Ok(state.ledger.payout_of(payment).await?.as_ref().map(PaymentPayoutResponse::from))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ListOrdersQuery {
    /// An order status, e.g. `COMPLETED`.
    status: Option<String>,
    /// Admins only; a customer always sees their own.
    customer_id: Option<String>,
    /// The order numbered so (docs/spec.md §3).
    number: Option<String>,
    /// The API it came through: `API`, `MEETING`, `COMMERCE`, `MOMO`.
    source: Option<String>,
    /// 1 to 100, default 20.
    limit: Option<String>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
}

/// Orders, newest first; a customer sees only their own.
#[utoipa::path(
    get,
    path = "/api/orders",
    tag = "orders",
    params(ListOrdersQuery),
    responses(
        (status = 200, body = OrderPageResponse),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Bad status, number, source, limit or cursor", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list_orders(
    state: web::Data<HttpState>,
    caller: Caller,
    query: web::Query<ListOrdersQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = query.into_inner();
    let unprocessable =
        |field: &str, message: &str| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, message);
    let status = query_param("status", q.status, 64)?
        .map(|s| OrderStatus::parse(&s).ok_or_else(|| unprocessable("status", "not an order status")))
        .transpose()?;
    let limit = query_param("limit", q.limit, 16)?
        .map(|l| l.parse::<u32>().map_err(|_| unprocessable("limit", "must be a number between 1 and 100")))
        .transpose()?;
    let customer_id = query_param("customerId", q.customer_id, crate::domain::text::limits::ID)?;
    let cursor = query_param("cursor", q.cursor, 64)?
        .map(|c| c.parse::<OrderId>().map_err(|_| unprocessable("cursor", "not a cursor from this API")))
        .transpose()?;
    let number = query_param("number", q.number, 20)?
        .map(|n| {
            n.parse::<i64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| unprocessable("number", "must be an order number"))
        })
        .transpose()?;
    let source = query_param("source", q.source, 16)?
        .map(|s| OrderSource::parse(&s).ok_or_else(|| unprocessable("source", "not an order source")))
        .transpose()?;
    let query = ListOrders { status, customer_id, number, source, limit, cursor, ..ListOrders::default() };
    let page = state.queries.list_orders(&caller.0, query).await?;
    Ok(HttpResponse::Ok().json(OrderPageResponse {
        items: page.items.iter().map(OrderResponse::from).collect(),
        next_cursor: page.next_cursor.map(|c| c.to_string()),
    }))
}

/// Resume the saga of an order: steps already done are skipped, no provider is called
/// twice; a finished order is returned unchanged.
#[utoipa::path(
    post,
    path = "/api/orders/{id}/orchestrate",
    tag = "orders",
    params(("id" = String, Path, description = "Order id (UUID) or order number")),
    responses(
        (status = 200, body = OrderDetailResponse),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn orchestrate(
    state: web::Data<HttpState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = order_ref(&state, &path).await?;
    let record = state.orchestrator.orchestrate(&caller.0, id).await?;
    Ok(HttpResponse::Ok().json(detail(&state, &record)))
}

/// An order's detail, with the payment widget's parameters while it awaits its payment.
fn detail_of(orchestrator: &Orchestrator, record: &OrderRecord) -> OrderDetailResponse {
    let mut detail = OrderDetailResponse::from(record);
    detail.checkout = orchestrator.checkout_of(record).map(CheckoutResponse::from);
    detail
}

fn detail(state: &HttpState, record: &OrderRecord) -> OrderDetailResponse {
    detail_of(&state.orchestrator, record)
}

/// The customer authorized the payment in Toss's widget: confirms it and runs the saga on
/// (docs/spec.md §10). Answers the order detail.
#[utoipa::path(
    post,
    path = "/api/orders/{id}/payment",
    tag = "orders",
    params(("id" = String, Path, description = "Order id (UUID) or order number")),
    request_body = PayOrderRequest,
    responses(
        (status = 200, body = OrderDetailResponse),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not the order's customer", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "PAYMENT_WINDOW_EXPIRED, PAYMENT_NOT_EXPECTED, PAYMENT_KEY_USED (the key paid another order) or ORDER_BUSY", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "AMOUNT_MISMATCH (nothing called) or a bad paymentKey", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn pay(
    state: web::Data<HttpState>,
    caller: Caller,
    path: web::Path<String>,
    body: JsonBody<PayOrderRequest>,
) -> Result<HttpResponse, ApiError> {
    let id = order_ref(&state, &path).await?;
    let PayOrderRequest { payment_key, amount } = body.value;
    let record = state.orchestrator.pay_order(&caller.0, id, PayOrder { payment_key, amount }).await?;
    Ok(HttpResponse::Ok().json(detail(&state, &record)))
}

/// An order's whole story for support and operators: steps, events with their delivery
/// state, and audit rows, each oldest first.
#[utoipa::path(
    get,
    path = "/api/orders/{id}/flow",
    tag = "orders",
    params(("id" = String, Path, description = "Order id (UUID) or order number")),
    responses(
        (status = 200, body = OrderFlowResponse),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn flow(
    state: web::Data<HttpState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = order_ref(&state, &path).await?;
    order_flow(&state, &caller.0, id).await
}

/// The order's steps, events and audit rows.
pub(super) async fn order_flow(
    state: &HttpState,
    actor: &Actor,
    id: OrderId,
) -> Result<HttpResponse, ApiError> {
    let flow = state.queries.flow(actor, id).await?;
    Ok(HttpResponse::Ok().json(OrderFlowResponse {
        order_id: id.to_string(),
        steps: flow.steps.iter().map(StepResponse::from).collect(),
        events: flow.events.iter().map(|e| OutboxEventResponse::of(e, &state.wire)).collect(),
        audit: flow.audit.iter().map(AuditResponse::from).collect(),
        payout: payout(state, flow.payment_id).await?,
    }))
}

/// Refund a completed order, in full or in part: the provider cancels `amount` (absent: the
/// whole remaining balance) of the payment, a refund of its own with its own key. Partly
/// refunded, the payment is `PARTIALLY_REFUNDED` and the order stays `COMPLETED`; fully,
/// the payment is `REFUNDED` and the order `CANCELLED`. `payment.refunded` per refund. Only
/// the order's customer or an admin. With an `Idempotency-Key` (scoped to the caller) the
/// same request again is the same refund, answered as it stands, never a second one.
#[utoipa::path(
    post,
    path = "/api/orders/{id}/refund",
    tag = "orders",
    params(
        ("id" = String, Path, description = "Order id (UUID)"),
        ("Idempotency-Key" = Option<String>, Header, description = "At most 255 visible ASCII characters, scoped to the caller: the same key is the same refund"),
    ),
    request_body(content = Option<RefundBody>, description = "Optional reason and amount (minor units; absent: the whole balance)"),
    responses(
        (status = 200, body = OrderDetailResponse),
        (status = 202, description = "The provider's answer was lost: the refund is recorded, PENDING in `refunds`, and finished by the worker with its own key; do not ask again", body = OrderDetailResponse),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "UNAUTHORIZED_REFUND: not the order's customer", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "REFUND_NOT_ALLOWED (not COMPLETED with a balance left), ORDER_BUSY (changed right now; retry) or REFUND_FAILED (the provider refused; recorded)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "REFUND_AMOUNT_INVALID: not 0 < amount <= balance (nothing called)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable, or an earlier refund of the order is still pending (nothing new was asked)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn refund(
    state: web::Data<HttpState>,
    caller: Caller,
    req: HttpRequest,
    path: web::Path<String>,
    body: MaybeJson<RefundBody>,
) -> Result<HttpResponse, ApiError> {
    let id = order_ref(&state, &path).await?;
    refund_as(&state, &caller.0, &req, id, body, false).await
}

/// Refunds `id` for `actor`; an `Idempotency-Key` is required when `key_required`.
pub(super) async fn refund_as(
    state: &HttpState,
    actor: &Actor,
    req: &HttpRequest,
    id: OrderId,
    body: MaybeJson<RefundBody>,
    key_required: bool,
) -> Result<HttpResponse, ApiError> {
    let (reason, amount) = RefundBody::of(body)?;
    // The caller's key, bounded whatever the subject's length: one refund per (caller, key).
    let request_key = match header(req, IDEMPOTENCY_KEY)? {
        None if key_required => {
            return Err(ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "Idempotency-Key", "is required"));
        }
        None => None,
        Some(key) => {
            crate::application::idempotency::IdempotencyService::validate_key(key)?;
            let mut hash = Sha256::new();
            hash.update(actor.scope().as_bytes());
            hash.update(b"\n");
            hash.update(key.as_bytes());
            Some(format!("api:{:x}", hash.finalize()))
        }
    };
    let request = RefundRequest { reason, amount, request_key, ..Default::default() };
    match state.refunds.refund_order(actor, id, request).await? {
        RefundOutcome::Refunded(record) => Ok(HttpResponse::Ok().json(OrderDetailResponse::from(&record))),
        // The provider's answer was lost: the refund is recorded and pending, and the worker
        // finishes it with its own key. Accepted — the same request again would not make
        // it sooner, and without an Idempotency-Key it would be a second refund.
        RefundOutcome::Pending { record, .. } => {
            Ok(HttpResponse::Accepted().json(OrderDetailResponse::from(&record)))
        }
        RefundOutcome::Rejected { reason, .. } => Err(ApiError::new(
            StatusCode::CONFLICT,
            "REFUND_FAILED",
            format!("the payment provider refused the refund: {reason}"),
        )),
    }
}
