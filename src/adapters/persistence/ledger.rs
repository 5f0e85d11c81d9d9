//! The provider's ledger reconciled: one run per day and its findings (`ledger_runs`,
//! `ledger_findings`) and the payouts of the transactions sold that day (`payouts`),
//! replaced whole when a day is run again.

use async_trait::async_trait;
use chrono::NaiveDate;
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, TransactionTrait};

use super::audit::insert_audit;
use super::entities::{ledger_findings, ledger_runs, payouts};
use super::store::SeaOrmStore;
use super::{is_postgres, repo_err};
use crate::application::ports::{AuditRecord, LedgerRun, LedgerStore, PayoutStore, RepoError};
use crate::domain::ids::PaymentId;
use crate::domain::ledger::{Finding, FindingKind};
use crate::domain::payout::Payout;

const DAY: &str = "%Y-%m-%d";

fn day_of(text: &str) -> Result<NaiveDate, RepoError> {
    NaiveDate::parse_from_str(text, DAY).map_err(|_| RepoError::corrupt(format!("ledger day = {text:?}")))
}

fn run_from_row(row: ledger_runs::Model) -> Result<LedgerRun, RepoError> {
    Ok(LedgerRun {
        day: day_of(&row.day)?,
        started_at: row.started_at,
        finished_at: row.finished_at,
        transactions: row.transactions,
        findings: row.findings,
    })
}

fn finding_from_row(row: ledger_findings::Model) -> Result<Finding, RepoError> {
    Ok(Finding {
        kind: FindingKind::parse(&row.kind)
            .ok_or_else(|| RepoError::corrupt(format!("ledger_findings.kind = {:?}", row.kind)))?,
        payment_key: row.payment_key,
        order_id: row.order_id,
        transaction_key: row.transaction_key,
        ours: row.ours,
        theirs: row.theirs,
        detail: row.detail,
    })
}

fn payout_row(p: &Payout) -> payouts::ActiveModel {
    payouts::ActiveModel {
        source: Set(p.source.clone()),
        payment_id: Set(p.payment_id.as_uuid()),
        transaction_key: Set(p.transaction_key.clone()),
        amount: Set(p.amount),
        fee: Set(p.fee),
        supply_amount: Set(p.supply_amount),
        vat: Set(p.vat),
        pay_out_amount: Set(p.pay_out_amount),
        sold_date: Set(p.sold_date.format(DAY).to_string()),
        paid_out_date: Set(p.paid_out_date.format(DAY).to_string()),
    }
}

fn payout_from_row(row: payouts::Model) -> Result<Payout, RepoError> {
    Ok(Payout {
        source: row.source,
        payment_id: PaymentId::from_uuid(row.payment_id),
        transaction_key: row.transaction_key,
        amount: row.amount,
        fee: row.fee,
        supply_amount: row.supply_amount,
        vat: row.vat,
        pay_out_amount: row.pay_out_amount,
        sold_date: day_of(&row.sold_date)?,
        paid_out_date: day_of(&row.paid_out_date)?,
    })
}

impl SeaOrmStore {
    /// The payouts `filter` selects, oldest sold first.
    async fn payouts_where(
        &self,
        filter: impl sea_orm::sea_query::IntoCondition,
    ) -> Result<Vec<Payout>, RepoError> {
        payouts::Entity::find()
            .filter(filter)
            .order_by_asc(payouts::Column::SoldDate)
            .order_by_asc(payouts::Column::Source)
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(payout_from_row)
            .collect()
    }
}

#[async_trait]
impl PayoutStore for SeaOrmStore {
    async fn payouts_of(&self, payments: &[PaymentId]) -> Result<Vec<Payout>, RepoError> {
        if payments.is_empty() {
            return Ok(Vec::new());
        }
        self.payouts_where(payouts::Column::PaymentId.is_in(payments.iter().map(|p| p.as_uuid()))).await
    }

    async fn paid_out_on(&self, day: NaiveDate) -> Result<Vec<Payout>, RepoError> {
        self.payouts_where(payouts::Column::PaidOutDate.eq(day.format(DAY).to_string())).await
    }
}

#[async_trait]
impl LedgerStore for SeaOrmStore {
    async fn replace_day(
        &self,
        run: LedgerRun,
        findings: Vec<Finding>,
        payouts: Vec<Payout>,
        audit: Vec<AuditRecord>,
    ) -> Result<(), RepoError> {
        let day = run.day.format(DAY).to_string();
        let txn = self.db.begin().await.map_err(repo_err)?;
        if is_postgres(&self.db) {
            // Two runs of one day at once (two workers, a worker and an operator) take turns.
            txn.execute_unprepared(&format!("SELECT pg_advisory_xact_lock(hashtext('ledger:{day}'))"))
                .await
                .map_err(repo_err)?;
        }
        ledger_findings::Entity::delete_many()
            .filter(ledger_findings::Column::Day.eq(day.as_str()))
            .exec(&txn)
            .await
            .map_err(repo_err)?;
        ledger_runs::Entity::delete_by_id(day.clone()).exec(&txn).await.map_err(repo_err)?;
        ledger_runs::Entity::insert(ledger_runs::ActiveModel {
            day: Set(day.clone()),
            started_at: Set(run.started_at),
            finished_at: Set(run.finished_at),
            transactions: Set(run.transactions),
            findings: Set(run.findings),
        })
        .exec_without_returning(&txn)
        .await
        .map_err(repo_err)?;
        for chunk in findings.chunks(500) {
            ledger_findings::Entity::insert_many(chunk.iter().map(|f| ledger_findings::ActiveModel {
                id: NotSet,
                day: Set(day.clone()),
                kind: Set(f.kind.as_str().to_owned()),
                payment_key: Set(f.payment_key.clone()),
                order_id: Set(f.order_id.clone()),
                transaction_key: Set(f.transaction_key.clone()),
                ours: Set(f.ours.clone()),
                theirs: Set(f.theirs.clone()),
                detail: Set(f.detail.clone()),
            }))
            .exec_without_returning(&txn)
            .await
            .map_err(repo_err)?;
        }
        payouts::Entity::delete_many()
            .filter(payouts::Column::SoldDate.eq(day.as_str()))
            .exec(&txn)
            .await
            .map_err(repo_err)?;
        for chunk in payouts.chunks(500) {
            // A row of another sold day for the same transaction (the provider moved it):
            // the latest run's stands.
            let sources: Vec<String> = chunk.iter().map(|p| p.source.clone()).collect();
            payouts::Entity::delete_many()
                .filter(payouts::Column::Source.is_in(sources))
                .exec(&txn)
                .await
                .map_err(repo_err)?;
            payouts::Entity::insert_many(chunk.iter().map(payout_row))
                .exec_without_returning(&txn)
                .await
                .map_err(repo_err)?;
        }
        if !audit.is_empty() {
            insert_audit(&txn, &audit).await?;
        }
        txn.commit().await.map_err(repo_err)
    }

    async fn day(&self, day: NaiveDate) -> Result<Option<(LedgerRun, Vec<Finding>)>, RepoError> {
        let key = day.format(DAY).to_string();
        let Some(run) = ledger_runs::Entity::find_by_id(key.clone()).one(&self.db).await.map_err(repo_err)?
        else {
            return Ok(None);
        };
        let findings = ledger_findings::Entity::find()
            .filter(ledger_findings::Column::Day.eq(key))
            .order_by_asc(ledger_findings::Column::Id)
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(finding_from_row)
            .collect::<Result<_, _>>()?;
        Ok(Some((run_from_row(run)?, findings)))
    }

    async fn latest_counts(&self) -> Result<Vec<(FindingKind, i64)>, RepoError> {
        let latest = ledger_runs::Entity::find()
            .order_by_desc(ledger_runs::Column::Day)
            .one(&self.db)
            .await
            .map_err(repo_err)?;
        let mut counts: Vec<(FindingKind, i64)> = FindingKind::ALL.iter().map(|k| (*k, 0)).collect();
        if let Some(run) = latest {
            for row in ledger_findings::Entity::find()
                .filter(ledger_findings::Column::Day.eq(run.day))
                .all(&self.db)
                .await
                .map_err(repo_err)?
            {
                if let Some(slot) = counts.iter_mut().find(|(k, _)| k.as_str() == row.kind) {
                    slot.1 += 1;
                }
            }
        }
        Ok(counts)
    }
}
