//! Who may act on a merchant (docs/spec.md §15), in the commerce backend's order: the caller
//! is authenticated first (a token, or a merchant API key read here), then authorized for
//! the merchant — every "no" the same `403` — and only then is a child resource looked up.

use super::{FORBIDDEN, Merchants, keys};
use crate::application::actor::{KeyGrant, MerchantPath};
use crate::application::error::Chain;
use crate::application::{Actor, AppError};
use crate::domain::ids::MerchantId;
use crate::domain::merchant::{Merchant, Need, default_merchant_id};

/// The one refusal: nothing in it says which check failed.
fn forbidden() -> AppError {
    AppError::Forbidden { code: FORBIDDEN, message: "not allowed for this merchant".into() }
}

/// Proof that a caller was let in under a merchant for a need: only
/// [`Merchants::authorize`] makes one, so a use case handed one need not ask again (one
/// look-up a request, not one per use case).
#[derive(Debug, Clone)]
pub struct Authorized {
    pub merchant: Merchant,
    /// The caller as the order use cases see it under this path: scoped to the merchant,
    /// with any-order access to it (the operator keeps its role).
    pub actor: Actor,
    need: Need,
}

impl Authorized {
    /// `Ok` when what it was let in for covers `need`: an `OPERATOR` (let in to write) may
    /// do everything, a placer also reads, anyone let in reads.
    ///
    /// # Errors
    /// `Forbidden` `FORBIDDEN` otherwise.
    pub fn require(&self, need: Need) -> Result<(), AppError> {
        let covered =
            self.actor.is_admin || self.need == need || self.need == Need::Write || need == Need::Read;
        if covered { Ok(()) } else { Err(forbidden()) }
    }
}

impl Merchants {
    /// The merchant, and the caller as the order use cases should see it under that
    /// merchant's path: scoped to it, with any-order access to it (the operator keeps its
    /// role, and reaches every merchant).
    ///
    /// # Errors
    /// `Forbidden` `FORBIDDEN`, the same for a caller who is not a member, a key of another
    /// merchant, a role too low, a suspended merchant and a merchant that does not exist;
    /// `NotFound` only for the platform operator asking for a merchant that does not exist.
    pub async fn authorize(&self, actor: &Actor, id: MerchantId, need: Need) -> Result<Authorized, AppError> {
        if actor.is_admin {
            let merchant = self.directory.merchant(id).await?.ok_or(AppError::NotFound("merchant"))?;
            return Ok(Authorized { merchant, actor: actor.clone().in_merchant(Some(id)), need });
        }
        // (may do what is asked, may repair)
        let (allowed, operator) = match actor.key {
            Some(grant) => {
                (grant.merchant_id == id && grant.role.allows(need), grant.role.allows(Need::Write))
            }
            None => match self.access.member(id, &actor.subject).await? {
                Some(member) => (member.role.allows(need), member.role.allows(Need::Write)),
                None => (false, false),
            },
        };
        if !allowed {
            return Err(forbidden());
        }
        let merchant =
            self.directory.merchant(id).await?.filter(Merchant::is_active).ok_or_else(forbidden)?;
        let mut scoped = Actor::any_order(actor.subject.clone()).with_email(actor.email.clone());
        scoped.key = actor.key;
        scoped.under = Some(MerchantPath { merchant: id, operator });
        Ok(Authorized { merchant, actor: scoped.in_merchant(Some(id)), need })
    }

    /// The caller a merchant API key stands for, if `token` is one that lets its bearer in:
    /// a key of this shape, whose prefix finds a row, whose secret matches that row's hash
    /// (compared in constant time), neither revoked nor expired. Its `lastUsedAt` is written
    /// at most once a minute; a failure to write it is logged, never the caller's.
    ///
    /// # Errors
    /// `Unavailable` when the database fails. Any key that does not let its bearer in is
    /// `Ok(None)` — the same for every reason.
    pub async fn authenticate_key(&self, token: &str) -> Result<Option<Actor>, AppError> {
        let Some(presented) = keys::presented(token) else { return Ok(None) };
        let Some((key, hash)) = self.access.key_by_prefix(presented.prefix).await? else { return Ok(None) };
        if !presented.matches(&hash) {
            return Ok(None);
        }
        let now = self.clock.now();
        if key.usable_at(now).is_err() {
            return Ok(None);
        }
        if key.use_is_worth_recording(now)
            && let Err(err) = self.access.update_key(&key, Some(now), &[]).await
        {
            tracing::warn!(key = %key.id, error = %Chain(&err), "a key's last use could not be recorded");
        }
        let mut actor = Actor::customer(format!("key:{}", key.id)).in_merchant(Some(key.merchant_id));
        actor.key = Some(KeyGrant { key_id: key.id, merchant_id: key.merchant_id, role: key.role });
        Ok(Some(actor))
    }

    /// A customer's token that names a merchant (its `merchant` claim) may act only in an
    /// `ACTIVE` merchant that exists; the `DEFAULT` merchant is always there.
    ///
    /// # Errors
    /// `Forbidden` `FORBIDDEN` otherwise (the same for both); `Unavailable`.
    pub async fn admit_customer(&self, actor: &Actor) -> Result<(), AppError> {
        match actor.merchant {
            None => Ok(()),
            Some(id) if id == default_merchant_id() => Ok(()),
            Some(id) => match self.directory.merchant(id).await? {
                Some(merchant) if merchant.is_active() => Ok(()),
                _ => Err(forbidden()),
            },
        }
    }
}
