//! Reads of payments.

use async_trait::async_trait;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::entities::{orders, payments, refunds};
use super::mapping::*;
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{
    CustomerPayments, MeetingPayment, MeetingPayments, PaymentRepository, PaymentSortKey, RepoError,
};
use crate::domain::ids::{OrderId, PaymentId};
use crate::domain::ledger::Books;
use crate::domain::order::{FailureStage, OrderSource, OrderStatus};
use crate::domain::payment::{Payment, PaymentStatus, RefundStatus};
use chrono::{DateTime, Utc};

impl SeaOrmStore {
    /// `rows` as payments with their orders' customer and meeting, in the same order.
    async fn with_meetings(&self, rows: Vec<payments::Model>) -> Result<Vec<MeetingPayment>, RepoError> {
        let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.order_id).collect();
        let orders: std::collections::HashMap<uuid::Uuid, (String, Option<String>)> = if ids.is_empty() {
            Default::default()
        } else {
            orders::Entity::find()
                .filter(orders::Column::Id.is_in(ids))
                .all(&self.db)
                .await
                .map_err(repo_err)?
                .into_iter()
                .map(|o| (o.id, (o.customer_id, o.meeting_id)))
                .collect()
        };
        rows.into_iter()
            .map(|row| {
                let (customer_id, meeting_id) = orders
                    .get(&row.order_id)
                    .cloned()
                    .ok_or_else(|| RepoError::corrupt("a payment without its order"))?;
                Ok(MeetingPayment { payment: payment_from_row(row)?, customer_id, meeting_id })
            })
            .collect()
    }
}

#[async_trait]
impl PaymentRepository for SeaOrmStore {
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

    async fn by_id(&self, id: PaymentId) -> Result<Option<Payment>, RepoError> {
        payments::Entity::find_by_id(id.as_uuid())
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(payment_from_row)
            .transpose()
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

    async fn books(
        &self,
        day: Option<(DateTime<Utc>, DateTime<Utc>)>,
        provider_keys: &[String],
    ) -> Result<Vec<Books>, RepoError> {
        use std::collections::BTreeSet;
        let mut ids: BTreeSet<uuid::Uuid> = BTreeSet::new();
        if let Some((start, end)) = day {
            let approved: Vec<uuid::Uuid> = payments::Entity::find()
                .select_only()
                .column(payments::Column::Id)
                .filter(payments::Column::ApprovedAt.between(start, end))
                .into_tuple()
                .all(&self.db)
                .await
                .map_err(repo_err)?;
            ids.extend(approved);
            let refunded: Vec<uuid::Uuid> = refunds::Entity::find()
                .select_only()
                .column(refunds::Column::PaymentId)
                .filter(refunds::Column::UpdatedAt.between(start, end))
                .filter(refunds::Column::Status.eq(RefundStatus::Succeeded.as_str()))
                .into_tuple()
                .all(&self.db)
                .await
                .map_err(repo_err)?;
            ids.extend(refunded);
        }
        // Bounded lists per statement (a day may name thousands of payments).
        for keys in provider_keys.chunks(500) {
            let named: Vec<uuid::Uuid> = payments::Entity::find()
                .select_only()
                .column(payments::Column::Id)
                .filter(payments::Column::ProviderTransactionId.is_in(keys.iter().cloned()))
                .into_tuple()
                .all(&self.db)
                .await
                .map_err(repo_err)?;
            ids.extend(named);
        }
        let ids: Vec<uuid::Uuid> = ids.into_iter().collect();
        let mut books = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let rows = payments::Entity::find()
                .filter(payments::Column::Id.is_in(chunk.iter().copied()))
                .all(&self.db)
                .await
                .map_err(repo_err)?;
            let mut refunds_of: std::collections::HashMap<uuid::Uuid, Vec<_>> = Default::default();
            for row in refunds::Entity::find()
                .filter(refunds::Column::PaymentId.is_in(chunk.iter().copied()))
                .order_by_asc(refunds::Column::CreatedAt)
                .all(&self.db)
                .await
                .map_err(repo_err)?
            {
                refunds_of.entry(row.payment_id).or_default().push(refund_from_row(row)?);
            }
            for row in rows {
                let refunds = refunds_of.remove(&row.id).unwrap_or_default();
                books.push(Books { payment: payment_from_row(row)?, refunds });
            }
        }
        Ok(books)
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

#[async_trait]
impl MeetingPayments for SeaOrmStore {
    async fn by_number(&self, number: i64) -> Result<Option<MeetingPayment>, RepoError> {
        let Some(row) = payments::Entity::find()
            .filter(payments::Column::Number.eq(number))
            .one(&self.db)
            .await
            .map_err(repo_err)?
        else {
            return Ok(None);
        };
        Ok(self.with_meetings(vec![row]).await?.pop())
    }
    async fn of_customer(&self, query: &CustomerPayments) -> Result<(Vec<MeetingPayment>, u64), RepoError> {
        use sea_orm::PaginatorTrait;
        use sea_orm::sea_query::{Expr, ExprTrait, Query};
        let meeting_sources: Vec<&str> =
            OrderSource::ALL.iter().filter(|s| s.is_meeting()).map(|s| s.as_str()).collect();
        let mut orders_of = Query::select()
            .column(orders::Column::Id)
            .from(orders::Entity)
            .and_where(Expr::col(orders::Column::CustomerId).eq(query.customer_id.as_str()))
            .and_where(Expr::col(orders::Column::Source).is_in(meeting_sources))
            .to_owned();
        if let Some(meeting) = &query.meeting_id {
            orders_of.and_where(Expr::col(orders::Column::MeetingId).eq(meeting.as_str()));
        }
        let mut select = payments::Entity::find().filter(payments::Column::OrderId.in_subquery(orders_of));
        let names = |statuses: &[PaymentStatus]| statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>();
        if let Some(statuses) = &query.statuses {
            select = select.filter(payments::Column::Status.is_in(names(statuses)));
        }
        if !query.hidden.is_empty() {
            select = select.filter(payments::Column::Status.is_not_in(names(&query.hidden)));
        }
        if query.declined_keyed_in_hidden {
            select = select.filter(
                sea_orm::Condition::any()
                    .add(payments::Column::Status.ne(PaymentStatus::Declined.as_str()))
                    .add(payments::Column::KeyedIn.eq(false)),
            );
        }
        let total = select.clone().count(&self.db).await.map_err(repo_err)?;
        for (key, descending) in &query.sort {
            let column = match key {
                PaymentSortKey::Number => payments::Column::Number,
                PaymentSortKey::Amount => payments::Column::Amount,
                PaymentSortKey::CreatedAt => payments::Column::CreatedAt,
                PaymentSortKey::Status => payments::Column::Status,
            };
            select = if *descending { select.order_by_desc(column) } else { select.order_by_asc(column) };
        }
        let rows = select
            .order_by_asc(payments::Column::Number)
            .offset(query.offset)
            .limit(query.limit)
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        Ok((self.with_meetings(rows).await?, total))
    }
}
