//! Reads of orders, their saga state, steps, inbox entries and audit rows.

use std::collections::HashMap;

use async_trait::async_trait;
use sea_orm::{ColumnTrait, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect};

use super::entities::{
    audit_log, inbox, notification_events, orchestration_steps, order_items, orders, payments, refunds,
    settlements,
};
use super::mapping::*;
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{
    AuditRecord, InboxEntry, MeetingOrders, Numbered, OrderFilter, OrderRecord, OrderRepository, RepoError,
    SagaLease, SagaRuns,
};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{Order, OrderStart, OrderStatus};
use crate::domain::settlement::SettlementStatus;
use chrono::{DateTime, Utc};

/// The statuses a saga can stall in half-way (the next step is the worker's to run).
const STALLABLE: [OrderStatus; 3] =
    [OrderStatus::Created, OrderStatus::PaymentApproved, OrderStatus::SettlementRequested];

impl SeaOrmStore {
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
impl OrderRepository for SeaOrmStore {
    async fn find_by_number(&self, number: i64) -> Result<Option<OrderId>, RepoError> {
        Ok(orders::Entity::find()
            .filter(orders::Column::Number.eq(number))
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(|row| OrderId::from_uuid(row.id)))
    }

    async fn next_numbers(&self, kinds: &[Numbered]) -> Result<Vec<i64>, RepoError> {
        use sea_orm::{ConnectionTrait, Statement};
        let sequences: Vec<&str> = kinds
            .iter()
            .map(|kind| match kind {
                Numbered::Order => "order_numbers",
                Numbered::Payment => "payment_numbers",
            })
            .collect();
        if (1..sequences.len()).any(|i| sequences[..i].contains(&sequences[i])) {
            return Err(RepoError::corrupt(format!("a sequence asked for twice: {sequences:?}")));
        }
        if sequences.is_empty() {
            return Ok(Vec::new());
        }
        let backend = self.db.get_database_backend();
        let rows = if super::is_postgres(&self.db) {
            // One statement, one round trip, however many kinds.
            let columns: Vec<String> = sequences.iter().map(|s| format!("nextval('{s}') AS {s}")).collect();
            let sql = format!("SELECT {}", columns.join(", "));
            let row = self.db.query_one_raw(Statement::from_string(backend, sql)).await.map_err(repo_err)?;
            let row = row.ok_or_else(|| RepoError::corrupt("no row from the number sequences"))?;
            let mut numbers = Vec::with_capacity(sequences.len());
            for sequence in &sequences {
                numbers.push((*sequence, row.try_get::<i64>("", sequence).map_err(repo_err)?));
            }
            numbers
        } else {
            // One statement, so concurrent writers serialise on it (SQLite has one writer).
            let marks = vec!["?"; sequences.len()].join(", ");
            let sql = format!(
                "UPDATE number_sequences SET value = value + 1 WHERE name IN ({marks}) RETURNING name, value"
            );
            let values = sequences.iter().map(|s| (*s).into());
            let rows = self
                .db
                .query_all_raw(Statement::from_sql_and_values(backend, sql, values))
                .await
                .map_err(repo_err)?;
            let mut numbers = Vec::with_capacity(rows.len());
            for row in rows {
                let name: String = row.try_get("", "name").map_err(repo_err)?;
                let value: i64 = row.try_get("", "value").map_err(repo_err)?;
                let sequence = sequences
                    .iter()
                    .find(|s| **s == name)
                    .ok_or_else(|| RepoError::corrupt(format!("an unknown sequence {name}")))?;
                numbers.push((*sequence, value));
            }
            numbers
        };
        sequences
            .iter()
            .map(|sequence| match rows.iter().find(|(s, _)| s == sequence) {
                Some((_, number)) if *number > 0 => Ok(*number),
                Some((_, number)) => Err(RepoError::corrupt(format!("{sequence} gave {number}"))),
                None => Err(RepoError::corrupt(format!("no sequence {sequence}"))),
            })
            .collect()
    }

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
        let refunds = match &payment {
            None => Vec::new(),
            Some(p) => refunds::Entity::find()
                .filter(refunds::Column::PaymentId.eq(p.id.as_uuid()))
                .order_by_asc(refunds::Column::CreatedAt)
                .order_by_asc(refunds::Column::Id)
                .all(&self.db)
                .await
                .map_err(repo_err)?
                .into_iter()
                .map(refund_from_row)
                .collect::<Result<_, _>>()?,
        };
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
        Ok(Some(OrderRecord { order, payment, refunds, settlement, notification, steps, context }))
    }

    async fn list(&self, filter: &OrderFilter) -> Result<Vec<Order>, RepoError> {
        let mut query = orders::Entity::find();
        if let Some(merchant) = filter.merchant_id {
            query = query.filter(orders::Column::MerchantId.eq(merchant.as_uuid()));
        }
        if let Some(store) = filter.store_id {
            query = query.filter(orders::Column::StoreId.eq(store.as_uuid()));
        }
        if let Some(from) = filter.from {
            query = query.filter(orders::Column::CreatedAt.gte(from));
        }
        if let Some(to) = filter.to {
            query = query.filter(orders::Column::CreatedAt.lt(to));
        }
        if let Some(status) = filter.status {
            query = query.filter(orders::Column::Status.eq(status.as_str()));
        }
        if let Some(customer) = &filter.customer_id {
            query = query.filter(orders::Column::CustomerId.eq(customer.as_str()));
        }
        if let Some(number) = filter.number {
            query = query.filter(orders::Column::Number.eq(number));
        }
        if let Some(source) = filter.source {
            query = query.filter(orders::Column::Source.eq(source.as_str()));
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

    async fn waiting_since_before(
        &self,
        status: OrderStatus,
        start: Option<OrderStart>,
        created_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<OrderId>, RepoError> {
        let mut query = orders::Entity::find().filter(orders::Column::Status.eq(status.as_str()));
        if let Some(start) = start {
            query = query.filter(orders::Column::Start.eq(start.as_str()));
        }
        Ok(query
            .filter(orders::Column::CreatedAt.lt(created_before))
            .order_by_asc(orders::Column::CreatedAt)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(|row| OrderId::from_uuid(row.id))
            .collect())
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
                digest: row.digest,
            }))
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
impl MeetingOrders for SeaOrmStore {
    async fn live_registration(&self, meeting_id: &str, user_id: &str) -> Result<Option<OrderId>, RepoError> {
        let key = crate::domain::order::registration_key(meeting_id, user_id);
        Ok(orders::Entity::find()
            .filter(orders::Column::RegistrationKey.eq(key))
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(|row| OrderId::from_uuid(row.id)))
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
}

#[async_trait]
impl SagaRuns for SeaOrmStore {
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
            // A settlement waiting for its retry or an operator is not a stalled saga: its own
            // state says what comes next (docs/spec.md §13).
            .filter(sea_orm::sea_query::Expr::cust(format!(
                "NOT EXISTS (SELECT 1 FROM settlements s WHERE s.order_id = orders.id AND s.status IN ('{}', '{}'))",
                SettlementStatus::RetryScheduled.as_str(),
                SettlementStatus::AwaitingOperator.as_str()
            )))
            // An order held until its client asks for its saga (the commerce dialect's) is
            // held, not stalled, until then (docs/dialects.md).
            .filter(sea_orm::sea_query::Expr::cust(format!(
                "NOT (orders.start = '{}' AND orders.status = '{}' AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.order_id = orders.id))",
                OrderStart::Held.as_str(),
                OrderStatus::Created.as_str()
            )))
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
}
