//! Reads of settlements.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::entities::{orders, settlements};
use super::mapping::settlement_from_row;
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{ListedSettlement, RepoError, SettlementRepository};
use crate::domain::ids::{MerchantId, SettlementId};
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
        merchant: Option<MerchantId>,
        limit: u32,
    ) -> Result<Vec<ListedSettlement>, RepoError> {
        let mut query = settlements::Entity::find();
        if let Some(status) = status {
            query = query.filter(settlements::Column::Status.eq(status.as_str()));
        }
        if let Some(merchant) = merchant {
            query = query.filter(
                settlements::Column::OrderId.in_subquery(
                    sea_orm::sea_query::Query::select()
                        .column(orders::Column::Id)
                        .from(orders::Entity)
                        .and_where(orders::Column::MerchantId.eq(merchant.as_uuid()))
                        .to_owned(),
                ),
            );
        }
        let rows = query
            .order_by_desc(settlements::Column::UpdatedAt)
            .order_by_desc(settlements::Column::Id)
            .limit(u64::from(limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        self.with_order_numbers(rows).await
    }

    async fn settlement(&self, id: SettlementId) -> Result<Option<ListedSettlement>, RepoError> {
        let row = settlements::Entity::find_by_id(id.as_uuid()).one(&self.db).await.map_err(repo_err)?;
        Ok(self.with_order_numbers(row.into_iter().collect()).await?.pop())
    }
}

impl SeaOrmStore {
    /// `rows` with their orders' numbers, in one more query (a list is at most 100 rows).
    async fn with_order_numbers(
        &self,
        rows: Vec<settlements::Model>,
    ) -> Result<Vec<ListedSettlement>, RepoError> {
        let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.order_id).collect();
        let numbers: HashMap<uuid::Uuid, (i64, uuid::Uuid)> = if ids.is_empty() {
            HashMap::new()
        } else {
            orders::Entity::find()
                .select_only()
                .column(orders::Column::Id)
                .column(orders::Column::Number)
                .column(orders::Column::MerchantId)
                .filter(orders::Column::Id.is_in(ids))
                .into_tuple::<(uuid::Uuid, i64, uuid::Uuid)>()
                .all(&self.db)
                .await
                .map_err(repo_err)?
                .into_iter()
                .map(|(id, number, merchant)| (id, (number, merchant)))
                .collect()
        };
        rows.into_iter()
            .map(|row| {
                // A settlement's order is a foreign key: a settlement without one is a
                // broken row, said as such rather than shown with a made-up number.
                let (order_number, merchant) = *numbers.get(&row.order_id).ok_or_else(|| {
                    RepoError::corrupt(format!("settlement {} has no order {}", row.id, row.order_id))
                })?;
                let merchant_id = MerchantId::from_uuid(merchant);
                Ok(ListedSettlement { settlement: settlement_from_row(row)?, order_number, merchant_id })
            })
            .collect()
    }
}
