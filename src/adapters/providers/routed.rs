//! A merchant's own channels in front of the deployment's (docs/spec.md §15): a settlement
//! or a notification of an order whose merchant set its own webhook goes there, signed with
//! its secret; anything else goes the deployment's way. The merchant's settings are read
//! (and opened) on each call — a change applies to the next delivery — and the HTTP client
//! built for them is kept while they stay the same.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// The webhook clients of merchants' own channels, kept per merchant while its sealed
/// settings (their version) stay the same.
struct Clients<T: ?Sized> {
    merchants: Arc<Merchants>,
    built: Mutex<HashMap<MerchantId, (String, Arc<T>)>>,
}

impl<T: ?Sized> Clients<T> {
    /// The merchant's own channel, built by `build` from the endpoint `pick` chooses; `None`
    /// when it set none.
    async fn of(
        &self,
        merchant: MerchantId,
        pick: fn(crate::domain::merchant::MerchantChannels) -> Option<WebhookEndpoint>,
        build: fn(WebhookClient) -> Arc<T>,
    ) -> Result<Option<Arc<T>>, SetupError> {
        let Some((version, channels)) =
            self.merchants.channels_of(merchant).await.map_err(|e| SetupError(Chain(&e).to_string()))?
        else {
            return Ok(None);
        };
        {
            let built = self.built.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((v, client)) = built.get(&merchant)
                && *v == version
            {
                return Ok(Some(client.clone()));
            }
        }
        let Some(endpoint) = pick(channels) else { return Ok(None) };
        let secret = WebhookSecret::parse(&endpoint.secret)?;
        let settings = WebhookSettings {
            url: Secret::new(endpoint.url),
            secrets: vec![secret],
            timeout: MERCHANT_WEBHOOK_TIMEOUT,
        };
        let client = build(WebhookClient::new(settings)?);
        self.built.lock().unwrap_or_else(|e| e.into_inner()).insert(merchant, (version, client.clone()));
        Ok(Some(client))
    }
}

/// Settlements through the merchant's own webhook, else the deployment's channel.
pub struct RoutedSettlements {
    default: Arc<dyn SettlementGateway>,
    clients: Clients<dyn SettlementGateway>,
}

impl RoutedSettlements {
    pub fn new(default: Arc<dyn SettlementGateway>, merchants: Arc<Merchants>) -> Self {
        RoutedSettlements { default, clients: Clients { merchants, built: Mutex::default() } }
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
        RoutedNotifier { default, clients: Clients { merchants, built: Mutex::default() } }
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
