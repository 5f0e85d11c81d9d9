//! Orders, their saga state, steps and audit rows; and the unit of work that writes all of
//! it (plus outbox events) in one transaction.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use sea_orm::ActiveValue::Set;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, EntityTrait, FromQueryResult,
    QueryFilter, QueryOrder, QuerySelect, TransactionTrait,
};
use tokio::sync::Notify;

use super::audit::insert_audit;
use super::entities::{
    audit_log, inbox, notification_events, orchestration_steps, order_items, orders, outbox_events, payments,
    settlements,
};
use super::listener::OUTBOX_CHANNEL;
use super::mapping::*;
use super::{is_postgres, repo_err};
use crate::application::ports::{
    AuditLog, AuditRecord, Changes, InboxEntry, NotificationRepository, OrderFilter, OrderRecord,
    OrderRepository, PaymentRepository, RepoError, SagaLease, UnitOfWork, Write,
};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{NotificationId, OrderId};
use crate::domain::notification::{Notification, NotificationStatus};
use crate::domain::order::{FailureStage, Order, OrderStatus};
use crate::domain::outbox::lanes::DEFAULT_LANES;
use crate::domain::payment::{Payment, PaymentStatus};
use chrono::{DateTime, Utc};

/// Orders over SeaORM. Also the [`UnitOfWork`]: it wakes the in-process relay after a
/// commit that appended outbox events, and on PostgreSQL `NOTIFY`s other processes.
#[derive(Clone)]
pub struct SeaOrmOrderRepository {
    db: DatabaseConnection,
    relay_wake: Arc<Notify>,
    /// `outbox.lanes`: each event is stored with its aggregate's lane.
    lanes: u16,
}

impl SeaOrmOrderRepository {
    pub fn new(db: DatabaseConnection, relay_wake: Arc<Notify>) -> Self {
        SeaOrmOrderRepository { db, relay_wake, lanes: DEFAULT_LANES }
    }

    /// Stores events in `lanes` lanes (`outbox.lanes`; 16 unless set).
    pub fn with_lanes(mut self, lanes: u16) -> Self {
        self.lanes = lanes;
        self
    }
}

/// The statuses a saga can stall in half-way (the next step is the worker's to run).
const STALLABLE: [OrderStatus; 3] =
    [OrderStatus::Created, OrderStatus::PaymentApproved, OrderStatus::SettlementRequested];

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
impl AuditLog for SeaOrmOrderRepository {
    async fn purge_audit(&self, before: DateTime<Utc>, limit: u32) -> Result<u64, RepoError> {
        let backend = self.db.get_database_backend();
        let sql = "DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE created_at < $1 \
                   ORDER BY id LIMIT $2)";
        let sql =
            if backend == sea_orm::DatabaseBackend::Sqlite { sql.replace('$', "?") } else { sql.to_owned() };
        let values: Vec<sea_orm::Value> = vec![before.into(), i64::from(limit).into()];
        let result = self
            .db
            .execute_raw(sea_orm::Statement::from_sql_and_values(backend, sql, values))
            .await
            .map_err(repo_err)?;
        Ok(result.rows_affected())
    }
}

#[async_trait]
impl UnitOfWork for SeaOrmOrderRepository {
    async fn commit(&self, changes: Changes) -> Result<(), RepoError> {
        if changes.is_empty() {
            return Ok(());
        }
        let has_events = !changes.outbox.is_empty();
        let txn = self.db.begin().await.map_err(repo_err)?;
        if let Err(err) = apply(&txn, changes, self.lanes).await {
            // Dropping the transaction rolls back; say so explicitly to free the connection now.
            let _ = txn.rollback().await;
            return Err(err);
        }
        if has_events && is_postgres(&self.db) {
            // Delivered to listeners only when (and if) the transaction commits.
            txn.execute_unprepared(&format!("NOTIFY {OUTBOX_CHANNEL}")).await.map_err(repo_err)?;
        }
        txn.commit().await.map_err(repo_err)?;
        if has_events {
            self.relay_wake.notify_one();
        }
        Ok(())
    }
}

impl SeaOrmOrderRepository {
    async fn load_orders(&self, rows: Vec<orders::Model>) -> Result<Vec<Order>, RepoError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<_> = rows.iter().map(|r| r.id).collect();
        let items = order_items::Entity::find()
            .filter(order_items::Column::OrderId.is_in(ids))
            .order_by_asc(order_items::Column::LineNo)
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        let mut by_order: HashMap<_, Vec<_>> = HashMap::new();
        for item in items {
            by_order.entry(item.order_id).or_default().push(item);
        }
        rows.into_iter()
            .map(|row| {
                let items = by_order.remove(&row.id).unwrap_or_default();
                order_from_row(row, items).map(|(order, _)| order)
            })
            .collect()
    }
}

#[async_trait]
impl OrderRepository for SeaOrmOrderRepository {
    async fn get(&self, id: OrderId) -> Result<Option<OrderRecord>, RepoError> {
        let uuid = id.as_uuid();
        let Some(row) = orders::Entity::find_by_id(uuid).one(&self.db).await.map_err(repo_err)? else {
            return Ok(None);
        };
        let items = order_items::Entity::find()
            .filter(order_items::Column::OrderId.eq(uuid))
            .order_by_asc(order_items::Column::LineNo)
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        let (order, context) = order_from_row(row, items)?;
        let payment = payments::Entity::find()
            .filter(payments::Column::OrderId.eq(uuid))
            .order_by_desc(payments::Column::Attempt)
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(payment_from_row)
            .transpose()?;
        let settlement = settlements::Entity::find()
            .filter(settlements::Column::OrderId.eq(uuid))
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(settlement_from_row)
            .transpose()?;
        let notification = notification_events::Entity::find()
            .filter(notification_events::Column::OrderId.eq(uuid))
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(notification_from_row)
            .transpose()?;
        let steps = orchestration_steps::Entity::find()
            .filter(orchestration_steps::Column::OrderId.eq(uuid))
            .order_by_asc(orchestration_steps::Column::Id)
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(step_from_row)
            .collect::<Result<_, _>>()?;
        Ok(Some(OrderRecord { order, payment, settlement, notification, steps, context }))
    }

    async fn list(&self, filter: &OrderFilter) -> Result<Vec<Order>, RepoError> {
        let mut query = orders::Entity::find();
        if let Some(status) = filter.status {
            query = query.filter(orders::Column::Status.eq(status.as_str()));
        }
        if let Some(customer) = &filter.customer_id {
            query = query.filter(orders::Column::CustomerId.eq(customer.as_str()));
        }
        if let Some(before) = filter.before {
            query = query.filter(orders::Column::Id.lt(before.as_uuid()));
        }
        let rows = query
            .order_by_desc(orders::Column::Id)
            .limit(u64::from(filter.limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        self.load_orders(rows).await
    }

    async fn count_by_status(&self) -> Result<Vec<(OrderStatus, i64)>, RepoError> {
        #[derive(sea_orm::FromQueryResult)]
        struct Count {
            status: String,
            n: i64,
        }
        let rows = Count::find_by_statement(sea_orm::Statement::from_string(
            self.db.get_database_backend(),
            "SELECT status, COUNT(*) AS n FROM orders GROUP BY status",
        ))
        .all(&self.db)
        .await
        .map_err(repo_err)?;
        let counts: HashMap<String, i64> = rows.into_iter().map(|r| (r.status, r.n)).collect();
        Ok(OrderStatus::ALL.iter().map(|s| (*s, counts.get(s.as_str()).copied().unwrap_or(0))).collect())
    }

    async fn stalled(
        &self,
        before: DateTime<Utc>,
        now: DateTime<Utc>,
        max_resumes: i32,
        limit: u32,
    ) -> Result<Vec<(OrderId, i32)>, RepoError> {
        use sea_orm::sea_query::Condition;
        Ok(orders::Entity::find()
            .filter(orders::Column::Status.is_in(STALLABLE.iter().map(|s| s.as_str())))
            .filter(orders::Column::UpdatedAt.lt(before))
            .filter(orders::Column::SagaResumes.lt(max_resumes))
            .filter(
                Condition::any()
                    .add(orders::Column::SagaResumeAt.is_null())
                    .add(orders::Column::SagaResumeAt.lte(now)),
            )
            .filter(
                Condition::any()
                    .add(orders::Column::SagaLockedUntil.is_null())
                    .add(orders::Column::SagaLockedUntil.lt(now)),
            )
            .order_by_asc(orders::Column::UpdatedAt)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(|row| (OrderId::from_uuid(row.id), row.saga_resumes))
            .collect())
    }

    async fn note_resume(&self, id: OrderId, next_at: DateTime<Utc>) -> Result<(), RepoError> {
        use sea_orm::sea_query::{Expr, ExprTrait};
        orders::Entity::update_many()
            .col_expr(orders::Column::SagaResumes, Expr::col(orders::Column::SagaResumes).add(1))
            .col_expr(orders::Column::SagaResumeAt, Expr::value(next_at))
            .filter(orders::Column::Id.eq(id.as_uuid()))
            .exec(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(())
    }

    async fn stalled_for_operator(&self, max_resumes: i32, limit: u32) -> Result<Vec<Order>, RepoError> {
        let rows = orders::Entity::find()
            .filter(orders::Column::Status.is_in(STALLABLE.iter().map(|s| s.as_str())))
            .filter(orders::Column::SagaResumes.gte(max_resumes))
            .order_by_desc(orders::Column::UpdatedAt)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        self.load_orders(rows).await
    }

    async fn lease_saga(
        &self,
        id: OrderId,
        lease: &SagaLease,
        now: DateTime<Utc>,
    ) -> Result<bool, RepoError> {
        use sea_orm::sea_query::{Condition, Expr};
        let free = Condition::any()
            .add(orders::Column::SagaLockedUntil.is_null())
            .add(orders::Column::SagaLockedUntil.lt(now))
            .add(orders::Column::SagaLockedBy.eq(lease.owner.as_str()));
        let result = orders::Entity::update_many()
            .col_expr(orders::Column::SagaLockedBy, Expr::value(lease.owner.clone()))
            .col_expr(orders::Column::SagaLockedUntil, Expr::value(lease.until))
            .filter(orders::Column::Id.eq(id.as_uuid()))
            .filter(free)
            .exec(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(result.rows_affected == 1)
    }

    async fn release_saga(&self, id: OrderId, owner: &str) -> Result<(), RepoError> {
        use sea_orm::sea_query::Expr;
        orders::Entity::update_many()
            .col_expr(orders::Column::SagaLockedBy, Expr::value(Option::<String>::None))
            .col_expr(orders::Column::SagaLockedUntil, Expr::value(Option::<DateTime<Utc>>::None))
            .filter(orders::Column::Id.eq(id.as_uuid()))
            .filter(orders::Column::SagaLockedBy.eq(owner))
            .exec(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(())
    }

    async fn inbox_entry(&self, consumer: &str, event_id: &str) -> Result<Option<InboxEntry>, RepoError> {
        Ok(inbox::Entity::find_by_id((consumer.to_owned(), event_id.to_owned()))
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(|row| InboxEntry {
                consumer: row.consumer,
                event_id: row.event_id,
                order_id: row.order_id.map(OrderId::from_uuid),
                processed_at: row.processed_at,
            }))
    }

    async fn completed_meeting_orders(
        &self,
        meeting_id: &str,
        customer_id: Option<String>,
    ) -> Result<Vec<OrderId>, RepoError> {
        let mut query = orders::Entity::find()
            .filter(orders::Column::MeetingId.eq(meeting_id))
            .filter(orders::Column::Status.eq(OrderStatus::Completed.as_str()));
        if let Some(customer) = customer_id {
            query = query.filter(orders::Column::CustomerId.eq(customer));
        }
        Ok(query
            .order_by_asc(orders::Column::Id)
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(|row| OrderId::from_uuid(row.id))
            .collect())
    }

    async fn audit_for(&self, entity_type: &str, entity_id: &str) -> Result<Vec<AuditRecord>, RepoError> {
        let rows = audit_log::Entity::find()
            .filter(audit_log::Column::EntityType.eq(entity_type))
            .filter(audit_log::Column::EntityId.eq(entity_id))
            .order_by_asc(audit_log::Column::Id)
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        rows.into_iter()
            .map(|r| {
                let action = AuditAction::parse(&r.action)
                    .ok_or_else(|| RepoError::corrupt(format!("audit_log.action `{}`", r.action)))?;
                Ok(AuditRecord {
                    action,
                    entity_type: r.entity_type,
                    entity_id: r.entity_id,
                    actor: r.actor,
                    detail: r.detail,
                    created_at: r.created_at,
                })
            })
            .collect()
    }
}

#[async_trait]
impl NotificationRepository for SeaOrmOrderRepository {
    async fn due(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<Notification>, RepoError> {
        notification_events::Entity::find()
            .filter(notification_events::Column::Status.eq(NotificationStatus::RetryScheduled.as_str()))
            .filter(notification_events::Column::NextAttemptAt.lte(now))
            .order_by_asc(notification_events::Column::NextAttemptAt)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(notification_from_row)
            .collect()
    }

    async fn stuck(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<Notification>, RepoError> {
        notification_events::Entity::find()
            .filter(notification_events::Column::Status.eq(NotificationStatus::Processing.as_str()))
            .filter(notification_events::Column::ClaimedUntil.lt(now))
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(notification_from_row)
            .collect()
    }

    async fn list(
        &self,
        status: Option<NotificationStatus>,
        limit: u32,
    ) -> Result<Vec<Notification>, RepoError> {
        let mut query = notification_events::Entity::find();
        if let Some(status) = status {
            query = query.filter(notification_events::Column::Status.eq(status.as_str()));
        }
        query
            .order_by_desc(notification_events::Column::UpdatedAt)
            .order_by_desc(notification_events::Column::Id)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(notification_from_row)
            .collect()
    }

    async fn find(&self, id: NotificationId) -> Result<Option<Notification>, RepoError> {
        notification_events::Entity::find_by_id(id.as_uuid())
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(notification_from_row)
            .transpose()
    }
}

#[async_trait]
impl PaymentRepository for SeaOrmOrderRepository {
    async fn awaiting_confirmation(
        &self,
        status: PaymentStatus,
        now: DateTime<Utc>,
        max_attempts: i32,
        limit: u32,
    ) -> Result<Vec<Payment>, RepoError> {
        use sea_orm::sea_query::Condition;
        payments::Entity::find()
            .filter(payments::Column::Status.eq(status.as_str()))
            .filter(payments::Column::ReconcileAttempts.lt(max_attempts))
            .filter(
                Condition::any()
                    .add(payments::Column::NextReconcileAt.is_null())
                    .add(payments::Column::NextReconcileAt.lte(now)),
            )
            .order_by_asc(payments::Column::UpdatedAt)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(payment_from_row)
            .collect()
    }

    async fn with_status(&self, status: PaymentStatus, limit: u32) -> Result<Vec<Payment>, RepoError> {
        payments::Entity::find()
            .filter(payments::Column::Status.eq(status.as_str()))
            .order_by_desc(payments::Column::UpdatedAt)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(payment_from_row)
            .collect()
    }

    async fn by_request_id(&self, payment_request_id: &str) -> Result<Option<Payment>, RepoError> {
        payments::Entity::find()
            .filter(payments::Column::PaymentRequestId.eq(payment_request_id))
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(payment_from_row)
            .transpose()
    }

    async fn by_provider_transaction(
        &self,
        provider_transaction_id: &str,
    ) -> Result<Option<Payment>, RepoError> {
        payments::Entity::find()
            .filter(payments::Column::ProviderTransactionId.eq(provider_transaction_id))
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(payment_from_row)
            .transpose()
    }

    async fn awaiting_compensation(&self, limit: u32) -> Result<Vec<OrderId>, RepoError> {
        Ok(orders::Entity::find()
            .filter(orders::Column::Status.eq(OrderStatus::Failed.as_str()))
            .filter(orders::Column::FailureStage.eq(FailureStage::Settlement.as_str()))
            .order_by_asc(orders::Column::UpdatedAt)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(|row| OrderId::from_uuid(row.id))
            .collect())
    }
}
