//! Saved cards over SeaORM: one row per customer, replaced by a new card, deleted on request.

use async_trait::async_trait;
use sea_orm::ActiveValue::Set;
use sea_orm::sea_query::OnConflict;
use sea_orm::{EntityTrait, ModelTrait};

use super::entities::payment_methods::{self, Column};
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{BillingKey, PaymentMethodRepository, RepoError, SavedCard};

#[async_trait]
impl PaymentMethodRepository for SeaOrmStore {
    async fn saved_card(&self, customer_id: &str) -> Result<Option<SavedCard>, RepoError> {
        let row = payment_methods::Entity::find_by_id(customer_id.to_owned())
            .one(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(row.map(|r| SavedCard {
            customer_id: r.customer_id,
            customer_key: r.customer_key,
            billing_key: BillingKey(r.billing_key),
            card_company: r.card_company,
            card_number: r.card_number,
            created_at: r.created_at,
        }))
    }

    async fn save_card(&self, card: &SavedCard) -> Result<(), RepoError> {
        let row = payment_methods::ActiveModel {
            customer_id: Set(card.customer_id.clone()),
            customer_key: Set(card.customer_key.clone()),
            billing_key: Set(card.billing_key.0.clone()),
            card_company: Set(card.card_company.clone()),
            card_number: Set(card.card_number.clone()),
            created_at: Set(card.created_at),
        };
        payment_methods::Entity::insert(row)
            .on_conflict(
                OnConflict::column(Column::CustomerId)
                    .update_columns([
                        Column::CustomerKey,
                        Column::BillingKey,
                        Column::CardCompany,
                        Column::CardNumber,
                        Column::CreatedAt,
                    ])
                    .to_owned(),
            )
            .exec_without_returning(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(())
    }

    async fn forget_card(&self, customer_id: &str) -> Result<bool, RepoError> {
        let Some(row) = payment_methods::Entity::find_by_id(customer_id.to_owned())
            .one(&self.db)
            .await
            .map_err(repo_err)?
        else {
            return Ok(false);
        };
        row.delete(&self.db).await.map_err(repo_err)?;
        Ok(true)
    }
}
