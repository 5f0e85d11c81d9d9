//! Reads of notification events.

use async_trait::async_trait;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::entities::{notification_events, orders};
use super::mapping::*;
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{NotificationRepository, RepoError};
use crate::domain::ids::{MerchantId, NotificationId};
use crate::domain::notification::{Notification, NotificationStatus};
use chrono::{DateTime, Utc};

#[async_trait]
impl NotificationRepository for SeaOrmStore {
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
        merchant: Option<MerchantId>,
        limit: u32,
    ) -> Result<Vec<Notification>, RepoError> {
        let mut query = notification_events::Entity::find();
        if let Some(status) = status {
            query = query.filter(notification_events::Column::Status.eq(status.as_str()));
        }
        if let Some(merchant) = merchant {
            query = query.filter(
                notification_events::Column::OrderId.in_subquery(
                    sea_orm::sea_query::Query::select()
                        .column(orders::Column::Id)
                        .from(orders::Entity)
                        .and_where(orders::Column::MerchantId.eq(merchant.as_uuid()))
                        .to_owned(),
                ),
            );
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
