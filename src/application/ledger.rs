//! The provider's ledger, reconciled daily (docs/spec.md §10): one day of the provider's
//! transactions (its zone's day, `D 00:00:00 – D 23:59:59`) matched with our payments and
//! refunds ([`crate::domain::ledger::reconcile`]); the findings stored, each audited, and a
//! clean day recorded as a clean run. Running a day again replaces its findings. The worker
//! runs the previous day once `payment.toss.ledger_at` has passed in the provider's zone;
//! `app reconcile ledger --date` runs any day by hand.

use std::sync::Arc;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveTime, Utc};

use crate::application::audit::{self, entity};
use crate::application::ports::Cause;
use crate::application::ports::{
    AuditRecord, Clock, GatewayError, LedgerRun, LedgerStore, PaymentGateway, PaymentRepository,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ledger::{Finding, FindingKind, reconcile};

/// When and in which zone the provider's day is reconciled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerSettings {
    /// The provider's zone (Toss: Asia/Seoul, UTC+09:00 without daylight saving).
    pub zone: FixedOffset,
    /// The time of day, in that zone, after which the previous day is reconciled.
    pub at: NaiveTime,
}

/// How a day's run went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerReport {
    pub run: LedgerRun,
    pub findings: Vec<Finding>,
}

pub struct Ledger {
    payments: Arc<dyn PaymentGateway>,
    books: Arc<dyn PaymentRepository>,
    store: Arc<dyn LedgerStore>,
    clock: Arc<dyn Clock>,
    settings: LedgerSettings,
}

impl Ledger {
    pub fn new(
        payments: Arc<dyn PaymentGateway>,
        books: Arc<dyn PaymentRepository>,
        store: Arc<dyn LedgerStore>,
        clock: Arc<dyn Clock>,
        settings: LedgerSettings,
    ) -> Self {
        Ledger { payments, books, store, clock, settings }
    }

    /// The instants of `day` in the provider's zone, first and last.
    fn bounds(&self, day: NaiveDate) -> (DateTime<Utc>, DateTime<Utc>) {
        // A fixed offset maps each local time to one instant: midnight there, as UTC.
        let offset = chrono::Duration::seconds(i64::from(self.settings.zone.local_minus_utc()));
        let start = (day.and_time(NaiveTime::MIN) - offset).and_utc();
        (start, start + chrono::Duration::days(1) - chrono::Duration::microseconds(1))
    }

    /// Reconciles `day`: the provider's ledger against our books; stores the run and its
    /// findings (replacing an earlier run of the day), each finding audited.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Conflict` `NOT_SUPPORTED` when the provider keeps no
    /// ledger (mock, external); `Unavailable` when the provider or the database fails
    /// (nothing is stored: the day's earlier run, if any, stands).
    pub async fn reconcile_day(&self, actor: &Actor, day: NaiveDate) -> Result<LedgerReport, AppError> {
        actor.require_admin()?;
        let started_at = self.clock.now();
        let theirs = match self.payments.ledger(day).await {
            Ok(entries) => entries,
            Err(GatewayError::Rejected { code, message }) => {
                return Err(AppError::Conflict {
                    code: "NOT_SUPPORTED",
                    message: format!("{code}: {message}"),
                });
            }
            Err(e @ (GatewayError::Unavailable(_) | GatewayError::StaleBalance { .. })) => {
                return Err(AppError::Unavailable(Cause::context("payment provider's ledger", e)));
            }
        };
        let (start, end) = self.bounds(day);
        let mut keys: Vec<String> = theirs.iter().map(|t| t.payment_key.clone()).collect();
        keys.sort();
        keys.dedup();
        let books = self.books.books(start, end, &keys).await?;
        let findings = reconcile(&theirs, &books, start, end);
        let finished_at = self.clock.now();
        let run = LedgerRun {
            day,
            started_at,
            finished_at,
            transactions: theirs.len() as i64,
            findings: findings.len() as i64,
        };
        let mut audit: Vec<AuditRecord> = findings
            .iter()
            .map(|f| {
                audit::record(
                    AuditAction::LedgerFinding,
                    entity::LEDGER,
                    day,
                    actor,
                    Some(format!(
                        "{}: payment {} transaction {} ours {} theirs {}: {}",
                        f.kind,
                        f.payment_key.as_deref().unwrap_or("-"),
                        f.transaction_key.as_deref().unwrap_or("-"),
                        f.ours.as_deref().unwrap_or("-"),
                        f.theirs.as_deref().unwrap_or("-"),
                        f.detail
                    )),
                    finished_at,
                )
            })
            .collect();
        audit.push(audit::record(
            AuditAction::LedgerReconciled,
            entity::LEDGER,
            day,
            actor,
            Some(format!("{} transactions, {} findings", run.transactions, run.findings)),
            finished_at,
        ));
        self.store.replace_day(run.clone(), findings.clone(), audit).await?;
        if findings.is_empty() {
            tracing::info!(%day, transactions = run.transactions, "ledger reconciled: clean");
        } else {
            tracing::warn!(%day, findings = findings.len(), "ledger reconciled: findings for an operator");
        }
        Ok(LedgerReport { run, findings })
    }

    /// The worker's round: once `ledger_at` has passed in the provider's zone, the previous
    /// day is reconciled if it has no run yet. `None` when nothing was due.
    ///
    /// # Errors
    /// As [`Ledger::reconcile_day`].
    pub async fn run_due(&self) -> Result<Option<LedgerReport>, AppError> {
        let now = self.clock.now().with_timezone(&self.settings.zone);
        if now.time() < self.settings.at {
            return Ok(None);
        }
        let Some(yesterday) = now.date_naive().pred_opt() else { return Ok(None) };
        if self.store.day(yesterday).await?.is_some() {
            return Ok(None);
        }
        self.reconcile_day(&Actor::system("ledger"), yesterday).await.map(Some)
    }

    /// The run of `day` and its findings; `None` if the day was never run.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Unavailable` when the database fails.
    pub async fn findings(
        &self,
        actor: &Actor,
        day: NaiveDate,
    ) -> Result<Option<(LedgerRun, Vec<Finding>)>, AppError> {
        actor.require_admin()?;
        Ok(self.store.day(day).await?)
    }

    /// The latest run's findings by kind, for `/metrics` (`ledger_findings{kind}`).
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn latest_counts(&self) -> Result<Vec<(FindingKind, i64)>, AppError> {
        Ok(self.store.latest_counts().await?)
    }
}
