//! The HTTP API (SPEC §5) on actix-web: routes, DTOs, problem+json errors, JWT auth,
//! correlation ids. Handlers call use cases, never repositories.

pub mod admin;
pub mod auth;
pub mod body;
pub mod correlation;
pub mod dto;
pub mod notifications;
pub mod ops;
pub mod orders;
pub mod payments;
pub mod problem;

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

use crate::application::health::Readiness;
use crate::application::idempotency::IdempotencyService;
use crate::application::notification_retry::NotificationRetry;
use crate::application::orchestration::Orchestrator;
use crate::application::outbox::OutboxAdmin;
use crate::application::payment_reconciliation::PaymentReconciliation;
use crate::application::queries::OrderQueries;
use crate::application::refunds::Refunds;
use crate::config::Secret;
use problem::ApiError;

/// What the handlers need, shared by every worker thread of the server.
pub struct HttpState {
    pub orchestrator: Arc<Orchestrator>,
    pub queries: Arc<OrderQueries>,
    pub idempotency: Arc<IdempotencyService>,
    pub outbox_admin: Arc<OutboxAdmin>,
    pub notifications: Arc<NotificationRetry>,
    pub refunds: Arc<Refunds>,
    pub reconciliation: Arc<PaymentReconciliation>,
    /// `payment.external.webhook_secret`: provider callbacks are refused without it.
    pub webhook_secret: Option<Secret>,
    pub readiness: Arc<Readiness>,
    /// `X-Mock-Scenario` is honoured only with the simulated providers.
    pub honour_mock_scenario: bool,
}

struct BearerAuth;

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
        payments::callback,
        payments::unconfirmed,
        admin::list_outbox,
        admin::outbox_stats,
        admin::republish,
        admin::discard,
        admin::redrive,
        notifications::list,
        notifications::retry_due,
        notifications::reprocess,
        notifications::ignore,
        ops::live,
        ops::ready,
        ops::metrics,
    ),
    components(schemas(problem::Problem)),
    modifiers(&BearerAuth),
    tags((name = "orders"), (name = "payments"), (name = "admin", description = "Role admin"), (name = "ops"))
)]
pub struct ApiDoc;

/// The unauthenticated operations routes (also all that `app worker` serves).
pub fn ops_routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/health/live", web::get().to(ops::live))
        .route("/health/ready", web::get().to(ops::ready))
        .route("/metrics", web::get().to(ops::metrics));
}

/// Every route of the API.
pub fn routes(cfg: &mut web::ServiceConfig) {
    ops_routes(cfg);
    cfg.app_data(web::QueryConfig::default().error_handler(|err, _| {
        ApiError::new(StatusCode::BAD_REQUEST, "MALFORMED_QUERY", err.to_string()).into()
    }))
    .app_data(web::PathConfig::default().error_handler(|_, _| ApiError::not_found("resource").into()))
    .route("/openapi.json", web::get().to(ops::openapi))
    .route("/docs", web::get().to(ops::docs))
    .service(
        web::resource("/api/orders")
            .route(web::post().to(orders::place_order))
            .route(web::get().to(orders::list_orders))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/orders/{id}")
            .route(web::get().to(orders::get_order))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/orders/{id}/refund")
            .route(web::post().to(orders::refund))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/orders/{id}/flow")
            .route(web::get().to(orders::flow))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/payments/callbacks")
            .route(web::post().to(payments::callback))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/admin/payments/unconfirmed")
            .route(web::get().to(payments::unconfirmed))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/admin/outbox")
            .route(web::get().to(admin::list_outbox))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/admin/outbox/stats")
            .route(web::get().to(admin::outbox_stats))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/admin/outbox/redrive")
            .route(web::post().to(admin::redrive))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/admin/outbox/{id}/republish")
            .route(web::post().to(admin::republish))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/admin/outbox/{id}/discard")
            .route(web::post().to(admin::discard))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/admin/notification-events")
            .route(web::get().to(notifications::list))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/admin/notification-events/retry-due")
            .route(web::post().to(notifications::retry_due))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/admin/notification-events/{id}/reprocess")
            .route(web::post().to(notifications::reprocess))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/admin/notification-events/{id}/ignore")
            .route(web::post().to(notifications::ignore))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/api/orders/{id}/orchestrate")
            .route(web::post().to(orders::orchestrate))
            .default_service(web::to(method_not_allowed)),
    );
}

async fn method_not_allowed() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        "method not allowed on this resource",
    ))
}

/// Unknown routes answer problem+json too.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::not_found("resource"))
}
