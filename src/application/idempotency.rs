//! Idempotency keys (docs/spec.md §5): the same key with the same request replays the first
//! response; with a different request it is refused; while the first runs, it conflicts.
//!
//! Keys are scoped to the caller. A reservation carries the order id it will create, so a
//! retry after a crash (lease expired) resumes that same order instead of charging twice.

use std::sync::Arc;

use chrono::Duration;

use crate::application::audit::{self, entity};
use crate::application::ports::{
    Changes, Clock, IdempotencyBegin, IdempotencyStore, StoredResponse, UnitOfWork,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;

pub const MAX_KEY_LEN: usize = 255;

pub struct IdempotencyService {
    store: Arc<dyn IdempotencyStore>,
    uow: Arc<dyn UnitOfWork>,
    clock: Arc<dyn Clock>,
    /// How long a reservation holds before a retry may take it over.
    lease: Duration,
}

impl IdempotencyService {
    pub fn new(
        store: Arc<dyn IdempotencyStore>,
        uow: Arc<dyn UnitOfWork>,
        clock: Arc<dyn Clock>,
        lease: Duration,
    ) -> Self {
        IdempotencyService { store, uow, clock, lease }
    }

    /// Checks a client-supplied key.
    ///
    /// # Errors
    /// `Validation` on field `Idempotency-Key` when empty, too long or not visible ASCII.
    pub fn validate_key(key: &str) -> Result<(), AppError> {
        if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(AppError::validation(
                "Idempotency-Key",
                format!("must be 1 to {MAX_KEY_LEN} visible ASCII characters"),
            ));
        }
        Ok(())
    }

    /// Reserves the key for this request, or says why not.
    ///
    /// # Errors
    /// `Validation` for a malformed key; `Unavailable` when the database fails.
    pub async fn begin(
        &self,
        actor: &Actor,
        key: &str,
        fingerprint: &str,
    ) -> Result<IdempotencyBegin, AppError> {
        Self::validate_key(key)?;
        let now = self.clock.now();
        let begin =
            self.store.begin(&actor.subject, key, fingerprint, OrderId::new(), now, now + self.lease).await?;
        let action = match &begin {
            IdempotencyBegin::Completed(_) => Some(AuditAction::Replay),
            IdempotencyBegin::Mismatch => Some(AuditAction::IdempotencyKeyReused),
            _ => None,
        };
        if let Some(action) = action {
            let mut changes = Changes::default();
            changes.audit.push(audit::record(action, entity::IDEMPOTENCY_KEY, key, actor, None, now));
            self.uow.commit(changes).await?;
        }
        Ok(begin)
    }

    /// Stores the response to replay.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn complete(
        &self,
        actor: &Actor,
        key: &str,
        response: &StoredResponse,
    ) -> Result<(), AppError> {
        Ok(self.store.complete(&actor.subject, key, response, self.clock.now()).await?)
    }

    /// Gives the key up: `forget` when nothing was created (a later request may use it
    /// afresh), otherwise only the lease ends so a retry resumes the same order.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn release(&self, actor: &Actor, key: &str, forget: bool) -> Result<(), AppError> {
        Ok(self.store.release(&actor.subject, key, forget).await?)
    }
}
