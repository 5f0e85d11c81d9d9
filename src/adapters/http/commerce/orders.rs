//! Its `/api/orders` paths: create (held in `CREATED`), detail, flow and `orchestrate`,
//! over the same use cases as the native API.

use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::Value;

use super::auth::SignedIn;
use super::envelope::{CommerceError, ok};
use super::schema::{OrderDetailResponse, OrderResponse};
use super::view;
use crate::adapters::http::HttpState;
use crate::adapters::http::correlation::CorrelationId;
use crate::adapters::jackson;
use crate::application::orchestration::{MAX_DESCRIPTION, PlaceOrder};
use crate::application::ports::{Behaviour, OrderRecord, Scenario};
use crate::domain::ids::OrderId;
use crate::domain::money::{Currency, MajorError};
use crate::domain::order::{NewOrderItem, OrderSource, OrderStart};

/// The platform's `orders.customer_id` column.
const MAX_CUSTOMER_ID: usize = 100;
/// The item an order made here is of: the platform's orders have a total, not items.
pub const ITEM_SKU: &str = "COMMERCE-ORDER";

/// Its `CreateOrderRequest`, each field as sent: the platform's validation decides what
/// each may be (JSON scalars where it takes a string, as Jackson coerces them).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateOrderRequest {
    customer_id: Option<Value>,
    total_amount: Option<Value>,
    currency: Option<Value>,
    description: Option<Value>,
}

/// A `String` field as the platform's Jackson reads it; an object or array is not a
/// request it reads.
fn text(value: Option<Value>) -> Result<Option<String>, CommerceError> {
    jackson::string(value.as_ref()).map_err(|_| CommerceError::malformed())
}

/// `totalAmount`, a `BigDecimal`, as plain decimal text (`12000`, `12.50`, `"12000"`, `1.2e4`).
fn decimal(value: Option<Value>) -> Result<Option<String>, CommerceError> {
    jackson::decimal(value.as_ref()).map_err(|_| CommerceError::malformed())
}

/// The minor units of a positive decimal in `currency`, refused in the platform's words.
fn minor_units(text: &str, currency: Currency) -> Result<i64, CommerceError> {
    currency.minor_of_major(text).map_err(|e| match e {
        MajorError::Malformed => CommerceError::malformed(),
        MajorError::NotPositive => CommerceError::bad_request("totalAmount는 0보다 커야 합니다."),
        MajorError::TooPrecise(digits) => CommerceError::bad_request(format!(
            "totalAmount는 {currency}의 소수 {digits}자리까지만 가능합니다."
        )),
        MajorError::TooLarge => CommerceError::bad_request("totalAmount가 너무 큽니다."),
    })
}

/// What the platform's fault words in `description` ask of our simulated providers (its
/// `MockPaymentProviderClient`, `SettlementService`, `NotificationService` and retry
/// processor read the same words; docs/dialects.md has the table).
pub fn fault_scenario(description: &str) -> Scenario {
    let has = |word: &str| description.contains(word);
    let payment = if has("FAIL_PAYMENT") {
        Some(Behaviour::Decline)
    } else if has("PAYMENT_TIMEOUT_UNKNOWN") {
        Some(Behaviour::Timeout)
    } else {
        None
    };
    let notification = if has("FAIL_NOTIFICATION_IGNORE") {
        Some(Behaviour::Ignore)
    } else if has("FAIL_NOTIFICATION_RETRY_PERSISTENT") {
        // Fails every retry: the retry policy's attempts run out, then an operator decides.
        Some(Behaviour::AutoRetry(1000))
    } else if has("FAIL_NOTIFICATION_RETRY") {
        Some(Behaviour::AutoRetry(1))
    } else if has("FAIL_NOTIFICATION") {
        // FAIL_NOTIFICATION and FAIL_NOTIFICATION_MANUAL.
        Some(Behaviour::Manual)
    } else {
        None
    };
    Scenario {
        payment,
        settlement: has("FAIL_SETTLEMENT").then_some(Behaviour::Fail),
        notification,
        refund: None,
    }
}

/// The command for a valid request, checked in the platform's order (`customerId`,
/// `totalAmount`, `currency`: the first failure's message), then what we need besides.
fn command(
    body: CreateOrderRequest,
    honour_faults: bool,
    correlation: CorrelationId,
) -> Result<PlaceOrder, CommerceError> {
    let customer_id = text(body.customer_id)?.filter(|c| !c.trim().is_empty());
    let amount = decimal(body.total_amount)?;
    let currency = text(body.currency)?.filter(|c| !c.trim().is_empty());
    let description = text(body.description)?;
    let customer_id = customer_id.ok_or_else(|| CommerceError::bad_request("customerId는 필수입니다."))?;
    let amount = amount.ok_or_else(|| CommerceError::bad_request("totalAmount는 필수입니다."))?;
    if amount.trim_start_matches('+').starts_with('-') || amount.trim_matches(['0', '.', '+']).is_empty() {
        return Err(CommerceError::bad_request("totalAmount는 0보다 커야 합니다."));
    }
    let currency = currency.ok_or_else(|| CommerceError::bad_request("currency는 필수입니다."))?;
    if customer_id.chars().count() > MAX_CUSTOMER_ID || customer_id.chars().any(char::is_control) {
        return Err(CommerceError::bad_request("customerId는 100자 이하의 문자여야 합니다."));
    }
    let code: Currency = currency
        .parse()
        .map_err(|_| CommerceError::bad_request("currency는 ISO-4217 통화 코드여야 합니다. (예: KRW)"))?;
    let minor = minor_units(&amount, code)?;
    if description.as_ref().is_some_and(|d| d.chars().count() > MAX_DESCRIPTION) {
        return Err(CommerceError::bad_request("description은 255자 이하여야 합니다."));
    }
    let scenario = match &description {
        Some(d) if honour_faults => fault_scenario(d),
        _ => Scenario::default(),
    };
    Ok(PlaceOrder {
        order_id: OrderId::new(),
        customer_id: Some(customer_id),
        source: OrderSource::Commerce,
        start: OrderStart::Held,
        meeting_id: None,
        currency,
        items: vec![NewOrderItem { sku: ITEM_SKU.into(), quantity: 1, unit_price: minor }],
        scenario,
        correlation_id: Some(correlation.0),
        inbox: None,
        customer_email: None,
        description,
        keyed_in: None,
        merchant: None,
        store_id: None,
    })
}

/// Its `OrderResponse`.
fn created(record: &OrderRecord) -> OrderResponse {
    let o = &record.order;
    OrderResponse {
        order_id: o.number,
        customer_id: o.customer_id.clone(),
        total_amount: view::major(o.total),
        currency: o.currency.as_str().to_owned(),
        description: record.context.description.clone(),
        status: view::order_status(record),
        created_at: view::local(o.created_at),
    }
}

/// Its `OrderDetailResponse`.
fn detail(record: &OrderRecord) -> OrderDetailResponse {
    let o = &record.order;
    let one = |status: Option<&'static str>| status.into_iter().collect::<Vec<_>>();
    OrderDetailResponse {
        order_id: o.number,
        customer_id: o.customer_id.clone(),
        total_amount: view::major(o.total),
        currency: o.currency.as_str().to_owned(),
        description: record.context.description.clone(),
        order_status: view::order_status(record),
        created_at: view::local(o.created_at),
        updated_at: view::local(o.updated_at),
        payment_statuses: one(record.payment.as_ref().map(|p| view::payment_status(p.status))),
        settlement_statuses: one(record.settlement.as_ref().map(|s| view::settlement_status(s.status))),
        notification_statuses: one(record.notification.as_ref().map(|n| view::notification_status(n.status))),
    }
}

/// An order id the platform would look up: not one (`0`, negative) is not found.
fn number(path: web::Path<i64>) -> Result<i64, CommerceError> {
    Some(path.into_inner()).filter(|n| *n > 0).ok_or_else(CommerceError::order_not_found)
}

/// `POST /api/orders`: the order, waiting in `CREATED` for `orchestrate`.
#[utoipa::path(
    post,
    path = "/api/orders",
    tag = "commerce",
    request_body = crate::adapters::http::commerce::schema::CreateOrderRequest,
    responses(
        (status = 200, description = "data: its OrderResponse, status CREATED", body = crate::adapters::http::commerce::schema::Answer<OrderResponse>),
        (status = 400, description = "BAD_REQUEST: the first invalid field's message", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 401, description = "UNAUTHORIZED: no valid bearer token", body = crate::adapters::http::commerce::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    state: web::Data<HttpState>,
    caller: SignedIn,
    correlation: CorrelationId,
    body: web::Json<CreateOrderRequest>,
) -> Result<HttpResponse, CommerceError> {
    let command = command(body.into_inner(), state.honour_mock_scenario, correlation)?;
    let record = state.orchestrator.place_order(&caller.0.actor(), command).await?;
    Ok(ok(created(&record)))
}

/// `GET /api/orders/{orderId}`.
#[utoipa::path(
    get,
    path = "/api/orders/{orderId}",
    tag = "commerce",
    params(("orderId" = i64, Path, description = "The order's number")),
    responses(
        (status = 200, description = "data: its OrderDetailResponse", body = crate::adapters::http::commerce::schema::Answer<OrderDetailResponse>),
        (status = 401, description = "UNAUTHORIZED: no valid bearer token", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 404, description = "ORDER_NOT_FOUND", body = crate::adapters::http::commerce::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn get(
    state: web::Data<HttpState>,
    caller: SignedIn,
    path: web::Path<i64>,
) -> Result<HttpResponse, CommerceError> {
    let record = state.queries.order_by_number(&caller.0.actor(), number(path)?).await?;
    Ok(ok(detail(&record)))
}

async fn flow_of(
    state: &HttpState,
    caller: &SignedIn,
    record: &OrderRecord,
) -> Result<view::FlowView, CommerceError> {
    let events = state.queries.events_of(&caller.0.actor(), record).await?;
    Ok(view::FlowView {
        order_id: record.order.number,
        order_status: view::order_status(record),
        steps: view::steps(record, state.honour_mock_scenario),
        outbox_events: view::outbox(&events),
    })
}

/// `GET /api/orders/{orderId}/flow`.
#[utoipa::path(
    get,
    path = "/api/orders/{orderId}/flow",
    tag = "commerce",
    params(("orderId" = i64, Path, description = "The order's number")),
    responses(
        (status = 200, description = "data: its OrderFlowResponse", body = crate::adapters::http::commerce::schema::Answer<view::FlowView>),
        (status = 401, description = "UNAUTHORIZED: no valid bearer token", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 404, description = "ORDER_NOT_FOUND", body = crate::adapters::http::commerce::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn flow(
    state: web::Data<HttpState>,
    caller: SignedIn,
    path: web::Path<i64>,
) -> Result<HttpResponse, CommerceError> {
    let record = state.queries.order_by_number(&caller.0.actor(), number(path)?).await?;
    Ok(ok(flow_of(&state, &caller, &record).await?))
}

/// `POST /api/orders/{orderId}/orchestrate`: runs the saga of an order still `CREATED`
/// as far as it goes now; any other order is answered as it stands (its replay). A
/// business failure is a 200 with the flow that shows it, as the platform.
#[utoipa::path(
    post,
    path = "/api/orders/{orderId}/orchestrate",
    tag = "commerce",
    params(("orderId" = i64, Path, description = "The order's number")),
    responses(
        (status = 200, description = "data: its OrderFlowResponse, a business failure included", body = crate::adapters::http::commerce::schema::Answer<view::FlowView>),
        (status = 401, description = "UNAUTHORIZED: no valid bearer token", body = crate::adapters::http::commerce::schema::Envelope),
        (status = 404, description = "ORDER_NOT_FOUND", body = crate::adapters::http::commerce::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn orchestrate(
    state: web::Data<HttpState>,
    caller: SignedIn,
    path: web::Path<i64>,
) -> Result<HttpResponse, CommerceError> {
    let id = state.queries.id_by_number(number(path)?).await?;
    let record = state.orchestrator.start_held(&caller.0.actor(), id).await?;
    Ok(ok(flow_of(&state, &caller, &record).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_become_minor_units_of_the_currency() {
        let krw: Currency = "KRW".parse().unwrap();
        let usd: Currency = "USD".parse().unwrap();
        assert_eq!(minor_units("12000", krw), Ok(12000));
        assert_eq!(minor_units("12000.00", krw), Ok(12000));
        assert_eq!(minor_units("12.5", usd), Ok(1250));
        assert_eq!(minor_units("0.05", usd), Ok(5));
        assert_eq!(minor_units("12000.5", krw).unwrap_err().code, "BAD_REQUEST");
        assert_eq!(minor_units("0.001", usd).unwrap_err().code, "BAD_REQUEST");
        assert_eq!(minor_units("0", krw).unwrap_err().message, "totalAmount는 0보다 커야 합니다.");
        assert_eq!(minor_units("-5", krw).unwrap_err().message, "totalAmount는 0보다 커야 합니다.");
        assert_eq!(
            minor_units("99999999999999999999", krw).unwrap_err().message,
            "totalAmount가 너무 큽니다."
        );
        assert_eq!(minor_units("12a", krw).unwrap_err().message, "잘못된 요청입니다.");
    }

    #[test]
    fn the_platforms_fault_words_ask_our_mocks_for_its_outcomes() {
        let s = fault_scenario;
        assert_eq!(s("normal happy path"), Scenario::default());
        assert_eq!(s("x FAIL_PAYMENT").payment, Some(Behaviour::Decline));
        assert_eq!(s("PAYMENT_TIMEOUT_UNKNOWN").payment, Some(Behaviour::Timeout));
        assert_eq!(s("FAIL_SETTLEMENT").settlement, Some(Behaviour::Fail));
        assert_eq!(s("FAIL_NOTIFICATION").notification, Some(Behaviour::Manual));
        assert_eq!(s("FAIL_NOTIFICATION_MANUAL").notification, Some(Behaviour::Manual));
        assert_eq!(s("FAIL_NOTIFICATION_RETRY").notification, Some(Behaviour::AutoRetry(1)));
        assert_eq!(s("FAIL_NOTIFICATION_RETRY_PERSISTENT").notification, Some(Behaviour::AutoRetry(1000)));
        assert_eq!(s("FAIL_NOTIFICATION_IGNORE").notification, Some(Behaviour::Ignore));
    }
}
