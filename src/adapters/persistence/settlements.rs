//! Reads of settlements.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::entities::settlements;
use super::mapping::settlement_from_row;
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{RepoError, SettlementRepository};
use crate::domain::ids::SettlementId;
use crate::domain::settlement::{Settlement, SettlementStatus};

#[async_trait]
impl SettlementRepository for SeaOrmStore {
    async fn due_settlements(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<Settlement>, RepoError> {
        settlements::Entity::find()
            .filter(settlements::Column::Status.eq(SettlementStatus::RetryScheduled.as_str()))
            .filter(settlements::Column::NextAttemptAt.lte(now))
            .order_by_asc(settlements::Column::NextAttemptAt)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(settlement_from_row)
            .collect()
    }

    async fn settlements(
        &self,
        status: Option<SettlementStatus>,
        limit: u32,
    ) -> Result<Vec<Settlement>, RepoError> {
        let mut query = settlements::Entity::find();
        if let Some(status) = status {
            query = query.filter(settlements::Column::Status.eq(status.as_str()));
        }
        query
            .order_by_desc(settlements::Column::UpdatedAt)
            .order_by_desc(settlements::Column::Id)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(settlement_from_row)
            .collect()
    }

    async fn settlement(&self, id: SettlementId) -> Result<Option<Settlement>, RepoError> {
        settlements::Entity::find_by_id(id.as_uuid())
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(settlement_from_row)
            .transpose()
    }
}
