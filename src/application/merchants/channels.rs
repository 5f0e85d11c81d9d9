//! A merchant's own settlement and notification channels (docs/spec.md §15): set by the
//! platform operator, sealed under `secrets.key` before they are stored, never returned
//! (the answer says which are set, not what they are), opened only to deliver; a rotation
//! seals every value still under the previous key again under the current one.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Merchants;
use crate::application::audit::{self, entity};
use crate::application::ports::{MerchantChannelStore, SealError, Sealed, SecretBox};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::MerchantId;
use crate::domain::merchant::{MerchantChannels, WebhookEndpoint};

/// No `secrets.key` to seal a merchant's secrets under.
pub const SECRETS_KEY_REQUIRED: &str = "SECRETS_KEY_REQUIRED";

/// The store and the box a merchant's channels go through.
pub struct ChannelVault {
    pub store: Arc<dyn MerchantChannelStore>,
    pub secrets: Arc<dyn SecretBox>,
}

/// What is sealed: the settings as one JSON value.
#[derive(Serialize, Deserialize)]
struct Stored {
    settlement: Option<Endpoint>,
    notification: Option<Endpoint>,
}

#[derive(Serialize, Deserialize)]
struct Endpoint {
    url: String,
    secret: String,
}

impl From<&WebhookEndpoint> for Endpoint {
    fn from(w: &WebhookEndpoint) -> Self {
        Endpoint { url: w.url.clone(), secret: w.secret.clone() }
    }
}

impl From<Endpoint> for WebhookEndpoint {
    fn from(e: Endpoint) -> Self {
        WebhookEndpoint { url: e.url, secret: e.secret }
    }
}

/// What the API says of a merchant's channels: which are its own — never what they are.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChannelsView {
    pub settlement_webhook: bool,
    pub notification_webhook: bool,
    /// The id of the key they are sealed under (not the key).
    pub key_id: Option<String>,
}

impl ChannelsView {
    fn of(channels: &MerchantChannels, key_id: Option<String>) -> Self {
        ChannelsView {
            settlement_webhook: channels.settlement_webhook.is_some(),
            notification_webhook: channels.notification_webhook.is_some(),
            key_id,
        }
    }
}

/// What a rotation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rotation {
    /// Sealed again under the current key.
    pub resealed: usize,
    /// Changed by someone else while the rotation ran (sealed under the current key then).
    pub changed_meanwhile: usize,
}

fn unsealable(err: SealError) -> AppError {
    match err {
        SealError::NoKey => AppError::Conflict {
            code: SECRETS_KEY_REQUIRED,
            message: "set secrets.key (32 random bytes, base64) before a merchant holds a secret".into(),
        },
        other => AppError::internal(other.to_string()),
    }
}

fn open(vault: &ChannelVault, sealed: &Sealed) -> Result<MerchantChannels, AppError> {
    let plain = vault.secrets.open(sealed).map_err(|e| AppError::internal(e.to_string()))?;
    let stored: Stored = serde_json::from_slice(&plain)
        .map_err(|e| AppError::internal(format!("a merchant's sealed channels do not read: {e}")))?;
    Ok(MerchantChannels {
        settlement_webhook: stored.settlement.map(Into::into),
        notification_webhook: stored.notification.map(Into::into),
    })
}

impl Merchants {
    /// Where the merchant's channels are kept.
    pub fn with_channels(mut self, vault: ChannelVault) -> Self {
        self.vault = Some(vault);
        self
    }

    fn vault(&self) -> Result<&ChannelVault, AppError> {
        self.vault.as_ref().ok_or_else(|| AppError::internal("no channel store is wired"))
    }

    /// Sets the merchant's own channels (platform operator); empty settings remove them.
    ///
    /// # Errors
    /// `Forbidden` for anyone else; `NotFound`; `Validation` naming the field; `Conflict`
    /// `SECRETS_KEY_REQUIRED` without `secrets.key`.
    pub async fn set_channels(
        &self,
        actor: &Actor,
        id: MerchantId,
        channels: MerchantChannels,
    ) -> Result<ChannelsView, AppError> {
        self.operated(actor, id).await?;
        channels.check()?;
        let vault = self.vault()?;
        let sealed = if channels.is_empty() {
            None
        } else {
            let stored = Stored {
                settlement: channels.settlement_webhook.as_ref().map(Endpoint::from),
                notification: channels.notification_webhook.as_ref().map(Endpoint::from),
            };
            let plain = serde_json::to_vec(&stored).map_err(|e| AppError::internal(e.to_string()))?;
            Some(vault.secrets.seal(&plain).map_err(unsealable)?)
        };
        let now = self.clock.now();
        let view = ChannelsView::of(&channels, sealed.as_ref().map(|s| s.key_id.clone()));
        let detail = format!(
            "settlement webhook {}, notification webhook {}",
            view.settlement_webhook, view.notification_webhook
        );
        let audit =
            audit::record(AuditAction::MerchantChannelsSet, entity::MERCHANT, id, actor, Some(detail), now);
        vault.store.set_channels(id, sealed, now, &audit).await?;
        Ok(view)
    }

    /// Which of the merchant's channels are its own (platform operator).
    ///
    /// # Errors
    /// `Forbidden` for anyone else; `NotFound`; `Internal` when they do not open.
    pub async fn channels(&self, actor: &Actor, id: MerchantId) -> Result<ChannelsView, AppError> {
        self.operated(actor, id).await?;
        let vault = self.vault()?;
        match vault.store.channels(id).await? {
            None => Ok(ChannelsView::default()),
            Some(sealed) => Ok(ChannelsView::of(&open(vault, &sealed)?, Some(sealed.key_id))),
        }
    }

    /// The merchant's own channels, opened to deliver through them (the saga's channels
    /// ask), with the sealed value's text as their version (a cache's key).
    ///
    /// # Errors
    /// `Unavailable` when the database fails; `Internal` when they do not open.
    pub async fn channels_of(&self, id: MerchantId) -> Result<Option<(String, MerchantChannels)>, AppError> {
        let Some(vault) = self.vault.as_ref() else { return Ok(None) };
        match vault.store.channels(id).await? {
            None => Ok(None),
            Some(sealed) => Ok(Some((sealed.data.clone(), open(vault, &sealed)?))),
        }
    }

    /// Seals every merchant's channels still under another key again under `secrets.key`
    /// (after `secrets.key` changed and the old one became `secrets.previous_key`).
    ///
    /// # Errors
    /// `Forbidden` for a non-operator; `Conflict` `SECRETS_KEY_REQUIRED`; `Internal` when a
    /// value opens under neither key.
    pub async fn rotate_secrets(&self, actor: &Actor) -> Result<Rotation, AppError> {
        actor.require_admin()?;
        let vault = self.vault()?;
        let current = vault.secrets.current_key().ok_or_else(|| unsealable(SealError::NoKey))?;
        let mut rotation = Rotation::default();
        for (merchant, sealed) in vault.store.sealed_under_other_keys(&current).await? {
            let plain = vault
                .secrets
                .open(&sealed)
                .map_err(|e| AppError::internal(format!("merchant {merchant}: {e}")))?;
            let again = vault.secrets.seal(&plain).map_err(unsealable)?;
            let detail = Some(format!("sealed again: key {} -> {current}", sealed.key_id));
            let now = self.clock.now();
            let audit = audit::record(
                AuditAction::MerchantChannelsResealed,
                entity::MERCHANT,
                merchant,
                actor,
                detail,
                now,
            );
            if vault.store.reseal(merchant, &sealed, &again, &audit).await? {
                rotation.resealed += 1;
            } else {
                rotation.changed_meanwhile += 1;
            }
        }
        tracing::info!(resealed = rotation.resealed, key = %current, "merchant secrets sealed under the current key");
        Ok(rotation)
    }
}
