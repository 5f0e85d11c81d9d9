//! Merchants (docs/spec.md §15): the platform operator's management of merchants, their
//! stores, their people and their keys — each change audited with its actor and reason — and
//! who may act on a merchant ([`access`]). The order, refund and repair use cases serve a
//! merchant's path unchanged: [`Merchants::authorize`] hands them a caller scoped to that
//! merchant, and their own check ([`Actor::may_access`]) keeps every other merchant's order
//! out of reach.

mod access;
pub use access::Authorized;
pub mod channels;
pub mod keys;
pub mod report;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::application::audit::{self, entity};
use crate::application::ports::{Clock, MerchantAccessStore, MerchantDirectory, MerchantReports, RepoError};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{ApiKeyId, MerchantId, StoreId};
use crate::domain::merchant::{
    ApiKey, KeyRole, MemberRole, Membership, Merchant, MerchantError, Need, Store,
};

/// The one answer to every "no" under a merchant's path (not a member, no such merchant,
/// suspended, role too low), so a stranger learns nothing.
pub const FORBIDDEN: &str = "FORBIDDEN";
pub const DUPLICATE_MERCHANT_CODE: &str = "DUPLICATE_MERCHANT_CODE";
pub const DUPLICATE_STORE_CODE: &str = "DUPLICATE_STORE_CODE";
pub const INVALID_MERCHANT_STATE: &str = "INVALID_MERCHANT_STATE";

/// A merchant as asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMerchant {
    pub code: String,
    pub name: String,
    /// An IANA zone; `UTC` when unset.
    pub timezone: Option<String>,
}

/// A key as asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewKey {
    pub name: String,
    pub role: KeyRole,
    pub expires_at: Option<DateTime<Utc>>,
}

/// A key just made: its row, and the key itself — shown to its maker once, never stored.
pub struct CreatedKey {
    pub key: ApiKey,
    pub plain: String,
}

impl std::fmt::Debug for CreatedKey {
    /// The key itself never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedKey").field("key", &self.key).finish_non_exhaustive()
    }
}

pub struct Merchants {
    directory: Arc<dyn MerchantDirectory>,
    access: Arc<dyn MerchantAccessStore>,
    reports: Arc<dyn MerchantReports>,
    clock: Arc<dyn Clock>,
    /// Where merchants' own channels are kept (sealed); none wired, none served.
    vault: Option<channels::ChannelVault>,
}

impl From<MerchantError> for AppError {
    fn from(err: MerchantError) -> Self {
        match err {
            MerchantError::Invalid { field, message } => AppError::Validation { field, message },
            MerchantError::InvalidTransition { .. } => {
                AppError::Conflict { code: INVALID_MERCHANT_STATE, message: err.to_string() }
            }
        }
    }
}

/// `Conflict` `code` for a code another row holds; any other failure as it is.
fn duplicate(code: &'static str, what: &str) -> impl FnOnce(RepoError) -> AppError {
    let message = format!("another {what} has this code");
    move |err| match err {
        RepoError::Conflict => AppError::Conflict { code, message },
        err => err.into(),
    }
}

/// `timezone` if it is an IANA zone.
fn zone(timezone: Option<String>) -> Result<String, AppError> {
    let zone = timezone.unwrap_or_else(|| "UTC".into());
    zone.parse::<chrono_tz::Tz>()
        .map(|z| z.name().to_owned())
        .map_err(|_| AppError::validation("timezone", "must be an IANA time zone (Asia/Seoul)"))
}

impl Merchants {
    pub fn new(
        directory: Arc<dyn MerchantDirectory>,
        access: Arc<dyn MerchantAccessStore>,
        reports: Arc<dyn MerchantReports>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Merchants { directory, access, reports, clock, vault: None }
    }

    /// A new `ACTIVE` merchant (platform operator).
    ///
    /// # Errors
    /// `Forbidden` for anyone else; `Validation` naming the field; `Conflict`
    /// `DUPLICATE_MERCHANT_CODE`.
    pub async fn create(&self, actor: &Actor, new: NewMerchant) -> Result<Merchant, AppError> {
        actor.require_admin()?;
        let now = self.clock.now();
        let merchant = Merchant::create(MerchantId::new(), &new.code, &new.name, zone(new.timezone)?, now)?;
        let audit = audit::record(
            AuditAction::MerchantCreated,
            entity::MERCHANT,
            merchant.id,
            actor,
            Some(format!("code {}", merchant.code)),
            now,
        );
        self.directory
            .insert_merchant(&merchant, &audit)
            .await
            .map_err(duplicate(DUPLICATE_MERCHANT_CODE, "merchant"))?;
        Ok(merchant)
    }

    /// The merchants the caller may act on, by code: every one to the platform operator; a
    /// key's own; a person's memberships' — only `ACTIVE` ones (a suspended merchant refuses
    /// them); none to anyone else.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn list(&self, actor: &Actor) -> Result<Vec<Merchant>, AppError> {
        if actor.is_admin {
            return Ok(self.directory.merchants().await?);
        }
        let found = match actor.key {
            Some(grant) => self.directory.merchant(grant.merchant_id).await?.into_iter().collect(),
            None => self.directory.merchants_of(&actor.subject).await?,
        };
        Ok(found.into_iter().filter(Merchant::is_active).collect())
    }

    /// Suspends (`suspend`) or resumes the merchant (platform operator), audited with `reason`.
    ///
    /// # Errors
    /// `Forbidden` for anyone else; `NotFound`; `Conflict` `INVALID_MERCHANT_STATE` when it
    /// already is so; `CONCURRENT_MODIFICATION` when it changed meanwhile.
    pub async fn set_suspended(
        &self,
        actor: &Actor,
        id: MerchantId,
        suspend: bool,
        reason: Option<String>,
    ) -> Result<Merchant, AppError> {
        actor.require_admin()?;
        let reason = audit::reason(reason)?;
        let mut merchant = self.directory.merchant(id).await?.ok_or(AppError::NotFound("merchant"))?;
        let now = self.clock.now();
        let action = if suspend {
            merchant.suspend(now)?;
            AuditAction::MerchantSuspended
        } else {
            merchant.resume(now)?;
            AuditAction::MerchantResumed
        };
        let audit = audit::record(action, entity::MERCHANT, id, actor, reason, now);
        self.directory.update_merchant(&merchant, &audit).await?;
        merchant.version += 1;
        Ok(merchant)
    }

    /// A new store of the merchant (the platform operator or an `OPERATOR`).
    ///
    /// # Errors
    /// `Forbidden` unless let in to write; `Conflict` `INVALID_MERCHANT_STATE` unless the
    /// merchant is `ACTIVE`, `DUPLICATE_STORE_CODE`; `Validation` naming the field.
    pub async fn register_store(&self, auth: &Authorized, code: &str, name: &str) -> Result<Store, AppError> {
        auth.require(Need::Write)?;
        let now = self.clock.now();
        let merchant = &auth.merchant;
        let store = merchant.register_store(StoreId::new(), code, name, now)?;
        let audit = audit::record(
            AuditAction::StoreRegistered,
            entity::STORE,
            store.id,
            &auth.actor,
            Some(format!("merchant {} code {}", merchant.id, store.code)),
            now,
        );
        self.directory
            .insert_store(&store, &audit)
            .await
            .map_err(duplicate(DUPLICATE_STORE_CODE, "store"))?;
        Ok(store)
    }

    /// The merchant's stores, to anyone let in.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn stores(&self, auth: &Authorized) -> Result<Vec<Store>, AppError> {
        Ok(self.directory.stores(auth.merchant.id).await?)
    }

    /// One of the merchant's stores; another merchant's is `NotFound`.
    ///
    /// # Errors
    /// `NotFound`; `Unavailable` when the database fails.
    pub async fn store(&self, auth: &Authorized, store: StoreId) -> Result<Store, AppError> {
        self.directory.store(auth.merchant.id, store).await?.ok_or(AppError::NotFound("store"))
    }

    /// Gives `subject` `role` in the merchant, or changes its role (platform operator).
    ///
    /// # Errors
    /// `Forbidden` for anyone else; `NotFound`; `Validation` naming `subject`.
    pub async fn set_member(
        &self,
        actor: &Actor,
        id: MerchantId,
        subject: &str,
        role: MemberRole,
    ) -> Result<Membership, AppError> {
        self.operated(actor, id).await?;
        let now = self.clock.now();
        let member = Membership::new(id, subject, role, now)?;
        let audit = audit::record(
            AuditAction::MemberSet,
            entity::MEMBER,
            format!("{id}:{subject}"),
            actor,
            Some(format!("role {role}")),
            now,
        );
        self.access.set_member(&member, &audit).await?;
        Ok(member)
    }

    /// Removes `subject`'s membership (platform operator).
    ///
    /// # Errors
    /// `Forbidden` for anyone else; `NotFound` for the merchant or the membership.
    pub async fn remove_member(&self, actor: &Actor, id: MerchantId, subject: &str) -> Result<(), AppError> {
        self.operated(actor, id).await?;
        let now = self.clock.now();
        let audit = audit::record(
            AuditAction::MemberRemoved,
            entity::MEMBER,
            format!("{id}:{subject}"),
            actor,
            None,
            now,
        );
        if self.access.remove_member(id, subject, &audit).await? {
            Ok(())
        } else {
            Err(AppError::NotFound("member"))
        }
    }

    /// `subject`'s membership (platform operator); every member when `subject` is `None`.
    ///
    /// # Errors
    /// `Forbidden` for anyone else; `NotFound` for the merchant or the membership.
    pub async fn members(
        &self,
        actor: &Actor,
        id: MerchantId,
        subject: Option<&str>,
    ) -> Result<Vec<Membership>, AppError> {
        self.operated(actor, id).await?;
        match subject {
            None => Ok(self.access.members(id).await?),
            Some(subject) => {
                let member = self.access.member(id, subject).await?.ok_or(AppError::NotFound("member"))?;
                Ok(vec![member])
            }
        }
    }

    /// A new key of the merchant (platform operator): the key itself is in the answer and
    /// nowhere else.
    ///
    /// # Errors
    /// `Forbidden` for anyone else; `NotFound`; `Validation` naming the field; `Unavailable`
    /// when the operating system gives no randomness.
    pub async fn create_key(
        &self,
        actor: &Actor,
        id: MerchantId,
        new: NewKey,
    ) -> Result<CreatedKey, AppError> {
        self.operated(actor, id).await?;
        let now = self.clock.now();
        let issued =
            keys::issue().map_err(|e| AppError::unavailable(format!("no randomness for a key: {e}")))?;
        let key = ApiKey::create(
            ApiKeyId::new(),
            id,
            &new.name,
            new.role,
            issued.prefix.clone(),
            new.expires_at,
            now,
        )?;
        let audit = audit::record(
            AuditAction::ApiKeyCreated,
            entity::API_KEY,
            key.id,
            actor,
            Some(format!("merchant {id} role {} prefix {}", key.role, key.prefix)),
            now,
        );
        self.access.insert_key(&key, &issued.hash, &audit).await?;
        Ok(CreatedKey { key, plain: issued.plain })
    }

    /// The merchant's keys, never their secrets (platform operator).
    ///
    /// # Errors
    /// `Forbidden` for anyone else; `NotFound`.
    pub async fn keys(&self, actor: &Actor, id: MerchantId) -> Result<Vec<ApiKey>, AppError> {
        self.operated(actor, id).await?;
        Ok(self.access.keys(id, None).await?)
    }

    /// Revokes the key (platform operator): refused from its next request on.
    ///
    /// # Errors
    /// `Forbidden` for anyone else; `NotFound` for the merchant or a key not its.
    pub async fn revoke_key(
        &self,
        actor: &Actor,
        id: MerchantId,
        key_id: ApiKeyId,
        reason: Option<String>,
    ) -> Result<ApiKey, AppError> {
        self.operated(actor, id).await?;
        let reason = audit::reason(reason)?;
        let mut key = self
            .access
            .keys(id, Some(key_id))
            .await?
            .into_iter()
            .next()
            .ok_or(AppError::NotFound("api key"))?;
        let now = self.clock.now();
        key.revoke(now);
        let audit = audit::record(AuditAction::ApiKeyRevoked, entity::API_KEY, key.id, actor, reason, now);
        self.access.update_key(&key, None, &[audit]).await?;
        Ok(key)
    }

    /// The merchant, for a platform operator's change of its people or keys.
    async fn operated(&self, actor: &Actor, id: MerchantId) -> Result<Merchant, AppError> {
        actor.require_admin()?;
        self.directory.merchant(id).await?.ok_or(AppError::NotFound("merchant"))
    }
}
