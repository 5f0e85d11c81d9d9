//! Saved cards over SeaORM: one row per customer, replaced by a new card, deleted on request,
//! each change with its audit row in one transaction.

use async_trait::async_trait;
use sea_orm::ActiveValue::Set;
use sea_orm::sea_query::OnConflict;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, TransactionTrait};

use super::audit::insert_audit;
use super::entities::payment_methods::{self, Column};
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{AuditRecord, BillingKey, PaymentMethodRepository, RepoError, SavedCard};

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

    async fn save_card(&self, card: &SavedCard, audit: &AuditRecord) -> Result<(), RepoError> {
        let row = payment_methods::ActiveModel {
            customer_id: Set(card.customer_id.clone()),
            customer_key: Set(card.customer_key.clone()),
            billing_key: Set(card.billing_key.0.clone()),
            card_company: Set(card.card_company.clone()),
            card_number: Set(card.card_number.clone()),
            created_at: Set(card.created_at),
        };
        let txn = self.db.begin().await.map_err(repo_err)?;
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
            .exec_without_returning(&txn)
            .await
            .map_err(repo_err)?;
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)
    }

    async fn forget_card(&self, customer_id: &str, audit: &AuditRecord) -> Result<bool, RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        let deleted = payment_methods::Entity::delete_many()
            .filter(Column::CustomerId.eq(customer_id))
            .exec(&txn)
            .await
            .map_err(repo_err)?;
        if deleted.rows_affected == 0 {
            return Ok(false);
        }
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)?;
        Ok(true)
    }
}
