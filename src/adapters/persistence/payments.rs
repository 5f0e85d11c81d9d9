//! Reads of payments.

use async_trait::async_trait;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::entities::{orders, payments};
use super::mapping::*;
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{PaymentRepository, RepoError};
use crate::domain::ids::{OrderId, PaymentId};
use crate::domain::order::{FailureStage, OrderStatus};
use crate::domain::payment::{Payment, PaymentStatus};
use chrono::{DateTime, Utc};

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
