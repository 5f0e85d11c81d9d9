//! Merchants' webhooks wired (docs/spec.md §16): the endpoints' use cases with the host
//! guard, the messages' log and replays, the fan-out, the delivery workers and the upkeep,
//! all on the one store, the one secret box and one sender (reqwest with our resolver).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::StartupError;
use crate::adapters::persistence::SeaOrmStore;
use crate::adapters::webhook_sender::{HttpWebhookSender, SystemLookup};
use crate::application::meter::Meter;
use crate::application::ports::{Clock, SecretBox, WebhookSender};
use crate::application::webhooks::{
    Budget, Deliveries, DeliverySettings, FanOut, WebhookEndpoints, WebhookMessages, WebhookSettings,
    WebhookUpkeep,
};
use crate::config::Settings;
use crate::domain::webhook::Schedule;

/// How often the fan-out reads the outbox.
const FANOUT_INTERVAL: Duration = Duration::from_millis(250);

/// Merchants' webhooks (docs/spec.md §16).
#[derive(Clone)]
pub struct Webhooks {
    /// The endpoints' use cases.
    pub endpoints: Arc<WebhookEndpoints>,
    /// Their messages' log and replays.
    pub messages: Arc<WebhookMessages>,
    /// The fan-out from the outbox to the endpoints' messages.
    pub fanout: Arc<FanOut>,
    /// The delivery workers.
    pub deliveries: Arc<Deliveries>,
    /// The oldest undelivered message's age and the retention.
    pub upkeep: Arc<WebhookUpkeep>,
}

pub(super) fn webhooks(
    settings: &Settings,
    store: &Arc<SeaOrmStore>,
    sealer: &Arc<dyn SecretBox>,
    clock: &Arc<dyn Clock>,
    meter: &Meter,
) -> Result<Webhooks, StartupError> {
    let w = &settings.webhooks;
    let sender: Arc<dyn WebhookSender> = Arc::new(
        HttpWebhookSender::new(w.timeout, w.allow_private_networks, Arc::new(SystemLookup))
            .map_err(|e| StartupError::Config(format!("the webhook client: {e}")))?,
    );
    let wake = Arc::new(Notify::new());
    let endpoints = WebhookEndpoints::new(
        store.clone(),
        sealer.clone(),
        clock.clone(),
        WebhookSettings { allow_http: w.allow_http, rotation_overlap: w.rotation_overlap },
    )
    .with_guard(sender.clone());
    let delivery = DeliverySettings {
        schedule: Schedule(w.schedule.clone()),
        timeout: w.timeout,
        max_in_flight: w.max_in_flight,
        disable_after: w.disable_after,
        workers: w.workers,
    };
    Ok(Webhooks {
        endpoints: Arc::new(endpoints),
        messages: Arc::new(WebhookMessages::new(store.clone(), store.clone(), clock.clone(), wake.clone())),
        fanout: Arc::new(
            FanOut::new(store.clone(), clock.clone(), meter.clone(), wake.clone(), FANOUT_INTERVAL)
                .with_budget(Arc::new(Budget::new(w.max_rate))),
        ),
        deliveries: Arc::new(
            Deliveries::new(
                store.clone(),
                sender,
                sealer.clone(),
                clock.clone(),
                meter.clone(),
                delivery,
                wake,
            )
            .with_budget(Arc::new(Budget::new(w.max_rate))),
        ),
        upkeep: Arc::new(WebhookUpkeep::new(store.clone(), clock.clone(), meter.clone(), w.retention)),
    })
}
