//! Operator repairs of the outbox (docs/spec.md §5 admin): list, stats, republish, discard, and
//! bulk redrive of dead letters. Every action is audited with the acting subject and reason.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::application::audit::{self, entity};
use crate::application::input;
use crate::application::ports::{Clock, OutboxFilter, OutboxOperations, OutboxRecord, OutboxStats};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::outbox::{FailureCode, OutboxAction, OutboxStatus};
use crate::domain::text;

pub const MAX_REDRIVE: u32 = 1000;

/// A page of the outbox, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxPage {
    pub items: Vec<OutboxRecord>,
    /// Pass as `before_id` for the next page; `None` on the last.
    pub next_before_id: Option<i64>,
}

/// Which dead letters to redrive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redrive {
    pub event_type: Option<String>,
    pub failure_code: Option<FailureCode>,
    /// Only those dead-lettered before this instant.
    pub older_than: Option<DateTime<Utc>>,
    pub limit: u32,
    /// Report what would be redriven, change nothing.
    pub dry_run: bool,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedriveReport {
    pub matched: usize,
    pub redriven: usize,
    pub ids: Vec<i64>,
}

pub struct OutboxAdmin {
    store: Arc<dyn OutboxOperations>,
    clock: Arc<dyn Clock>,
}

impl OutboxAdmin {
    pub fn new(store: Arc<dyn OutboxOperations>, clock: Arc<dyn Clock>) -> Self {
        OutboxAdmin { store, clock }
    }

    /// One page of events, newest first: at most `filter.limit` rows and the cursor of the
    /// next page (the id to pass as `before_id`), if there is one.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Validation` for a limit outside 1..=100.
    pub async fn list(&self, actor: &Actor, mut filter: OutboxFilter) -> Result<OutboxPage, AppError> {
        actor.require_admin()?;
        if !(1..=100).contains(&filter.limit) {
            return Err(AppError::validation("limit", "must be between 1 and 100"));
        }
        let page = filter.limit as usize;
        // One row more than the page tells whether another page follows.
        filter.limit += 1;
        let mut items = self.store.list(&filter).await?;
        let next_before_id = if items.len() > page {
            items.truncate(page);
            items.last().map(|r| r.id)
        } else {
            None
        };
        Ok(OutboxPage { items, next_before_id })
    }

    /// # Errors
    /// `Forbidden` for a non-admin.
    pub async fn stats(&self, actor: &Actor) -> Result<OutboxStats, AppError> {
        actor.require_admin()?;
        Ok(self.store.stats().await?)
    }

    /// Counts for metrics (no caller: the metrics endpoint is not authenticated).
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn stats_for_metrics(&self) -> Result<OutboxStats, AppError> {
        Ok(self.store.stats().await?)
    }

    /// One outbox row.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `NotFound`; `Unavailable` when the database fails.
    pub async fn get(&self, actor: &Actor, id: i64) -> Result<OutboxRecord, AppError> {
        actor.require_admin()?;
        self.store.get(id).await?.ok_or(AppError::NotFound("outbox event"))
    }

    /// `DEAD_LETTER -> READY` (`republish`) or `-> DISCARDED` (`discard`), unblocking the
    /// aggregate's later events either way.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `NotFound`; `Conflict` (`OUTBOX_NOT_DEAD_LETTER`) when
    /// the row is not a dead letter.
    pub async fn resolve_dead_letter(
        &self,
        actor: &Actor,
        id: i64,
        discard: bool,
        reason: Option<String>,
    ) -> Result<OutboxRecord, AppError> {
        actor.require_admin()?;
        let reason = audit::reason(reason)?;
        let row = self.store.get(id).await?.ok_or(AppError::NotFound("outbox event"))?;
        let action = if discard { OutboxAction::Discard } else { OutboxAction::Republish };
        let not_dead = || AppError::Conflict {
            code: "OUTBOX_NOT_DEAD_LETTER",
            message: format!("outbox event {id} is {}, not DEAD_LETTER", row.status),
        };
        action.apply(row.status).map_err(|_| not_dead())?;
        let name = if discard { AuditAction::OutboxDiscard } else { AuditAction::OutboxRepublish };
        let now = self.clock.now();
        let record = audit::record(name, entity::OUTBOX_EVENT, id, actor, reason, now);
        let moved = self.store.resolve_dead_letters(&[id], discard, now, record).await?;
        if moved.is_empty() {
            return Err(not_dead());
        }
        self.store.get(id).await?.ok_or(AppError::NotFound("outbox event"))
    }

    /// Republishes a dead letter and waits, at most `within`, for a relay to send it (the
    /// commerce backend's admin retry publishes within the call, docs/dialects.md): the row
    /// as it stands then — `PUBLISHED` once a relay (this process's, or a worker's woken by
    /// the commit) sent it, still `READY` where none ran meanwhile.
    ///
    /// # Errors
    /// As [`Self::resolve_dead_letter`].
    pub async fn republish_within(
        &self,
        actor: &Actor,
        id: i64,
        reason: Option<String>,
        within: std::time::Duration,
    ) -> Result<OutboxRecord, AppError> {
        let mut row = self.resolve_dead_letter(actor, id, false, reason).await?;
        let deadline = tokio::time::Instant::now() + within;
        while matches!(row.status, OutboxStatus::Ready | OutboxStatus::Processing)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            row = self.get(actor, id).await?;
        }
        Ok(row)
    }

    /// Bulk republish of dead letters matching the filter.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Validation` for a limit outside 1..=1000 or text that
    /// breaks docs/spec.md §5's rules.
    pub async fn redrive(&self, actor: &Actor, request: Redrive) -> Result<RedriveReport, AppError> {
        actor.require_admin()?;
        if !(1..=MAX_REDRIVE).contains(&request.limit) {
            return Err(AppError::validation("limit", format!("must be between 1 and {MAX_REDRIVE}")));
        }
        input::check_optional("eventType", request.event_type.as_deref(), text::limits::EVENT_TYPE)?;
        input::check_optional("reason", request.reason.as_deref(), text::limits::REASON)?;
        let filter = OutboxFilter {
            status: Some(OutboxStatus::DeadLetter),
            event_type: request.event_type.clone(),
            failure_code: request.failure_code,
            dead_lettered_before: request.older_than,
            before_id: None,
            limit: request.limit,
        };
        let mut ids: Vec<i64> = self.store.list(&filter).await?.into_iter().map(|r| r.id).collect();
        ids.sort_unstable();
        let matched = ids.len();
        if request.dry_run || ids.is_empty() {
            return Ok(RedriveReport { matched, redriven: 0, ids });
        }
        let now = self.clock.now();
        let detail = request.reason.clone().or_else(|| Some("bulk redrive".into()));
        let record = audit::record(AuditAction::OutboxRedrive, entity::OUTBOX_EVENT, "", actor, detail, now);
        let moved = self.store.resolve_dead_letters(&ids, false, now, record).await?;
        Ok(RedriveReport { matched, redriven: moved.len(), ids: moved })
    }
}
