//! A merchant's own channels in front of the deployment's (docs/spec.md §15): a settlement
//! or a notification of an order whose merchant set its own webhook goes there, signed with
//! its secret; anything else goes the deployment's way. The merchant's settings are read
//! (and opened) at most once every few seconds — a change applies within them — and the
//! HTTP client built for them is kept while they stay the same.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::SetupError;
use super::webhook::{WebhookClient, WebhookNotifier, WebhookSecret, WebhookSettings, WebhookSettlements};
use crate::adapters::Secret;
use crate::application::error::Chain;
use crate::application::merchants::Merchants;
use crate::application::ports::{
    GatewayError, NotificationRequest, Notifier, NotifyFailure, SettlementGateway, SettlementOutcome,
    SettlementRequest,
};
use crate::domain::ids::MerchantId;
use crate::domain::merchant::WebhookEndpoint;
use crate::domain::notification::FailurePolicy;

/// How long a merchant's webhook may take to answer.
pub const MERCHANT_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long what a merchant's channels were read as is used before they are read again.
pub const CHANNELS_FRESH_FOR: Duration = Duration::from_secs(5);

/// What a merchant's channel was read as: when, its sealed settings' version, and the
/// client built for them (`None`: it has no such channel of its own).
struct Known<T: ?Sized> {
    read_at: Instant,
    version: Option<String>,
    client: Option<Arc<T>>,
}

/// The webhook clients of merchants' own channels, per merchant. Each is read at most once
/// every [`CHANNELS_FRESH_FOR`] (a delivery is not a database read), its client kept while
/// its settings stay the same, and what was last read is used while the database cannot
/// be: a database outage never turns into a failed delivery.
struct Clients<T: ?Sized> {
    merchants: Arc<Merchants>,
    known: Mutex<HashMap<MerchantId, Known<T>>>,
}

impl<T: ?Sized> Clients<T> {
    fn new(merchants: Arc<Merchants>) -> Self {
        Clients { merchants, known: Mutex::default() }
    }

    /// The merchant's own channel, built by `build` from the endpoint `pick` chooses; `None`
    /// when it set none.
    async fn of(
        &self,
        merchant: MerchantId,
        pick: fn(crate::domain::merchant::MerchantChannels) -> Option<WebhookEndpoint>,
        build: fn(WebhookClient) -> Arc<T>,
    ) -> Result<Option<Arc<T>>, SetupError> {
        let last = {
            let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            known
                .get(&merchant)
                .map(|k| (k.read_at.elapsed() < CHANNELS_FRESH_FOR, k.version.clone(), k.client.clone()))
        };
        if let Some((true, _, client)) = &last {
            return Ok(client.clone());
        }
        let read = match self.merchants.channels_of(merchant).await {
            Ok(read) => read,
            Err(e) => match last {
                Some((_, _, client)) => {
                    tracing::warn!(%merchant, error = %Chain(&e), "a merchant's channels could not be read: the last read stands");
                    return Ok(client);
                }
                None => return Err(SetupError(Chain(&e).to_string())),
            },
        };
        let version = read.as_ref().map(|(v, _)| v.clone());
        let client = match (read, last) {
            (None, _) => None,
            // The same settings: the client already built.
            (Some((v, _)), Some((_, Some(was), client))) if v == was => client,
            (Some((_, channels)), _) => match pick(channels) {
                None => None,
                Some(endpoint) => {
                    let settings = WebhookSettings {
                        url: Secret::new(endpoint.url),
                        secrets: vec![WebhookSecret::parse(&endpoint.secret)?],
                        timeout: MERCHANT_WEBHOOK_TIMEOUT,
                    };
                    Some(build(WebhookClient::new(settings)?))
                }
            },
        };
        let known = Known { read_at: Instant::now(), version, client: client.clone() };
        self.known.lock().unwrap_or_else(|e| e.into_inner()).insert(merchant, known);
        Ok(client)
    }
}

/// Settlements through the merchant's own webhook, else the deployment's channel.
pub struct RoutedSettlements {
    default: Arc<dyn SettlementGateway>,
    clients: Clients<dyn SettlementGateway>,
}

impl RoutedSettlements {
    pub fn new(default: Arc<dyn SettlementGateway>, merchants: Arc<Merchants>) -> Self {
        RoutedSettlements { default, clients: Clients::new(merchants) }
    }
}

#[async_trait]
impl SettlementGateway for RoutedSettlements {
    async fn settle(&self, request: &SettlementRequest) -> Result<SettlementOutcome, GatewayError> {
        let own = self
            .clients
            .of(request.merchant_id, |c| c.settlement_webhook, |c| Arc::new(WebhookSettlements::new(c)))
            .await
            .map_err(|e| GatewayError::unavailable(format!("the merchant's settlement channel: {e}")))?;
        match own {
            Some(gateway) => gateway.settle(request).await,
            None => self.default.settle(request).await,
        }
    }
}

/// Notifications through the merchant's own webhook, else the deployment's channel.
pub struct RoutedNotifier {
    default: Arc<dyn Notifier>,
    clients: Clients<dyn Notifier>,
}

impl RoutedNotifier {
    pub fn new(default: Arc<dyn Notifier>, merchants: Arc<Merchants>) -> Self {
        RoutedNotifier { default, clients: Clients::new(merchants) }
    }
}

#[async_trait]
impl Notifier for RoutedNotifier {
    async fn send(&self, request: &NotificationRequest) -> Result<(), NotifyFailure> {
        let own = self
            .clients
            .of(request.merchant_id, |c| c.notification_webhook, |c| Arc::new(WebhookNotifier::new(c)))
            .await
            .map_err(|e| NotifyFailure {
                policy: FailurePolicy::AutoRetry,
                reason: format!("the merchant's notification channel: {e}"),
                retry_after: None,
            })?;
        match own {
            Some(notifier) => notifier.send(request).await,
            None => self.default.send(request).await,
        }
    }
}
