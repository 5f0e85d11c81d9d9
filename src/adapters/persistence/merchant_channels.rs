//! A merchant's own channels over SeaORM: one sealed value per merchant, written with its
//! audit row; a rotation's rewrite is conditional on the value it read.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::Set;
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, TransactionTrait};

use super::audit::insert_audit;
use super::entities::merchant_channels;
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{AuditRecord, MerchantChannelStore, RepoError, Sealed};
use crate::domain::ids::MerchantId;

fn sealed(row: merchant_channels::Model) -> (MerchantId, Sealed) {
    (MerchantId::from_uuid(row.merchant_id), Sealed { key_id: row.key_id, data: row.sealed })
}

#[async_trait]
impl MerchantChannelStore for SeaOrmStore {
    async fn set_channels(
        &self,
        merchant: MerchantId,
        value: Option<Sealed>,
        at: DateTime<Utc>,
        audit: &AuditRecord,
    ) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        match value {
            None => {
                merchant_channels::Entity::delete_by_id(merchant.as_uuid())
                    .exec(&txn)
                    .await
                    .map_err(repo_err)?;
            }
            Some(value) => {
                merchant_channels::Entity::insert(merchant_channels::ActiveModel {
                    merchant_id: Set(merchant.as_uuid()),
                    key_id: Set(value.key_id),
                    sealed: Set(value.data),
                    updated_at: Set(at),
                })
                .on_conflict(
                    OnConflict::column(merchant_channels::Column::MerchantId)
                        .update_columns([
                            merchant_channels::Column::KeyId,
                            merchant_channels::Column::Sealed,
                            merchant_channels::Column::UpdatedAt,
                        ])
                        .to_owned(),
                )
                .exec_without_returning(&txn)
                .await
                .map_err(repo_err)?;
            }
        }
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)
    }

    async fn channels(&self, merchant: MerchantId) -> Result<Option<Sealed>, RepoError> {
        let row = merchant_channels::Entity::find_by_id(merchant.as_uuid())
            .one(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(row.map(|r| sealed(r).1))
    }

    async fn sealed_under_other_keys(&self, key_id: &str) -> Result<Vec<(MerchantId, Sealed)>, RepoError> {
        let rows = merchant_channels::Entity::find()
            .filter(merchant_channels::Column::KeyId.ne(key_id))
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(rows.into_iter().map(sealed).collect())
    }

    async fn reseal(
        &self,
        merchant: MerchantId,
        was: &Sealed,
        now: &Sealed,
        audit: &AuditRecord,
    ) -> Result<bool, RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        let updated = merchant_channels::Entity::update_many()
            .col_expr(merchant_channels::Column::KeyId, Expr::value(now.key_id.clone()))
            .col_expr(merchant_channels::Column::Sealed, Expr::value(now.data.clone()))
            .filter(merchant_channels::Column::MerchantId.eq(merchant.as_uuid()))
            .filter(merchant_channels::Column::Sealed.eq(was.data.clone()))
            .exec(&txn)
            .await
            .map_err(repo_err)?;
        if updated.rows_affected != 1 {
            return Ok(false);
        }
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)?;
        Ok(true)
    }
}
