//! The provider's ledger, reconciled daily (docs/spec.md §10): one day of the provider's
//! transactions (its zone's day, `D 00:00:00 – D 23:59:59`) matched with our payments and
//! refunds ([`crate::domain::ledger::reconcile`], page by page); the findings stored, each
//! audited when first found, and a clean day recorded as a clean run. Running a day again
//! replaces its findings. A row the provider sends that cannot be read is a finding of its
//! own (`UNREADABLE`); a provider that pages in a circle ends the run, nothing stored. The worker
//! runs the previous day once `payment.toss.ledger_at` has passed in the provider's zone;
//! `app reconcile ledger --date` runs any day by hand.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveTime, Utc};

use crate::application::audit::{self, entity};
use crate::application::ports::Cause;
use crate::application::ports::{
    AuditRecord, Clock, GatewayError, LedgerRun, LedgerStore, PaymentRepository, ProviderLedger,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ledger::{Finding, FindingKind, Seen, match_theirs, missing_at_provider};

/// Pages of one day read at most (5 000 rows each at Toss: five million transactions).
const MAX_PAGES: usize = 1000;

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
    /// The provider's ledger; `None` for a provider that keeps none (mock, external).
    provider: Option<Arc<dyn ProviderLedger>>,
    books: Arc<dyn PaymentRepository>,
    store: Arc<dyn LedgerStore>,
    clock: Arc<dyn Clock>,
    settings: LedgerSettings,
}

impl Ledger {
    pub fn new(
        provider: Option<Arc<dyn ProviderLedger>>,
        books: Arc<dyn PaymentRepository>,
        store: Arc<dyn LedgerStore>,
        clock: Arc<dyn Clock>,
        settings: LedgerSettings,
    ) -> Self {
        Ledger { provider, books, store, clock, settings }
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
        let Some(provider) = self.provider.as_ref() else {
            return Err(AppError::Conflict {
                code: "NOT_SUPPORTED",
                message: "this payment provider has no ledger to reconcile".into(),
            });
        };
        let started_at = self.clock.now();
        let (start, end) = self.bounds(day);
        // Page by page (docs/toss.md, "The ledger"): each page matched with the books it
        // names and let go; only what the provider listed is kept, for the last half.
        let mut seen = Seen::default();
        let mut findings = Vec::new();
        let mut transactions = 0i64;
        let mut cursors: HashSet<String> = HashSet::new();
        let mut after: Option<String> = None;
        let mut pages = 0usize;
        loop {
            if pages == MAX_PAGES {
                return Err(AppError::unavailable(format!(
                    "the provider's ledger of {day} has more than {MAX_PAGES} pages; nothing stored"
                )));
            }
            pages += 1;
            let page = match provider.ledger_page(day, after.clone()).await {
                Ok(page) => page,
                Err(GatewayError::Rejected { code, message }) => {
                    return Err(AppError::unavailable(format!(
                        "the payment provider refused to show its ledger: {code}: {message}"
                    )));
                }
                Err(
                    e @ (GatewayError::Unavailable(_)
                    | GatewayError::StaleBalance { .. }
                    | GatewayError::AlreadyCancelled { .. }),
                ) => {
                    return Err(AppError::Unavailable(Cause::context("payment provider's ledger", e)));
                }
            };
            transactions += (page.transactions.len() + page.unreadable.len()) as i64;
            findings.extend(page.unreadable.iter().map(Finding::unreadable));
            let fresh = seen.note(&page.transactions);
            let mut keys: Vec<String> = fresh.iter().map(|t| t.payment_key.clone()).collect();
            keys.sort();
            keys.dedup();
            if !keys.is_empty() {
                let books = self.books.books(None, &keys).await?;
                findings.extend(match_theirs(&fresh, &books));
            }
            match page.next {
                None => break,
                Some(next) if !cursors.insert(next.clone()) => {
                    // A provider that pages in a circle would be read for ever.
                    return Err(AppError::unavailable(format!(
                        "the provider's ledger of {day} repeats its cursor after {pages} pages; nothing stored"
                    )));
                }
                Some(next) => after = Some(next),
            }
        }
        let ours = self.books.books(Some((start, end)), &[]).await?;
        findings.extend(missing_at_provider(&ours, &seen, start, end));
        let earlier: HashSet<String> = match self.store.day(day).await? {
            Some((_, earlier)) => earlier.iter().map(Finding::identity).collect(),
            None => HashSet::new(),
        };
        let finished_at = self.clock.now();
        let run = LedgerRun { day, started_at, finished_at, transactions, findings: findings.len() as i64 };
        // Each finding is audited once, when first found: a rerun audits what is new.
        let new_findings: Vec<&Finding> =
            findings.iter().filter(|f| !earlier.contains(&f.identity())).collect();
        let mut audit: Vec<AuditRecord> = new_findings
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
            Some(format!(
                "{} transactions, {} findings ({} new)",
                run.transactions,
                run.findings,
                new_findings.len()
            )),
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
