//! The unit of work: every write of a [`Changes`] set in one transaction, each update
//! conditional on the version loaded; wakes the relay after a commit with events.

use async_trait::async_trait;
use sea_orm::ActiveValue::Set;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, QueryFilter, TransactionTrait,
};

use super::audit::insert_audit;
use super::entities::{
    inbox, notification_events, orchestration_steps, order_items, orders, outbox_events, payments, refunds,
    settlements,
};
use super::listener::OUTBOX_CHANNEL;
use super::mapping::*;
use super::store::SeaOrmStore;
use super::{is_postgres, repo_err};
use crate::application::ports::{Changes, RepoError, UnitOfWork, Write};
use chrono::{DateTime, Utc};

/// `Err(Conflict)` unless exactly one row was updated.
fn one_row(rows: u64) -> Result<(), RepoError> {
    if rows == 1 { Ok(()) } else { Err(RepoError::Conflict) }
}

/// The conditional updates of one aggregate's writes: `WHERE id = ? AND version = ?`,
/// exactly one row or `Conflict`.
macro_rules! update_rows {
    ($txn:expr, $writes:expr, $entity:ident, $to_row:path) => {
        for write in &$writes {
            if let Write::Update(row) = write {
                let result = $entity::Entity::update_many()
                    .set($to_row(row))
                    .filter($entity::Column::Id.eq(row.id.as_uuid()))
                    .filter($entity::Column::Version.eq(row.version))
                    .exec($txn)
                    .await
                    .map_err(repo_err)?;
                one_row(result.rows_affected)?;
            }
        }
    };
}

/// The inserts of one aggregate's writes.
macro_rules! insert_rows {
    ($txn:expr, $writes:expr, $entity:ident, $to_row:path) => {
        for write in &$writes {
            if let Write::Insert(row) = write {
                $entity::Entity::insert($to_row(row)).exec_without_returning($txn).await.map_err(repo_err)?;
            }
        }
    };
}

async fn apply(txn: &DatabaseTransaction, changes: Changes, lanes: u16) -> Result<(), RepoError> {
    // Conditional updates first: a lost race is found before anything is inserted, and on
    // PostgreSQL the row lock they take serialises writers of the same order.
    for order in &changes.orders {
        let mut update = orders::Entity::update_many().set(order_to_row(order, None));
        if let Some(owner) = &changes.release_saga {
            use sea_orm::sea_query::{Expr, ExprTrait};
            let ours = Expr::col(orders::Column::SagaLockedBy).eq(owner.as_str());
            update = update
                .col_expr(
                    orders::Column::SagaLockedUntil,
                    Expr::case(ours.clone(), Expr::value(Option::<DateTime<Utc>>::None))
                        .finally(Expr::col(orders::Column::SagaLockedUntil))
                        .into(),
                )
                .col_expr(
                    orders::Column::SagaLockedBy,
                    Expr::case(ours, Expr::value(Option::<String>::None))
                        .finally(Expr::col(orders::Column::SagaLockedBy))
                        .into(),
                );
        }
        let result = update
            .filter(orders::Column::Id.eq(order.id.as_uuid()))
            .filter(orders::Column::Version.eq(order.version))
            .exec(txn)
            .await
            .map_err(repo_err)?;
        one_row(result.rows_affected)?;
    }
    update_rows!(txn, changes.payments, payments, payment_to_row);
    update_rows!(txn, changes.refunds, refunds, refund_to_row);
    update_rows!(txn, changes.settlements, settlements, settlement_to_row);
    update_rows!(txn, changes.notifications, notification_events, notification_to_row);

    for (order, context, lease) in &changes.new_orders {
        let mut row = order_to_row(order, Some(context));
        if let Some(lease) = lease {
            row.saga_locked_by = Set(Some(lease.owner.clone()));
            row.saga_locked_until = Set(Some(lease.until));
        }
        orders::Entity::insert(row).exec_without_returning(txn).await.map_err(repo_err)?;
        order_items::Entity::insert_many(items_to_rows(order))
            .exec_without_returning(txn)
            .await
            .map_err(repo_err)?;
    }
    insert_rows!(txn, changes.payments, payments, payment_to_row);
    insert_rows!(txn, changes.refunds, refunds, refund_to_row);
    insert_rows!(txn, changes.settlements, settlements, settlement_to_row);
    insert_rows!(txn, changes.notifications, notification_events, notification_to_row);
    if !changes.steps.is_empty() {
        let rows = changes.steps.iter().map(|s| orchestration_steps::ActiveModel {
            order_id: Set(s.order_id.as_uuid()),
            step: Set(s.record.step.as_str().to_owned()),
            status: Set(s.record.status.as_str().to_owned()),
            detail: Set(s.record.detail.clone()),
            created_at: Set(s.record.created_at),
            ..Default::default()
        });
        orchestration_steps::Entity::insert_many(rows).exec_without_returning(txn).await.map_err(repo_err)?;
    }
    if !changes.audit.is_empty() {
        insert_audit(txn, &changes.audit).await?;
    }
    for entry in &changes.inbox {
        inbox::Entity::insert(inbox::ActiveModel {
            consumer: Set(entry.consumer.clone()),
            event_id: Set(entry.event_id.clone()),
            processed_at: Set(entry.processed_at),
            order_id: Set(entry.order_id.map(|id| id.as_uuid())),
            digest: Set(entry.digest.clone()),
        })
        .exec_without_returning(txn)
        .await
        .map_err(repo_err)?;
    }
    if !changes.outbox.is_empty() {
        outbox_events::Entity::insert_many(changes.outbox.iter().map(|e| outbox_row(e, lanes)))
            .exec_without_returning(txn)
            .await
            .map_err(repo_err)?;
    }
    Ok(())
}

#[async_trait]
impl UnitOfWork for SeaOrmStore {
    async fn commit(&self, changes: Changes) -> Result<(), RepoError> {
        if changes.is_empty() {
            return Ok(());
        }
        let has_events = !changes.outbox.is_empty();
        let notify = has_events && is_postgres(&self.db);
        // The lanes of the events, for the notification: only the workers holding them wake.
        let mut lanes: Vec<i16> = Vec::new();
        if notify {
            lanes = changes
                .outbox
                .iter()
                .map(|e| {
                    crate::domain::outbox::lanes::lane_of(&e.aggregate_type, &e.aggregate_id, self.lanes)
                })
                .collect();
            lanes.sort_unstable();
            lanes.dedup();
        }
        let txn = self.db.begin().await.map_err(repo_err)?;
        if let Err(err) = apply(&txn, changes, self.lanes).await {
            // Dropping the transaction rolls back; say so explicitly to free the connection now.
            let _ = txn.rollback().await;
            return Err(err);
        }
        if notify {
            // Delivered to listeners only when (and if) the transaction commits. The payload
            // is digits and commas only.
            let payload = lanes.iter().map(i16::to_string).collect::<Vec<_>>().join(",");
            txn.execute_unprepared(&format!("NOTIFY {OUTBOX_CHANNEL}, '{payload}'"))
                .await
                .map_err(repo_err)?;
        }
        txn.commit().await.map_err(repo_err)?;
        if has_events {
            self.relay_wake.notify_one();
        }
        Ok(())
    }
}
