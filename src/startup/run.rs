//! What runs: the worker's loops ([`Workers`]), the HTTP server ([`Application`]), the ops
//! server and the shutdown signal.

use std::future::Future;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::middleware::from_fn;
use actix_web::{App, HttpServer, web};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Services, StartupError, build_services_with_clock, contract, refuse_restored_history};
use crate::adapters::clock::SystemClock;
use crate::adapters::http::{self, HttpState};
use crate::adapters::messaging::contract::{Broker, Contract, WireView};
use crate::adapters::persistence;
use crate::application::health::Role;
use crate::application::jobs::{self, PeriodicJob};
use crate::application::outbox::housekeeping_jobs;
use crate::application::ports::Clock;
use crate::application::recovery::jobs::recovery_jobs;
use crate::config::{BrokerKind, ProviderKind, Settings};

/// The background loops of `app worker` (and of `app serve` when embedded).
pub struct Workers {
    stop: CancellationToken,
    handles: Vec<JoinHandle<()>>,
    loops: Vec<&'static str>,
}

impl Workers {
    pub fn spawn(services: &Services) -> Workers {
        let stop = services.shutdown.child_token();
        let mut handles = Vec::new();
        let mut loops = vec!["outbox relay"];
        let relay = services.relay();
        let interest = relay.interest();
        let token = stop.clone();
        handles.push(tokio::spawn(async move { relay.run_until_stopped(token).await }));
        // The periodic jobs, one runner each, each reporting its rounds to readiness.
        let mut periodic: Vec<Arc<dyn PeriodicJob>> = housekeeping_jobs(&services.housekeeping);
        periodic.push(services.settlements.clone());
        if services.settings.notification.retry_enabled {
            periodic.push(services.notifications.clone());
        }
        periodic.extend(recovery_jobs(&services.recovery, &services.orchestrator, &services.money.refunds));
        if services.settings.payment.provider == ProviderKind::Toss {
            periodic.push(services.money.ledger.clone());
        }
        periodic.push(services.webhooks.fanout.clone());
        periodic.push(services.webhooks.upkeep.clone());
        let deliveries = services.webhooks.deliveries.clone();
        handles.push(tokio::spawn(deliveries.run_until_stopped(stop.clone())));
        loops.push("webhook deliveries");
        for job in periodic {
            loops.push(job.name());
            handles.push(tokio::spawn(jobs::run(job, Some(services.loops.clone()), stop.clone())));
        }
        if let Some(consumers) = services.meeting_consumers() {
            let token = stop.clone();
            handles.push(tokio::spawn(consumers.run_until_stopped(token)));
            loops.push("meeting-service consumers");
        }
        if persistence::is_postgres(&services.db) {
            let (db, wake, token) = (services.db.clone(), services.relay_wake.clone(), stop.clone());
            handles.push(tokio::spawn(persistence::wake_on_notify(db, wake, interest, token)));
            loops.push("outbox wake-ups (LISTEN)");
        }
        tracing::info!(loops = %loops.join("; "), "worker loops started");
        Workers { stop, handles, loops }
    }

    /// The loops this worker runs (which ones depends on the configuration).
    pub fn loops(&self) -> &[&'static str] {
        &self.loops
    }

    /// Stops claiming, lets rounds in flight finish (bounded), and returns.
    pub async fn shutdown(self, grace: StdDuration) {
        self.stop.cancel();
        for handle in self.handles {
            if tokio::time::timeout(grace, handle).await.is_err() {
                tracing::warn!("a worker loop did not stop within the grace period");
            }
        }
    }
}

/// Drains the metrics' histograms now and then (a scrape does it too; with no scraper they
/// would only grow), until `stop`.
pub(super) fn upkeep_metrics(metrics: &crate::telemetry::Registry, stop: CancellationToken) {
    let handle = metrics.handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => handle.run_upkeep(),
            }
        }
    });
}

/// The HTTP state shared by handlers.
pub(super) fn http_state(services: &Services, role: Role) -> web::Data<HttpState> {
    web::Data::new(HttpState {
        orchestrator: services.orchestrator.clone(),
        queries: services.queries.clone(),
        idempotency: services.idempotency.clone(),
        outbox_admin: services.outbox_admin.clone(),
        notifications: services.notifications.clone(),
        settlements: services.settlements.clone(),
        refunds: services.money.refunds.clone(),
        ledger: services.money.ledger.clone(),
        payment_methods: services.money.payment_methods.clone(),
        provider_view: services.money.provider_view.clone(),
        member_payments: services.money.member_payments.clone(),
        key_in: services.key_in.clone(),
        // Far above what Toss sends for one shop: docs/operations.md, "Toss's webhooks".
        webhook_limits: Arc::new(crate::adapters::http::webhooks::WebhookLimits::default()),
        recovery: services.recovery.clone(),
        webhook_secret: services.settings.payment.external_webhook_secret.clone(),
        readiness: services.readiness.clone(),
        role,
        honour_mock_scenario: services.settings.payment.provider == ProviderKind::Mock,
        metrics: services.metrics.clone(),
        wire: Arc::new(wire_view(&services.settings)),
        merchants: services.merchants.clone(),
        webhooks: services.webhooks.endpoints.clone(),
        webhook_messages: services.webhooks.messages.clone(),
    })
}

/// Where the configured contract sends events, for the outbox views and `/flow`. A contract
/// this build cannot speak has already stopped the start (`publishers`); native otherwise.
pub(super) fn wire_view(settings: &Settings) -> WireView {
    let broker = match settings.broker.kind {
        BrokerKind::Log => None,
        BrokerKind::Amqp => Some(Broker::Amqp),
        BrokerKind::Kafka => Some(Broker::Kafka),
    };
    let own = match settings.broker.kind {
        BrokerKind::Kafka => settings.broker.kafka.topic.clone(),
        _ => settings.broker.exchange.clone(),
    };
    WireView { contract: contract(settings).unwrap_or(Contract::Native), broker, own }
}

/// `app worker`'s own HTTP surface: `/health/*` and `/metrics` only, on `worker.http.bind`
/// (never `http.bind`, so `serve` and workers share one environment on one host).
///
/// # Errors
/// The address cannot be bound.
pub fn ops_server(services: &Services) -> Result<(Server, std::net::SocketAddr), StartupError> {
    let bind = services.settings.worker.http_bind;
    let listener = TcpListener::bind(bind)
        .map_err(|e| StartupError::runtime(format!("cannot bind worker.http.bind {bind}"), e))?;
    let local =
        listener.local_addr().map_err(|e| StartupError::runtime("cannot read the bound address", e))?;
    let state = http_state(services, Role::Worker);
    let server = HttpServer::new(move || {
        App::new()
            .wrap(from_fn(http::correlation::correlate))
            .app_data(state.clone())
            .configure(http::ops_routes)
            .default_service(web::to(http::not_found))
    })
    .workers(1)
    .listen(listener)
    .map_err(|e| StartupError::runtime(format!("cannot serve worker.http.bind {bind}"), e))?
    .disable_signals()
    .run();
    Ok((server, local))
}

/// A dialect's server (docs/spec.md §14) on its own address `bind` (the key `name`), the
/// app `app` makes over the same state as the native API.
fn dialect_server<F, T, B>(
    name: &str,
    bind: std::net::SocketAddr,
    app: F,
) -> Result<(u16, Server), StartupError>
where
    F: Fn() -> App<T> + Send + Clone + 'static,
    T: actix_web::dev::ServiceFactory<
            actix_web::dev::ServiceRequest,
            Config = (),
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
    B: actix_web::body::MessageBody + 'static,
{
    let listener = TcpListener::bind(bind)
        .map_err(|e| StartupError::runtime(format!("cannot bind http.dialects.{name}.bind {bind}"), e))?;
    let port =
        listener.local_addr().map_err(|e| StartupError::runtime("cannot read the bound address", e))?.port();
    let server = HttpServer::new(app)
        .listen(listener)
        .map_err(|e| StartupError::runtime(format!("cannot serve http.dialects.{name}.bind {bind}"), e))?
        .disable_signals()
        .shutdown_timeout(10)
        .run();
    tracing::info!(port, dialect = name, "serving a dialect (docs/dialects.md)");
    Ok((port, server))
}

/// The commerce dialect's server.
fn commerce_server(
    services: &Services,
    dialect: &crate::adapters::http::commerce::CommerceDialectSettings,
) -> Result<(u16, Server), StartupError> {
    let api = http::commerce::CommerceApi::new(dialect.clone(), services.owners.commerce)
        .map_err(|e| StartupError::Config(e.0))?;
    let api = web::Data::from(api);
    let state = http_state(services, Role::Serve);
    dialect_server("commerce", dialect.bind, move || {
        App::new()
            .wrap(from_fn(http::commerce::bounded_body))
            .wrap(from_fn(http::commerce::trace))
            .wrap(from_fn(http::correlation::correlate))
            .app_data(state.clone())
            .app_data(api.clone())
            .configure(http::commerce::routes)
            .default_service(web::to(http::commerce::not_found))
    })
}

/// The momo dialect's server.
fn momo_server(
    services: &Services,
    dialect: &crate::adapters::http::momo::MomoDialectSettings,
) -> Result<(u16, Server), StartupError> {
    let zone = services.settings.meetings.timezone;
    let api = http::momo::MomoApi::new(dialect, zone, services.owners.meetings)
        .map_err(|e| StartupError::Config(e.0))?;
    let api = web::Data::from(api);
    let state = http_state(services, Role::Serve);
    dialect_server("momo", dialect.bind, move || {
        App::new()
            .wrap(from_fn(http::momo::bounded_body))
            .wrap(from_fn(http::momo::cookie_echo))
            .wrap(from_fn(http::correlation::correlate))
            .app_data(state.clone())
            .app_data(api.clone())
            .configure(http::momo::routes)
            .default_service(web::to(http::momo::not_found))
    })
}

/// A running `app serve`: the HTTP server and, when embedded, the worker loops.
pub struct Application {
    port: u16,
    server: Server,
    /// The commerce dialect's listener (`http.dialects.commerce.bind`) and its port.
    commerce: Option<(u16, Server)>,
    /// The momo dialect's listener (`http.dialects.momo.bind`) and its port.
    momo: Option<(u16, Server)>,
    services: Services,
}

impl Application {
    /// Binds `http.bind` (port 0 picks a free one) and builds everything.
    ///
    /// # Errors
    /// As [`build_services`], or the address cannot be bound.
    pub async fn build(settings: Settings) -> Result<Application, StartupError> {
        Self::build_with_clock(settings, Arc::new(SystemClock)).await
    }

    /// [`Application::build`] on `clock` (tests drive time by hand).
    ///
    /// # Errors
    /// As [`Application::build`].
    pub async fn build_with_clock(
        settings: Settings,
        clock: Arc<dyn Clock>,
    ) -> Result<Application, StartupError> {
        settings.require_explicit_production().map_err(|e| StartupError::Config(e.to_string()))?;
        let services = build_services_with_clock(&settings, clock).await?;
        refuse_restored_history(&services).await?;
        // An identity provider down at start is not fatal: the fetch is logged and tried
        // again by the first token that needs it (answered 503 until then).
        let _ = services.jwt.load_key_set().await;
        let listener = TcpListener::bind(settings.http.bind)
            .map_err(|e| StartupError::runtime(format!("cannot bind {}", settings.http.bind), e))?;
        let port = listener
            .local_addr()
            .map_err(|e| StartupError::runtime("cannot read the bound address", e))?
            .port();
        // An embedded worker's loops do not make the broker a need of `serve`: its HTTP
        // accepts orders without one.
        let state = http_state(&services, Role::Serve);
        let jwt = web::Data::from(services.jwt.clone());
        let server = HttpServer::new(move || {
            App::new()
                .wrap(from_fn(http::correlation::correlate))
                .app_data(state.clone())
                .app_data(jwt.clone())
                .configure(http::routes)
                .default_service(web::to(http::not_found))
        })
        .listen(listener)
        .map_err(|e| StartupError::runtime(format!("cannot serve {}", settings.http.bind), e))?
        .disable_signals()
        .shutdown_timeout(10)
        .run();
        let commerce = match &settings.http.commerce {
            Some(dialect) => Some(commerce_server(&services, dialect)?),
            None => None,
        };
        let momo = match &settings.http.momo {
            Some(dialect) => Some(momo_server(&services, dialect)?),
            None => None,
        };
        Ok(Application { port, server, commerce, momo, services })
    }

    /// The port of the commerce dialect's listener, when it is on.
    pub fn commerce_port(&self) -> Option<u16> {
        self.commerce.as_ref().map(|(port, _)| *port)
    }

    /// The port of the momo dialect's listener, when it is on.
    pub fn momo_port(&self) -> Option<u16> {
        self.momo.as_ref().map(|(port, _)| *port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn services(&self) -> &Services {
        &self.services
    }

    pub fn server_handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until `shutdown` resolves, then stops accepting, finishes requests in
    /// flight, stops the worker loops and returns.
    ///
    /// # Errors
    /// The server failed.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let workers = self.services.settings.worker.embedded.then(|| Workers::spawn(&self.services));
        let handle = self.server.handle();
        let dialects: Vec<_> = [self.commerce, self.momo]
            .into_iter()
            .flatten()
            .map(|(_, server)| {
                let handle = server.handle();
                (handle, tokio::spawn(server))
            })
            .collect();
        let mut server = tokio::spawn(self.server);
        let result = tokio::select! {
            result = &mut server => result.unwrap_or_else(|e| Err(std::io::Error::other(e))),
            _ = shutdown => {
                tracing::info!("shutting down: finishing requests in flight");
                handle.stop(true).await;
                server.await.unwrap_or_else(|e| Err(std::io::Error::other(e)))
            }
        };
        for (handle, server) in dialects {
            handle.stop(true).await;
            let _ = server.await;
        }
        if let Some(workers) = workers {
            workers.shutdown(StdDuration::from_secs(30)).await;
        }
        self.services.shutdown.cancel();
        result
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
