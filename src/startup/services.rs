//! Every service of the application, wired from the adapters: the money's use cases with
//! the provider's capabilities, the saga, the meeting events, the repairs, readiness.

use std::sync::Arc;

use sea_orm::DatabaseConnection;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{
    Capabilities, Services, StartupError, chrono, database, housekeeping_settings, install_tls_provider,
    ledger_settings, notification_settings, outbox_store, payment_provider, providers, publishers,
    reconciliation_settings, refund_settings, saga_settings, upkeep_metrics,
};
use crate::adapters::clock::SystemClock;
use crate::adapters::http::auth::JwtKeys;
use crate::adapters::persistence::{DatabaseProbe, SeaOrmIdempotencyStore, SeaOrmStore, SqlMeetingFees};
use crate::adapters::providers::{
    EmailNotifier, Measured, ProviderCalls, SimulatedNotifier, SimulatedSettlementGateway, WebhookClient,
    WebhookNotifier, WebhookSettlements,
};
use crate::adapters::providers::{RoutedNotifier, RoutedSettlements};
use crate::adapters::secret_box::XChaChaBox;
use crate::application::health::{HealthProbe, LoopProgress, Readiness};
use crate::application::idempotency::IdempotencyService;
use crate::application::inbound::MeetingEvents;
use crate::application::merchants::Merchants;
use crate::application::merchants::channels::ChannelVault;
use crate::application::money::key_in::KeyIn;
use crate::application::money::ledger::Ledger;
use crate::application::money::member_payments::MemberPayments;
use crate::application::money::payment_methods::PaymentMethods;
use crate::application::money::provider_view::ProviderView;
use crate::application::money::refunds::Refunds;
use crate::application::notification_retry::NotificationRetry;
use crate::application::orchestration::Orchestrator;
use crate::application::outbox::{Housekeeping, OutboxAdmin};
use crate::application::ports::{
    CardKeyIn, Clock, IdempotencyStore, LedgerStore, MeetingFees, MeetingPayments, Notifier, OrderRepository,
    OutboxStore, PaymentGateway, PaymentMethodRepository, PaymentRepository, PayoutStore, ProviderCustomers,
    ProviderLedger, SagaRuns, SecretBox, SettlementGateway, UnitOfWork,
};
use crate::application::queries::OrderQueries;
use crate::application::recovery::Recovery;
use crate::application::settlement_retry::{SettlementRetries, SettlementRetrySettings};
use crate::config::{FeeSource, NotificationChannel, ProviderKind, Settings, SettlementChannel};
use crate::domain::ids::MerchantId;
use crate::domain::merchant::DEFAULT_CODE;

/// Connects, migrates (SQLite) or checks the schema (PostgreSQL), and wires the services.
///
/// # Errors
/// `Config` for unusable keys; `Runtime` when the database cannot be reached or is not
/// migrated.
pub async fn build_services(settings: &Settings) -> Result<Services, StartupError> {
    build_services_with_clock(settings, Arc::new(SystemClock)).await
}

pub(super) type Channels = (Arc<dyn SettlementGateway>, Arc<dyn Notifier>);

/// The settlement and notification channels `settlement.channel` and
/// `notification.channel` name (docs/spec.md §13), each call timed and counted.
pub(super) fn channels(
    settings: &Settings,
    calls: &Arc<ProviderCalls>,
    meter: &crate::application::meter::Meter,
) -> Result<Channels, StartupError> {
    let (settlements, settlement_label): (Arc<dyn SettlementGateway>, &'static str) =
        match &settings.settlement.channel {
            SettlementChannel::Simulated => {
                (Arc::new(SimulatedSettlementGateway::new(calls.clone())), "simulated")
            }
            SettlementChannel::Webhook(webhook) => (
                Arc::new(WebhookSettlements::new(
                    WebhookClient::new(webhook.clone()).map_err(|e| StartupError::Config(e.to_string()))?,
                )),
                "webhook",
            ),
        };
    let settlements: Arc<dyn SettlementGateway> =
        Arc::new(Measured::new(settlements, settlement_label, meter.clone()));
    // docs/spec.md §13: the channel `notification.channel` names.
    let (notifier, notifier_label): (Arc<dyn Notifier>, &'static str) = match &settings.notification.channel {
        NotificationChannel::Simulated => (Arc::new(SimulatedNotifier::new(calls.clone())), "simulated"),
        NotificationChannel::Email(email) => {
            (Arc::new(EmailNotifier::new(email).map_err(|e| StartupError::Config(e.to_string()))?), "email")
        }
        NotificationChannel::Webhook(webhook) => (
            Arc::new(WebhookNotifier::new(
                WebhookClient::new(webhook.clone()).map_err(|e| StartupError::Config(e.to_string()))?,
            )),
            "webhook",
        ),
    };
    let notifier: Arc<dyn Notifier> = Arc::new(Measured::new(notifier, notifier_label, meter.clone()));
    Ok((settlements, notifier))
}

impl Capabilities {
    /// The ledger's reads and the billing-key issues timed and counted like every provider
    /// call (the support look-up is not).
    fn measured(self, provider: &'static str, meter: &crate::application::meter::Meter) -> Capabilities {
        Capabilities {
            records: self.records,
            ledger: self.ledger.map(|ledger| -> Arc<dyn ProviderLedger> {
                Arc::new(Measured::new(ledger, provider, meter.clone()))
            }),
            customers: self.customers.map(|customers| -> Arc<dyn ProviderCustomers> {
                Arc::new(Measured::new(customers, provider, meter.clone()))
            }),
            key_in: self.key_in.map(|key_in| -> Arc<dyn CardKeyIn> {
                Arc::new(Measured::new(key_in, provider, meter.clone()))
            }),
        }
    }
}

/// The money's use cases beside the saga.
#[derive(Clone)]
pub struct Money {
    pub refunds: Arc<Refunds>,
    /// The provider's ledger, reconciled daily (Toss only).
    pub ledger: Arc<Ledger>,
    pub payment_methods: Arc<PaymentMethods>,
    pub provider_view: Arc<ProviderView>,
    /// A member's own payments (the momo dialect).
    pub member_payments: Arc<MemberPayments>,
}

/// The ledger run, the provider's view, saved cards and refunds, each with the provider's
/// capabilities it needs (absent where the provider has none).
pub(super) fn money(
    settings: &Settings,
    orders: &Arc<SeaOrmStore>,
    payments: &Arc<dyn PaymentGateway>,
    capabilities: &Capabilities,
    clock: &Arc<dyn Clock>,
) -> Money {
    let ledger = Arc::new(Ledger::new(
        capabilities.ledger.clone(),
        orders.clone() as Arc<dyn PaymentRepository>,
        orders.clone() as Arc<dyn LedgerStore>,
        orders.clone() as Arc<dyn PayoutStore>,
        clock.clone(),
        ledger_settings(settings),
    ));
    let provider_view = Arc::new(ProviderView::new(
        orders.clone() as Arc<dyn PaymentRepository>,
        capabilities.records.clone(),
    ));
    let payment_methods = Arc::new(PaymentMethods::new(
        orders.clone() as Arc<dyn PaymentMethodRepository>,
        capabilities.customers.clone(),
        clock.clone(),
    ));
    let refunds = Arc::new(Refunds::new(
        orders.clone(),
        orders.clone(),
        orders.clone(),
        orders.clone(),
        payments.clone(),
        clock.clone(),
        refund_settings(settings),
    ));
    Money {
        member_payments: Arc::new(MemberPayments::new(
            orders.clone() as Arc<dyn MeetingPayments>,
            provider_view.clone(),
            refunds.clone(),
        )),
        refunds,
        ledger,
        provider_view,
        payment_methods,
    }
}

/// Notification retries through the channel the saga sends with.
pub(super) fn notification_retries(
    settings: &Settings,
    orders: &Arc<SeaOrmStore>,
    notifier: &Arc<dyn Notifier>,
    clock: &Arc<dyn Clock>,
    meter: &crate::application::meter::Meter,
) -> Arc<NotificationRetry> {
    let retry = NotificationRetry::new(
        orders.clone(),
        orders.clone(),
        orders.clone(),
        notifier.clone(),
        clock.clone(),
        notification_settings(settings),
    );
    Arc::new(retry.with_meter(meter.clone()))
}

/// The worker's repairs: reconciliation, compensations and stalled sagas (`Recovery`), and
/// settlement retries.
pub(super) fn repairs(
    settings: &Settings,
    orchestrator: &Arc<Orchestrator>,
    refunds: &Arc<Refunds>,
    orders: &Arc<SeaOrmStore>,
    clock: &Arc<dyn Clock>,
    meter: crate::application::meter::Meter,
) -> (Arc<Recovery>, Arc<SettlementRetries>) {
    let recovery = Recovery::new(
        orchestrator.clone(),
        refunds.clone(),
        orders.clone(),
        orders.clone(),
        orders.clone(),
        orders.clone(),
        clock.clone(),
        reconciliation_settings(settings),
    )
    .with_meter(meter);
    let retries = SettlementRetries::new(
        orchestrator.clone(),
        orders.clone(),
        clock.clone(),
        SettlementRetrySettings {
            interval: settings.settlement.retry_interval,
            batch: settings.settlement.retry_batch,
        },
    );
    (Arc::new(recovery), Arc::new(retries))
}

/// The saga, with the provider's customers (Toss's checkout) and, on Toss, saved cards.
#[allow(clippy::too_many_arguments)]
pub(super) fn saga(
    settings: &Settings,
    orders: &Arc<SeaOrmStore>,
    payments: Arc<dyn PaymentGateway>,
    settlements: Arc<dyn SettlementGateway>,
    notifier: Arc<dyn Notifier>,
    capabilities: &Capabilities,
    clock: &Arc<dyn Clock>,
    meter: &crate::application::meter::Meter,
) -> Arc<Orchestrator> {
    let orchestrator = Orchestrator::new(
        orders.clone() as Arc<dyn OrderRepository>,
        orders.clone() as Arc<dyn SagaRuns>,
        orders.clone() as Arc<dyn UnitOfWork>,
        payments,
        settlements,
        notifier,
        clock.clone(),
        saga_settings(settings),
    )
    .with_meter(meter.clone())
    .with_provider_customers(capabilities.customers.clone())
    .with_card_key_in(capabilities.key_in.clone());
    // Only Toss charges registrations with a saved card; elsewhere no saga step reads them.
    Arc::new(if settings.payment.provider == ProviderKind::Toss {
        orchestrator.with_saved_cards(orders.clone() as Arc<dyn PaymentMethodRepository>)
    } else {
        orchestrator
    })
}

/// The meetings' fees from the platform's own database where `meetings.fee_source = sql`
/// (docs/spec.md §12); none where registrations carry their amount.
pub(super) async fn meeting_fees(settings: &Settings) -> Result<Option<Arc<dyn MeetingFees>>, StartupError> {
    Ok(match &settings.meetings.fee_source {
        FeeSource::Message => None,
        FeeSource::Sql { url, query } => {
            Some(Arc::new(SqlMeetingFees::new(url.expose(), query).await.map_err(|e| {
                StartupError::Config(format!(
                    "`meetings.fee_sql.url`: {}",
                    crate::application::error::Chain(&e)
                ))
            })?))
        }
    })
}

/// The meeting service's messages; registrations without an amount charged the meeting's fee
/// from `fees` (docs/spec.md §12).
pub(super) fn meeting_events(
    orchestrator: &Arc<Orchestrator>,
    refunds: &Arc<Refunds>,
    orders: &Arc<SeaOrmStore>,
    clock: &Arc<dyn Clock>,
    fees: Option<Arc<dyn MeetingFees>>,
    merchant: Option<MerchantId>,
) -> Arc<MeetingEvents> {
    let meeting_events = MeetingEvents::new(
        orchestrator.clone(),
        refunds.clone(),
        orders.clone(),
        orders.clone(),
        orders.clone(),
        clock.clone(),
    )
    .with_merchant(merchant);
    Arc::new(match fees {
        None => meeting_events,
        Some(fees) => meeting_events.with_fees(fees),
    })
}

/// The momo dialect's key-in: the meeting's fee from `fees`, charged where the provider
/// allows key-in (docs/dialects.md).
fn key_in(
    settings: &Settings,
    orchestrator: &Arc<Orchestrator>,
    orders: &Arc<SeaOrmStore>,
    fees: Option<Arc<dyn MeetingFees>>,
) -> Result<Arc<KeyIn>, StartupError> {
    let currency = settings
        .meetings
        .currency
        .parse()
        .map_err(|e| StartupError::Config(format!("`meetings.currency`: {e}")))?;
    Ok(Arc::new(KeyIn::new(orchestrator.clone(), orders.clone() as Arc<dyn MeetingPayments>, fees, currency)))
}

/// Readiness: the database, the broker and the worker's loops, with a warning for each
/// simulated part (logged once here).
pub(super) fn readiness(
    settings: &Settings,
    db: &DatabaseConnection,
    broker_probe: Arc<dyn HealthProbe>,
    loops: &Arc<LoopProgress>,
) -> Arc<Readiness> {
    let simulated = settings.simulated_parts();
    for warning in &simulated {
        tracing::warn!("{warning}");
    }
    Arc::new(
        Readiness::new(vec![Arc::new(DatabaseProbe(db.clone())), broker_probe, loops.clone()])
            .with_warnings(simulated),
    )
}

/// The database and the stores on it.
struct Stores {
    db: DatabaseConnection,
    /// Woken after each commit that appended outbox events.
    relay_wake: Arc<Notify>,
    orders: Arc<SeaOrmStore>,
    outbox: Arc<dyn OutboxStore>,
    idempotency: Arc<dyn IdempotencyStore>,
}

/// Connects (and migrates SQLite, or checks PostgreSQL's schema) and opens the stores.
async fn stores(settings: &Settings) -> Result<Stores, StartupError> {
    let db = database(settings).await?;
    let relay_wake = Arc::new(Notify::new());
    let orders = Arc::new(SeaOrmStore::new(db.clone(), relay_wake.clone()).with_lanes(settings.outbox.lanes));
    let outbox: Arc<dyn OutboxStore> = Arc::new(outbox_store(settings, &db, relay_wake.clone()).await?);
    let idempotency: Arc<dyn IdempotencyStore> = Arc::new(SeaOrmIdempotencyStore::new(db.clone()));
    Ok(Stores { db, relay_wake, orders, outbox, idempotency })
}

/// The payment provider and its capabilities, every call timed and counted whichever
/// provider it is.
fn measured_providers(
    settings: &Settings,
    calls: &Arc<ProviderCalls>,
    meter: &crate::application::meter::Meter,
) -> Result<(Arc<dyn PaymentGateway>, Capabilities), StartupError> {
    let (payments, capabilities) = providers(settings, calls)?;
    let provider = payment_provider(settings);
    let payments: Arc<dyn PaymentGateway> = Arc::new(Measured::new(payments, provider, meter.clone()));
    Ok((payments, capabilities.measured(provider, meter)))
}

/// The deployment's channels, with a merchant's own before them (docs/spec.md §15).
fn routed_channels(
    settings: &Settings,
    calls: &Arc<ProviderCalls>,
    meter: &crate::application::meter::Meter,
    merchants: &Arc<Merchants>,
) -> Result<Channels, StartupError> {
    let (settlements, notifier) = channels(settings, calls, meter)?;
    Ok((
        Arc::new(RoutedSettlements::new(settlements, merchants.clone())),
        Arc::new(RoutedNotifier::new(notifier, merchants.clone())),
    ))
}

/// The operator's reads and the upkeep of the stores: queries, the outbox's admin,
/// idempotency and housekeeping.
struct Bookkeeping {
    queries: Arc<OrderQueries>,
    outbox_admin: Arc<OutboxAdmin>,
    idempotency: Arc<IdempotencyService>,
    housekeeping: Arc<Housekeeping>,
}

fn bookkeeping(settings: &Settings, stores: &Stores, clock: &Arc<dyn Clock>) -> Bookkeeping {
    Bookkeeping {
        queries: Arc::new(OrderQueries::new(stores.orders.clone(), stores.outbox.clone())),
        outbox_admin: Arc::new(OutboxAdmin::new(stores.outbox.clone(), clock.clone())),
        idempotency: Arc::new(IdempotencyService::new(
            stores.idempotency.clone(),
            stores.orders.clone(),
            clock.clone(),
            chrono(settings.worker.saga_lease),
        )),
        housekeeping: Arc::new(Housekeeping::new(
            stores.outbox.clone(),
            stores.idempotency.clone(),
            stores.orders.clone(),
            clock.clone(),
            housekeeping_settings(settings),
        )),
    }
}

/// The keys bearer tokens are checked (and the CLI's signed) with, on `clock`.
fn jwt(settings: &Settings, clock: &Arc<dyn Clock>) -> Result<Arc<JwtKeys>, StartupError> {
    JwtKeys::from_settings_with_clock(&settings.auth, clock.clone())
        .map(Arc::new)
        .map_err(|e| StartupError::Config(e.to_string()))
}

/// [`build_services`] on `clock` (tests pass a `ManualClock` and drive time by hand).
///
/// # Errors
/// As [`build_services`].
pub async fn build_services_with_clock(
    settings: &Settings,
    clock: Arc<dyn Clock>,
) -> Result<Services, StartupError> {
    install_tls_provider();
    let jwt = jwt(settings, &clock)?;
    let stores = stores(settings).await?;
    let orders = &stores.orders;
    // What the simulated parts record: the mock provider and the simulated channels share it.
    let calls = Arc::new(ProviderCalls::default());
    let metrics = crate::telemetry::registry();
    let meter = metrics.meter.clone();
    let (payments, capabilities) = measured_providers(settings, &calls, &meter)?;
    let (publishers, broker_probe) = publishers(settings, &meter)?;
    let sealer = sealer(settings);
    let merchants = merchants(orders, &sealer, &clock);
    let (settlements, notifier) = routed_channels(settings, &calls, &meter, &merchants)?;
    let (shutdown, loops) =
        (CancellationToken::new(), Arc::new(LoopProgress::new(settings.worker.stuck_after)));
    upkeep_metrics(&metrics, shutdown.clone());
    let notifications = notification_retries(settings, orders, &notifier, &clock, &meter);
    let money = money(settings, orders, &payments, &capabilities, &clock);
    let orchestrator = saga(settings, orders, payments, settlements, notifier, &capabilities, &clock, &meter);
    let fees = meeting_fees(settings).await?;
    let key_in = key_in(settings, &orchestrator, orders, fees.clone())?;
    let owners = owners(settings, &merchants).await?;
    let webhooks = super::webhooks::webhooks(settings, orders, &sealer, &clock, &meter)?;
    let meeting_events = meeting_events(&orchestrator, &money.refunds, orders, &clock, fees, owners.meetings);
    let (recovery, settlements) = repairs(settings, &orchestrator, &money.refunds, orders, &clock, meter);
    let readiness = readiness(settings, &stores.db, broker_probe, &loops);
    let books = bookkeeping(settings, &stores, &clock);
    Ok(Services {
        db: stores.db,
        orchestrator,
        queries: books.queries,
        idempotency: books.idempotency,
        idempotency_store: stores.idempotency,
        readiness,
        outbox_store: stores.outbox,
        outbox_admin: books.outbox_admin,
        notifications,
        settlements,
        money,
        key_in,
        merchants,
        owners,
        webhooks,
        recovery,
        meeting_events,
        publishers,
        housekeeping: books.housekeeping,
        clock,
        jwt,
        provider_calls: Some(calls),
        relay_wake: stores.relay_wake,
        settings: settings.clone(),
        metrics,
        shutdown,
        loops,
    })
}

/// The merchants the doors' orders are: `meetings.merchant` and
/// `http.dialects.commerce.merchant`, found by code (`DEFAULT` needs no look-up).
async fn owners(settings: &Settings, merchants: &Merchants) -> Result<super::Owners, StartupError> {
    let commerce = settings.http.commerce.as_ref().map(|c| c.merchant.as_str());
    let wanted = [
        ("meetings.merchant", Some(settings.meetings.merchant.as_str())),
        ("http.dialects.commerce.merchant", commerce),
    ];
    if wanted.iter().all(|(_, code)| code.is_none_or(|c| c == DEFAULT_CODE)) {
        return Ok(super::Owners::default());
    }
    let known = merchants
        .list(&crate::application::Actor::system("startup"))
        .await
        .map_err(|e| StartupError::Config(format!("cannot read the merchants: {e}")))?;
    let find = |(key, code): (&str, Option<&str>)| -> Result<Option<MerchantId>, StartupError> {
        match code {
            None => Ok(None),
            Some(code) if code == DEFAULT_CODE => Ok(None),
            Some(code) => {
                known.iter().find(|m| m.code.as_str() == code).map(|m| Some(m.id)).ok_or_else(|| {
                    StartupError::Config(format!(
                        "`{key}`: no merchant has the code {code} (app merchant create)"
                    ))
                })
            }
        }
    };
    Ok(super::Owners { meetings: find(wanted[0])?, commerce: find(wanted[1])? })
}

/// Merchants, their people, keys and reports; their own channels sealed under
/// `secrets.key`.
fn merchants(
    orders: &Arc<SeaOrmStore>,
    sealer: &Arc<dyn SecretBox>,
    clock: &Arc<dyn Clock>,
) -> Arc<Merchants> {
    let vault = ChannelVault { store: orders.clone(), secrets: sealer.clone() };
    Arc::new(
        Merchants::new(orders.clone(), orders.clone(), orders.clone(), clock.clone()).with_channels(vault),
    )
}

/// What seals secrets at rest: `secrets.key` (and `secrets.previous_key`).
fn sealer(settings: &Settings) -> Arc<dyn SecretBox> {
    Arc::new(XChaChaBox::new(settings.secrets.key.as_ref(), settings.secrets.previous_key.as_ref()))
}
