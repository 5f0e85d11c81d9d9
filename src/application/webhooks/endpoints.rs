//! The endpoints' use cases: checked by the domain's rules, authorized by the merchant's,
//! audited with their actor.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;

use crate::application::AppError;
use crate::application::audit::{self, entity};
use crate::application::merchants::Authorized;
use crate::application::merchants::channels::SECRETS_KEY_REQUIRED;
use crate::application::ports::{
    Clock, EndpointSecrets, SealError, SecretBox, WebhookEndpointStore, WebhookSender,
};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{MerchantId, WebhookEndpointId};
use crate::domain::merchant::Need;
use crate::domain::text;
use crate::domain::webhook::{self, Endpoint, EventFilter, MAX_DESCRIPTION, WebhookError};

/// `webhooks.*` as the endpoints' rules read them.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// `http://` endpoints allowed (development).
    pub allow_http: bool,
    /// How long a rotated secret keeps signing beside the new one.
    pub rotation_overlap: Duration,
}

/// An endpoint as asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEndpoint {
    pub url: String,
    pub description: Option<String>,
    pub event_types: Vec<String>,
}

/// Random bytes of a secret: within the specification's 24 to 64.
const SECRET_BYTES: usize = 32;

impl From<WebhookError> for AppError {
    fn from(err: WebhookError) -> Self {
        match err {
            WebhookError::Invalid { field, message } => AppError::Validation { field, message },
        }
    }
}

fn sealing(err: SealError) -> AppError {
    match err {
        SealError::NoKey => AppError::Conflict {
            code: SECRETS_KEY_REQUIRED,
            message: "set secrets.key (32 random bytes, base64) before an endpoint holds a secret".into(),
        },
        other => AppError::internal(other.to_string()),
    }
}

pub struct WebhookEndpoints {
    store: Arc<dyn WebhookEndpointStore>,
    secrets: Arc<dyn SecretBox>,
    clock: Arc<dyn Clock>,
    settings: WebhookSettings,
    /// Where an endpoint's host resolves, checked when it is made or moved.
    guard: Option<Arc<dyn WebhookSender>>,
}

impl WebhookEndpoints {
    pub fn new(
        store: Arc<dyn WebhookEndpointStore>,
        secrets: Arc<dyn SecretBox>,
        clock: Arc<dyn Clock>,
        settings: WebhookSettings,
    ) -> Self {
        WebhookEndpoints { store, secrets, clock, settings, guard: None }
    }

    /// Refuses URLs whose host `guard` would not deliver to.
    #[must_use]
    pub fn with_guard(mut self, guard: Arc<dyn WebhookSender>) -> Self {
        self.guard = Some(guard);
        self
    }

    /// The URL's rules, then where its host resolves now.
    async fn check_url(&self, url: &str) -> Result<(), AppError> {
        webhook::check_url(url, self.settings.allow_http)?;
        if let Some(guard) = &self.guard {
            guard
                .check_host(url)
                .await
                .map_err(|why| AppError::Validation { field: "url".into(), message: why.0 })?;
        }
        Ok(())
    }

    /// A fresh `whsec_` secret, sealed, and the plain one.
    fn fresh_secret(&self) -> Result<(String, crate::application::ports::Sealed), AppError> {
        let mut bytes = [0u8; SECRET_BYTES];
        getrandom::fill(&mut bytes)
            .map_err(|e| AppError::unavailable(format!("no randomness for a secret: {e}")))?;
        let plain = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(bytes));
        let sealed = self.secrets.seal(plain.as_bytes()).map_err(sealing)?;
        Ok((plain, sealed))
    }

    fn description(raw: Option<String>) -> Result<String, AppError> {
        let description = raw.unwrap_or_default();
        text::check("description", &description, MAX_DESCRIPTION)?;
        Ok(description)
    }

    /// A new endpoint of the merchant (an `OPERATOR`), and its secret — shown to its maker.
    ///
    /// # Errors
    /// `Forbidden` unless let in to write; `Validation` naming the field; `Conflict`
    /// `SECRETS_KEY_REQUIRED` without `secrets.key`.
    pub async fn create(&self, auth: &Authorized, new: NewEndpoint) -> Result<(Endpoint, String), AppError> {
        auth.require(Need::Write)?;
        let merchant = auth.merchant.id;
        self.check_url(&new.url).await?;
        let filter = EventFilter::parse(&new.event_types, webhook::known_event_type)?;
        let now = self.clock.now();
        let endpoint = Endpoint {
            id: WebhookEndpointId::new(),
            merchant_id: merchant,
            url: new.url,
            description: Self::description(new.description)?,
            filter,
            disabled: None,
            created_at: now,
            last_success_at: None,
            failing_since: None,
        };
        let (plain, sealed) = self.fresh_secret()?;
        let audit = audit::record(
            AuditAction::WebhookEndpointCreated,
            entity::WEBHOOK_ENDPOINT,
            endpoint.id,
            &auth.actor,
            Some(format!("merchant {merchant}, events {}", endpoint.filter.names().join(","))),
            now,
        );
        self.store
            .insert_endpoint(&endpoint, &EndpointSecrets { current: sealed, previous: None }, &audit)
            .await?;
        Ok((endpoint, plain))
    }

    /// The merchant's endpoints (anyone who may read the merchant).
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn list(&self, auth: &Authorized) -> Result<Vec<Endpoint>, AppError> {
        auth.require(Need::Read)?;
        let merchant = auth.merchant.id;
        Ok(self.store.endpoints(merchant).await?)
    }

    /// One of the merchant's endpoints; another merchant's is `NotFound`.
    ///
    /// # Errors
    /// `NotFound`.
    pub async fn get(&self, auth: &Authorized, id: WebhookEndpointId) -> Result<Endpoint, AppError> {
        auth.require(Need::Read)?;
        let merchant = auth.merchant.id;
        Ok(self.found(merchant, id).await?.0)
    }

    async fn found(
        &self,
        merchant: MerchantId,
        id: WebhookEndpointId,
    ) -> Result<(Endpoint, EndpointSecrets), AppError> {
        self.store.endpoint(merchant, id).await?.ok_or(AppError::NotFound("webhook endpoint"))
    }

    /// Changes an endpoint's URL, description or events (an `OPERATOR`); what is `None`
    /// stays.
    ///
    /// # Errors
    /// As [`Self::create`], then `NotFound`.
    pub async fn update(
        &self,
        auth: &Authorized,
        id: WebhookEndpointId,
        url: Option<String>,
        description: Option<String>,
        event_types: Option<Vec<String>>,
    ) -> Result<Endpoint, AppError> {
        auth.require(Need::Write)?;
        let merchant = auth.merchant.id;
        let (mut endpoint, _) = self.found(merchant, id).await?;
        if let Some(url) = url {
            self.check_url(&url).await?;
            endpoint.url = url;
        }
        if let Some(description) = description {
            endpoint.description = Self::description(Some(description))?;
        }
        if let Some(types) = event_types {
            endpoint.filter = EventFilter::parse(&types, webhook::known_event_type)?;
        }
        let now = self.clock.now();
        let audit = audit::record(
            AuditAction::WebhookEndpointUpdated,
            entity::WEBHOOK_ENDPOINT,
            id,
            &auth.actor,
            None,
            now,
        );
        self.store.update_endpoint(&endpoint, Some(audit)).await?;
        Ok(endpoint)
    }

    /// Turns a disabled endpoint back on (an `OPERATOR`).
    ///
    /// # Errors
    /// As [`Self::update`].
    pub async fn enable(&self, auth: &Authorized, id: WebhookEndpointId) -> Result<Endpoint, AppError> {
        auth.require(Need::Write)?;
        let merchant = auth.merchant.id;
        let (mut endpoint, _) = self.found(merchant, id).await?;
        let was = endpoint.disabled;
        endpoint.enable();
        let now = self.clock.now();
        let detail = was.map(|r| format!("was disabled: {r}"));
        let audit = audit::record(
            AuditAction::WebhookEndpointEnabled,
            entity::WEBHOOK_ENDPOINT,
            id,
            &auth.actor,
            detail,
            now,
        );
        self.store.enable_endpoint(id, audit).await?;
        Ok(endpoint)
    }

    /// Deletes an endpoint and its messages (an `OPERATOR`).
    ///
    /// # Errors
    /// As [`Self::update`].
    pub async fn delete(&self, auth: &Authorized, id: WebhookEndpointId) -> Result<(), AppError> {
        auth.require(Need::Write)?;
        let merchant = auth.merchant.id;
        let now = self.clock.now();
        let audit = audit::record(
            AuditAction::WebhookEndpointDeleted,
            entity::WEBHOOK_ENDPOINT,
            id,
            &auth.actor,
            None,
            now,
        );
        if self.store.delete_endpoint(merchant, id, &audit).await? {
            Ok(())
        } else {
            Err(AppError::NotFound("webhook endpoint"))
        }
    }

    /// The endpoint's current secret (an `OPERATOR`).
    ///
    /// # Errors
    /// As [`Self::update`]; `Internal` when it does not open.
    pub async fn secret(&self, auth: &Authorized, id: WebhookEndpointId) -> Result<String, AppError> {
        auth.require(Need::Write)?;
        let merchant = auth.merchant.id;
        let (_, secrets) = self.found(merchant, id).await?;
        let plain = self.secrets.open(&secrets.current).map_err(|e| AppError::internal(e.to_string()))?;
        String::from_utf8(plain).map_err(|_| AppError::internal("a sealed secret is not text"))
    }

    /// A new secret (an `OPERATOR`); the current one keeps signing beside it for
    /// `webhooks.rotation_overlap`. The new one is in the answer.
    ///
    /// # Errors
    /// As [`Self::create`], then `NotFound`.
    pub async fn rotate_secret(&self, auth: &Authorized, id: WebhookEndpointId) -> Result<String, AppError> {
        auth.require(Need::Write)?;
        let merchant = auth.merchant.id;
        let (_, secrets) = self.found(merchant, id).await?;
        let (plain, sealed) = self.fresh_secret()?;
        let now = self.clock.now();
        let overlap =
            chrono::Duration::from_std(self.settings.rotation_overlap).unwrap_or(chrono::Duration::days(1));
        let rotated = EndpointSecrets { current: sealed, previous: Some((secrets.current, now + overlap)) };
        let detail = Some(format!("the previous secret signs until {}", now + overlap));
        let audit = audit::record(
            AuditAction::WebhookSecretRotated,
            entity::WEBHOOK_ENDPOINT,
            id,
            &auth.actor,
            detail,
            now,
        );
        self.store.set_secrets(id, &rotated, &audit).await?;
        Ok(plain)
    }
}
