//! The HTTP API (docs/spec.md §5) on actix-web: routes, DTOs, problem+json errors, JWT auth,
//! correlation ids. Handlers call use cases, never repositories.

pub mod auth;
pub mod body;
pub mod commerce;
pub mod console;
pub mod correlation;
pub mod dto;
pub mod ledger;
pub mod merchants;
pub mod momo;
pub mod notifications;
pub mod ops;
pub mod orders;
pub mod outbox_admin;
pub mod payment_methods;
pub mod payments;
pub mod problem;
pub mod settlements;
pub mod webhooks;

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

use crate::adapters::Secret;
use crate::application::health::{Readiness, Role};
use crate::application::idempotency::IdempotencyService;
use crate::application::money::payment_methods::PaymentMethods;
use crate::application::money::provider_view::ProviderView;
use crate::application::money::refunds::Refunds;
use crate::application::notification_retry::NotificationRetry;
use crate::application::orchestration::Orchestrator;
use crate::application::outbox::OutboxAdmin;
use crate::application::queries::OrderQueries;
use crate::application::recovery::Recovery;
use crate::application::settlement_retry::SettlementRetries;
use problem::ApiError;

/// What the handlers need, shared by every worker thread of the server.
pub struct HttpState {
    pub orchestrator: Arc<Orchestrator>,
    pub queries: Arc<OrderQueries>,
    pub idempotency: Arc<IdempotencyService>,
    pub outbox_admin: Arc<OutboxAdmin>,
    pub notifications: Arc<NotificationRetry>,
    pub settlements: Arc<SettlementRetries>,
    pub refunds: Arc<Refunds>,
    pub ledger: Arc<crate::application::money::ledger::Ledger>,
    pub payment_methods: Arc<PaymentMethods>,
    pub provider_view: Arc<ProviderView>,
    /// A member's own payments (the momo dialect).
    pub member_payments: Arc<crate::application::money::member_payments::MemberPayments>,
    pub key_in: Arc<crate::application::money::key_in::KeyIn>,
    /// Toss's webhooks: anyone can post them.
    pub webhook_limits: Arc<webhooks::WebhookLimits>,
    pub recovery: Arc<Recovery>,
    /// `payment.external.webhook_secret`: provider callbacks are refused without it.
    pub webhook_secret: Option<Secret>,
    pub readiness: Arc<Readiness>,
    /// Whose readiness `/health/ready` answers: `serve`'s (HTTP) or a worker's (ops server).
    pub role: Role,
    /// `X-Mock-Scenario` is honoured only with the simulated providers.
    pub honour_mock_scenario: bool,
    /// This app's metrics registry (`/metrics`).
    pub metrics: crate::telemetry::Registry,
    /// Where the wire contract sends each event (the outbox views, `/flow`).
    pub wire: Arc<crate::adapters::messaging::contract::WireView>,
    /// Merchants, their people and keys (docs/spec.md §15).
    pub merchants: Arc<crate::application::merchants::Merchants>,
    /// Merchants' webhook endpoints (docs/spec.md §16).
    pub webhooks: Arc<crate::application::webhooks::WebhookEndpoints>,
    /// Their messages' log and replays.
    pub webhook_messages: Arc<crate::application::webhooks::WebhookMessages>,
}

pub(crate) struct BearerAuth;

/// Every operation may answer any documented error as problem+json: a `default` response
/// says so (401, 405, 413, 415, 503 ... are not repeated on each operation).
struct ProblemDefault;

impl utoipa::Modify for ProblemDefault {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let problem = ResponseBuilder::new()
            .description("An error, as RFC 7807 problem+json with a stable `code`")
            .content(
                "application/problem+json",
                ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).build(),
            )
            .build();
        for item in openapi.paths.paths.values_mut() {
            for operation in [&mut item.get, &mut item.post, &mut item.put, &mut item.delete, &mut item.patch]
                .into_iter()
                .flatten()
            {
                operation
                    .responses
                    .responses
                    .entry("default".into())
                    .or_insert_with(|| problem.clone().into());
            }
        }
    }
}

/// An operation's summary is plain text (OpenAPI renders only `description` as Markdown):
/// the backticks our doc comments use for code would be shown raw, so summaries drop them.
struct PlainSummaries;

impl utoipa::Modify for PlainSummaries {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            for operation in [&mut item.get, &mut item.post, &mut item.put, &mut item.delete, &mut item.patch]
                .into_iter()
                .flatten()
            {
                if let Some(summary) = operation.summary.as_mut() {
                    summary.retain(|c| c != '`');
                }
            }
        }
    }
}

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::builder().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Order orchestration API", description = "Orders, their saga (payment, settlement, notification) and the outbox that publishes their events."),
    paths(
        orders::place_order,
        orders::get_order,
        orders::list_orders,
        orders::orchestrate,
        orders::flow,
        orders::refund,
        orders::pay,
        payment_methods::view,
        payment_methods::register,
        payment_methods::forget,
        payments::callback,
        webhooks::toss,
        payments::unconfirmed,
        payments::provider_view,
        ledger::findings,
        ledger::payouts,
        payments::stalled,
        payments::resolve_refund,
        payments::compensations_exhausted,
        outbox_admin::list_outbox,
        outbox_admin::outbox_stats,
        outbox_admin::republish,
        outbox_admin::discard,
        outbox_admin::redrive,
        notifications::list,
        notifications::retry_due,
        notifications::reprocess,
        notifications::ignore,
        settlements::list,
        settlements::get,
        settlements::retry,
        settlements::mark_settled,
        ops::live,
        ops::ready,
        ops::metrics,
        merchants::create,
        merchants::list,
        merchants::get,
        merchants::suspend,
        merchants::resume,
        merchants::stores,
        merchants::register_store,
        merchants::store,
        merchants::member,
        merchants::set_member,
        merchants::remove_member,
        merchants::keys,
        merchants::create_key,
        merchants::revoke_key,
        merchants::orders::place_order,
        merchants::orders::list_orders,
        merchants::orders::get_order,
        merchants::orders::flow,
        merchants::orders::refund,
        merchants::daily_report,
        merchants::channels,
        merchants::set_channels,
        merchants::members,
        merchants::webhooks::list,
        merchants::webhooks::create,
        merchants::webhooks::get,
        merchants::webhooks::update,
        merchants::webhooks::delete,
        merchants::webhooks::secret,
        merchants::webhooks::rotate,
        merchants::webhooks::enable,
        merchants::webhook_messages::messages,
        merchants::webhook_messages::attempts,
        merchants::webhook_messages::resend,
        merchants::webhook_messages::recover,
        merchants::repairs::notification_events,
        merchants::repairs::reprocess,
        merchants::repairs::ignore,
        merchants::repairs::settlement_list,
        merchants::repairs::settlement_retry,
        merchants::repairs::settlement_mark_settled,
    ),
    components(schemas(problem::Problem)),
    modifiers(&BearerAuth, &ProblemDefault, &PlainSummaries),
    tags((name = "orders"), (name = "payments"), (name = "admin", description = "Role admin"), (name = "merchants", description = "One deployment, many merchants (docs/merchants.md): a token or a merchant API key"), (name = "ops"))
)]
pub struct ApiDoc;

/// A resource answering `405` with `Allow` for any method it does not serve.
fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    refusing_other_methods(path, allow, |_, allow| {
        let error = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "METHOD_NOT_ALLOWED",
            format!("this resource allows {allow}"),
        );
        HttpResponse::MethodNotAllowed().content_type("application/problem+json").json(error.problem())
    })
}

/// A resource at `path` answering any method but `allow` with `refuse`'s answer and an
/// `Allow` header: the native API's and each dialect's `405`.
pub(crate) fn refusing_other_methods(
    path: &str,
    allow: &'static str,
    refuse: fn(&actix_web::HttpRequest, &'static str) -> HttpResponse,
) -> actix_web::Resource {
    web::resource(path).default_service(web::to(move |req: actix_web::HttpRequest| async move {
        let mut res = refuse(&req, allow);
        res.headers_mut()
            .insert(actix_web::http::header::ALLOW, actix_web::http::header::HeaderValue::from_static(allow));
        res
    }))
}

/// The unauthenticated operations routes (also all that `app worker` serves).
pub fn ops_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/health/live", "GET").route(web::get().to(ops::live)))
        .service(resource("/health/ready", "GET").route(web::get().to(ops::ready)))
        .service(resource("/metrics", "GET").route(web::get().to(ops::metrics)));
}

/// Every route of the API.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.configure(ops_routes).configure(merchant_routes);
    cfg.app_data(web::QueryConfig::default().error_handler(|err, _| {
        ApiError::new(StatusCode::BAD_REQUEST, "MALFORMED_QUERY", err.to_string()).into()
    }))
    .app_data(web::PathConfig::default().error_handler(|_, _| ApiError::not_found("resource").into()))
    .service(resource("/openapi.json", "GET").route(web::get().to(ops::openapi)))
    .service(resource("/openapi/commerce.json", "GET").route(web::get().to(ops::commerce_openapi)))
    .service(resource("/openapi/momo.json", "GET").route(web::get().to(ops::momo_openapi)))
    .service(resource("/console", "GET").route(web::get().to(console::console_root)))
    .service(resource("/console/{file:.*}", "GET").route(web::get().to(console::console)))
    .service(resource("/docs", "GET").route(web::get().to(ops::docs_root)))
    .service(resource("/docs/{file:.*}", "GET").route(web::get().to(ops::docs)))
    .service(
        resource("/api/orders", "GET, POST")
            .route(web::post().to(orders::place_order))
            .route(web::get().to(orders::list_orders)),
    )
    .service(resource("/api/orders/{id}", "GET").route(web::get().to(orders::get_order)))
    .service(resource("/api/orders/{id}/refund", "POST").route(web::post().to(orders::refund)))
    .service(resource("/api/orders/{id}/payment", "POST").route(web::post().to(orders::pay)))
    .service(
        resource("/api/payment-methods", "GET, POST, DELETE")
            .route(web::get().to(payment_methods::view))
            .route(web::post().to(payment_methods::register))
            .route(web::delete().to(payment_methods::forget)),
    )
    .service(resource("/api/orders/{id}/flow", "GET").route(web::get().to(orders::flow)))
    .service(resource("/api/orders/{id}/orchestrate", "POST").route(web::post().to(orders::orchestrate)))
    .service(resource("/api/payments/callbacks", "POST").route(web::post().to(payments::callback)))
    .service(resource("/api/payments/toss/webhook", "POST").route(web::post().to(webhooks::toss)))
    .service(resource("/api/admin/payments/unconfirmed", "GET").route(web::get().to(payments::unconfirmed)))
    .service(
        resource("/api/admin/payments/{id}/provider", "GET").route(web::get().to(payments::provider_view)),
    )
    .service(resource("/api/admin/reconciliation/findings", "GET").route(web::get().to(ledger::findings)))
    .service(resource("/api/admin/payouts", "GET").route(web::get().to(ledger::payouts)))
    .service(resource("/api/admin/orders/stalled", "GET").route(web::get().to(payments::stalled)))
    .service(
        resource("/api/admin/orders/{id}/refunds/{refundId}/resolve", "POST")
            .route(web::post().to(payments::resolve_refund)),
    )
    .service(
        resource("/api/admin/payments/compensations-exhausted", "GET")
            .route(web::get().to(payments::compensations_exhausted)),
    )
    .service(resource("/api/admin/outbox", "GET").route(web::get().to(outbox_admin::list_outbox)))
    .service(resource("/api/admin/outbox/stats", "GET").route(web::get().to(outbox_admin::outbox_stats)))
    .service(resource("/api/admin/outbox/redrive", "POST").route(web::post().to(outbox_admin::redrive)))
    .service(
        resource("/api/admin/outbox/{id}/republish", "POST").route(web::post().to(outbox_admin::republish)),
    )
    .service(resource("/api/admin/outbox/{id}/discard", "POST").route(web::post().to(outbox_admin::discard)))
    .service(resource("/api/admin/notification-events", "GET").route(web::get().to(notifications::list)))
    .service(
        resource("/api/admin/notification-events/retry-due", "POST")
            .route(web::post().to(notifications::retry_due)),
    )
    .service(
        resource("/api/admin/notification-events/{id}/reprocess", "POST")
            .route(web::post().to(notifications::reprocess)),
    )
    .service(
        resource("/api/admin/notification-events/{id}/ignore", "POST")
            .route(web::post().to(notifications::ignore)),
    )
    .service(resource("/api/admin/settlements", "GET").route(web::get().to(settlements::list)))
    .service(resource("/api/admin/settlements/{id}", "GET").route(web::get().to(settlements::get)))
    .service(resource("/api/admin/settlements/{id}/retry", "POST").route(web::post().to(settlements::retry)))
    .service(
        resource("/api/admin/settlements/{id}/mark-settled", "POST")
            .route(web::post().to(settlements::mark_settled)),
    );
}

/// `/api/merchants` (docs/spec.md §15).
fn merchant_routes(cfg: &mut web::ServiceConfig) {
    use merchants::orders;
    cfg.service(
        resource("/api/merchants", "GET, POST")
            .route(web::post().to(merchants::create))
            .route(web::get().to(merchants::list)),
    )
    .service(resource("/api/merchants/{id}", "GET").route(web::get().to(merchants::get)))
    .service(resource("/api/merchants/{id}/suspend", "POST").route(web::post().to(merchants::suspend)))
    .service(resource("/api/merchants/{id}/resume", "POST").route(web::post().to(merchants::resume)))
    .service(
        resource("/api/merchants/{id}/stores", "GET, POST")
            .route(web::get().to(merchants::stores))
            .route(web::post().to(merchants::register_store)),
    )
    .service(resource("/api/merchants/{id}/stores/{storeId}", "GET").route(web::get().to(merchants::store)))
    .service(
        resource("/api/merchants/{id}/members/{subject}", "GET, PUT, DELETE")
            .route(web::get().to(merchants::member))
            .route(web::put().to(merchants::set_member))
            .route(web::delete().to(merchants::remove_member)),
    )
    .service(
        resource("/api/merchants/{id}/api-keys", "GET, POST")
            .route(web::get().to(merchants::keys))
            .route(web::post().to(merchants::create_key)),
    )
    .service(
        resource("/api/merchants/{id}/api-keys/{keyId}/revoke", "POST")
            .route(web::post().to(merchants::revoke_key)),
    )
    .service(
        resource("/api/merchants/{id}/orders", "GET, POST")
            .route(web::post().to(orders::place_order))
            .route(web::get().to(orders::list_orders)),
    )
    .service(resource("/api/merchants/{id}/orders/{order}", "GET").route(web::get().to(orders::get_order)))
    .service(resource("/api/merchants/{id}/orders/{order}/flow", "GET").route(web::get().to(orders::flow)))
    .service(
        resource("/api/merchants/{id}/orders/{order}/refund", "POST").route(web::post().to(orders::refund)),
    )
    .service(
        resource("/api/merchants/{id}/reports/daily", "GET").route(web::get().to(merchants::daily_report)),
    )
    .service(resource("/api/merchants/{id}/members", "GET").route(web::get().to(merchants::members)))
    .service(
        resource("/api/merchants/{id}/channels", "GET, PUT")
            .route(web::get().to(merchants::channels))
            .route(web::put().to(merchants::set_channels)),
    )
    .configure(merchant_repair_routes);
}

/// A merchant's webhook endpoints and their messages under its path.
fn merchant_webhook_routes(cfg: &mut web::ServiceConfig) {
    use merchants::{webhook_messages, webhooks};
    cfg.service(
        resource("/api/merchants/{id}/webhook-endpoints", "GET, POST")
            .route(web::get().to(webhooks::list))
            .route(web::post().to(webhooks::create)),
    )
    .service(
        resource("/api/merchants/{id}/webhook-endpoints/{endpointId}", "GET, PATCH, DELETE")
            .route(web::get().to(webhooks::get))
            .route(web::patch().to(webhooks::update))
            .route(web::delete().to(webhooks::delete)),
    )
    .service(
        resource("/api/merchants/{id}/webhook-endpoints/{endpointId}/secret", "GET")
            .route(web::get().to(webhooks::secret)),
    )
    .service(
        resource("/api/merchants/{id}/webhook-endpoints/{endpointId}/secret/rotate", "POST")
            .route(web::post().to(webhooks::rotate)),
    )
    .service(
        resource("/api/merchants/{id}/webhook-endpoints/{endpointId}/enable", "POST")
            .route(web::post().to(webhooks::enable)),
    )
    .service(
        resource("/api/merchants/{id}/webhook-endpoints/{endpointId}/messages", "GET")
            .route(web::get().to(webhook_messages::messages)),
    )
    .service(
        resource("/api/merchants/{id}/webhook-endpoints/{endpointId}/messages/{eventId}/attempts", "GET")
            .route(web::get().to(webhook_messages::attempts)),
    )
    .service(
        resource("/api/merchants/{id}/webhook-endpoints/{endpointId}/messages/{eventId}/resend", "POST")
            .route(web::post().to(webhook_messages::resend)),
    )
    .service(
        resource("/api/merchants/{id}/webhook-endpoints/{endpointId}/recover", "POST")
            .route(web::post().to(webhook_messages::recover)),
    );
}

/// A merchant's repairs under its path.
fn merchant_repair_routes(cfg: &mut web::ServiceConfig) {
    use merchants::repairs;
    cfg.configure(merchant_webhook_routes)
        .service(
            resource("/api/merchants/{id}/notification-events", "GET")
                .route(web::get().to(repairs::notification_events)),
        )
        .service(
            resource("/api/merchants/{id}/notification-events/{eventId}/reprocess", "POST")
                .route(web::post().to(repairs::reprocess)),
        )
        .service(
            resource("/api/merchants/{id}/notification-events/{eventId}/ignore", "POST")
                .route(web::post().to(repairs::ignore)),
        )
        .service(
            resource("/api/merchants/{id}/settlements", "GET").route(web::get().to(repairs::settlement_list)),
        )
        .service(
            resource("/api/merchants/{id}/settlements/{settlementId}/retry", "POST")
                .route(web::post().to(repairs::settlement_retry)),
        )
        .service(
            resource("/api/merchants/{id}/settlements/{settlementId}/mark-settled", "POST")
                .route(web::post().to(repairs::settlement_mark_settled)),
        );
}

/// A query parameter as docs/spec.md §5 reads it: an empty one is absent; one with a control
/// character or over `max` characters is `422` naming it.
///
/// # Errors
/// `422 VALIDATION_FAILED` with `field = name`.
pub(crate) fn query_param(name: &str, value: Option<String>, max: usize) -> Result<Option<String>, ApiError> {
    match value {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => {
            crate::domain::text::check(name, &v, max)
                .map_err(|e| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, e.field(), e.message()))?;
            Ok(Some(v))
        }
    }
}

/// Unknown routes answer problem+json too.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::not_found("resource"))
}
