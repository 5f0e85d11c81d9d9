//! Merchants, stores, memberships and API keys over SeaORM (docs/spec.md §15): each change in
//! one transaction with its audit row; a code another row holds is the unique index's
//! `Conflict` (also when two inserts race). A key's row holds its secret's SHA-256 in hex,
//! never the key.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::Set;
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ColumnTrait, EntityTrait, ExprTrait, FromQueryResult, QueryFilter, QueryOrder, TransactionTrait,
};

use super::audit::insert_audit;
use super::entities::{merchant_api_keys, merchant_members, merchants, stores};
use super::mapping::{corrupt, parse};
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{
    AuditRecord, MerchantAccessStore, MerchantDirectory, MerchantReports, RepoError, ReportLine,
};
use crate::domain::ids::{ApiKeyId, MerchantId, StoreId};
use crate::domain::merchant::{
    ApiKey, Code, KeyRole, MemberRole, Membership, Merchant, MerchantStatus, Store, StoreStatus,
};
use crate::domain::payment::PaymentStatus;

fn code(column: &str, value: &str) -> Result<Code, RepoError> {
    Code::parse(column, value).map_err(|_| corrupt(column, value))
}

fn merchant_from_row(row: merchants::Model) -> Result<Merchant, RepoError> {
    Ok(Merchant {
        id: MerchantId::from_uuid(row.id),
        code: code("merchants.code", &row.code)?,
        name: row.name,
        status: parse("merchants.status", &row.status, MerchantStatus::parse)?,
        timezone: row.timezone,
        created_at: row.created_at,
        updated_at: row.updated_at,
        version: row.version,
    })
}

fn store_from_row(row: stores::Model) -> Result<Store, RepoError> {
    Ok(Store {
        id: StoreId::from_uuid(row.id),
        merchant_id: MerchantId::from_uuid(row.merchant_id),
        code: code("stores.code", &row.code)?,
        name: row.name,
        status: parse("stores.status", &row.status, StoreStatus::parse)?,
        timezone: row.timezone,
        created_at: row.created_at,
    })
}

fn member_from_row(row: merchant_members::Model) -> Result<Membership, RepoError> {
    Ok(Membership {
        merchant_id: MerchantId::from_uuid(row.merchant_id),
        subject: row.subject,
        role: parse("merchant_members.role", &row.role, MemberRole::parse)?,
        created_at: row.created_at,
    })
}

fn key_from_row(row: merchant_api_keys::Model) -> Result<(ApiKey, [u8; 32]), RepoError> {
    let hash =
        unhex(&row.secret_hash).ok_or_else(|| corrupt("merchant_api_keys.secret_hash", "(not shown)"))?;
    let key = ApiKey {
        id: ApiKeyId::from_uuid(row.id),
        merchant_id: MerchantId::from_uuid(row.merchant_id),
        name: row.name,
        role: parse("merchant_api_keys.role", &row.role, KeyRole::parse)?,
        prefix: row.prefix,
        created_at: row.created_at,
        expires_at: row.expires_at,
        last_used_at: row.last_used_at,
        revoked_at: row.revoked_at,
    };
    Ok((key, hash))
}

fn hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

#[async_trait]
impl MerchantDirectory for SeaOrmStore {
    async fn insert_merchant(&self, merchant: &Merchant, audit: &AuditRecord) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        merchants::Entity::insert(merchants::ActiveModel {
            id: Set(merchant.id.as_uuid()),
            code: Set(merchant.code.to_string()),
            name: Set(merchant.name.clone()),
            status: Set(merchant.status.as_str().to_owned()),
            timezone: Set(merchant.timezone.clone()),
            created_at: Set(merchant.created_at),
            updated_at: Set(merchant.updated_at),
            version: Set(merchant.version),
        })
        .exec_without_returning(&txn)
        .await
        .map_err(repo_err)?;
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)
    }

    async fn update_merchant(&self, merchant: &Merchant, audit: &AuditRecord) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        let updated = merchants::Entity::update_many()
            .col_expr(merchants::Column::Status, Expr::value(merchant.status.as_str()))
            .col_expr(merchants::Column::Name, Expr::value(merchant.name.clone()))
            .col_expr(merchants::Column::UpdatedAt, Expr::value(merchant.updated_at))
            .col_expr(merchants::Column::Version, Expr::value(merchant.version + 1))
            .filter(merchants::Column::Id.eq(merchant.id.as_uuid()))
            .filter(merchants::Column::Version.eq(merchant.version))
            .exec(&txn)
            .await
            .map_err(repo_err)?;
        if updated.rows_affected == 0 {
            return Err(RepoError::Conflict);
        }
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)
    }

    async fn merchant(&self, id: MerchantId) -> Result<Option<Merchant>, RepoError> {
        let row = merchants::Entity::find_by_id(id.as_uuid()).one(&self.db).await.map_err(repo_err)?;
        row.map(merchant_from_row).transpose()
    }

    async fn merchants(&self) -> Result<Vec<Merchant>, RepoError> {
        let rows = merchants::Entity::find()
            .order_by_asc(merchants::Column::Code)
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        rows.into_iter().map(merchant_from_row).collect()
    }

    async fn merchants_of(&self, subject: &str) -> Result<Vec<Merchant>, RepoError> {
        let rows = merchants::Entity::find()
            .filter(
                merchants::Column::Id.in_subquery(
                    sea_orm::sea_query::Query::select()
                        .column(merchant_members::Column::MerchantId)
                        .from(merchant_members::Entity)
                        .and_where(merchant_members::Column::Subject.eq(subject))
                        .to_owned(),
                ),
            )
            .order_by_asc(merchants::Column::Code)
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        rows.into_iter().map(merchant_from_row).collect()
    }

    async fn insert_store(&self, store: &Store, audit: &AuditRecord) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        stores::Entity::insert(stores::ActiveModel {
            id: Set(store.id.as_uuid()),
            merchant_id: Set(store.merchant_id.as_uuid()),
            code: Set(store.code.to_string()),
            name: Set(store.name.clone()),
            status: Set(store.status.as_str().to_owned()),
            timezone: Set(store.timezone.clone()),
            created_at: Set(store.created_at),
        })
        .exec_without_returning(&txn)
        .await
        .map_err(repo_err)?;
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)
    }

    async fn stores(&self, merchant: MerchantId) -> Result<Vec<Store>, RepoError> {
        let rows = stores::Entity::find()
            .filter(stores::Column::MerchantId.eq(merchant.as_uuid()))
            .order_by_asc(stores::Column::Code)
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        rows.into_iter().map(store_from_row).collect()
    }

    async fn store(&self, merchant: MerchantId, id: StoreId) -> Result<Option<Store>, RepoError> {
        let row = stores::Entity::find_by_id(id.as_uuid())
            .filter(stores::Column::MerchantId.eq(merchant.as_uuid()))
            .one(&self.db)
            .await
            .map_err(repo_err)?;
        row.map(store_from_row).transpose()
    }
}

#[async_trait]
impl MerchantAccessStore for SeaOrmStore {
    async fn set_member(&self, member: &Membership, audit: &AuditRecord) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        merchant_members::Entity::insert(merchant_members::ActiveModel {
            merchant_id: Set(member.merchant_id.as_uuid()),
            subject: Set(member.subject.clone()),
            role: Set(member.role.as_str().to_owned()),
            created_at: Set(member.created_at),
        })
        .on_conflict(
            OnConflict::columns([merchant_members::Column::MerchantId, merchant_members::Column::Subject])
                .update_column(merchant_members::Column::Role)
                .to_owned(),
        )
        .exec_without_returning(&txn)
        .await
        .map_err(repo_err)?;
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)
    }

    async fn remove_member(
        &self,
        merchant: MerchantId,
        subject: &str,
        audit: &AuditRecord,
    ) -> Result<bool, RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        let removed = merchant_members::Entity::delete_many()
            .filter(merchant_members::Column::MerchantId.eq(merchant.as_uuid()))
            .filter(merchant_members::Column::Subject.eq(subject))
            .exec(&txn)
            .await
            .map_err(repo_err)?;
        if removed.rows_affected == 0 {
            return Ok(false);
        }
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)?;
        Ok(true)
    }

    async fn member(&self, merchant: MerchantId, subject: &str) -> Result<Option<Membership>, RepoError> {
        let row = merchant_members::Entity::find_by_id((merchant.as_uuid(), subject.to_owned()))
            .one(&self.db)
            .await
            .map_err(repo_err)?;
        row.map(member_from_row).transpose()
    }

    async fn members(&self, merchant: MerchantId) -> Result<Vec<Membership>, RepoError> {
        let rows = merchant_members::Entity::find()
            .filter(merchant_members::Column::MerchantId.eq(merchant.as_uuid()))
            .order_by_asc(merchant_members::Column::Subject)
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        rows.into_iter().map(member_from_row).collect()
    }

    async fn insert_key(
        &self,
        key: &ApiKey,
        secret_hash: &[u8; 32],
        audit: &AuditRecord,
    ) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        merchant_api_keys::Entity::insert(merchant_api_keys::ActiveModel {
            id: Set(key.id.as_uuid()),
            merchant_id: Set(key.merchant_id.as_uuid()),
            name: Set(key.name.clone()),
            role: Set(key.role.as_str().to_owned()),
            prefix: Set(key.prefix.clone()),
            secret_hash: Set(hex(secret_hash)),
            created_at: Set(key.created_at),
            expires_at: Set(key.expires_at),
            last_used_at: Set(key.last_used_at),
            revoked_at: Set(key.revoked_at),
        })
        .exec_without_returning(&txn)
        .await
        .map_err(repo_err)?;
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)
    }

    async fn keys(&self, merchant: MerchantId, id: Option<ApiKeyId>) -> Result<Vec<ApiKey>, RepoError> {
        let mut query = merchant_api_keys::Entity::find()
            .filter(merchant_api_keys::Column::MerchantId.eq(merchant.as_uuid()));
        if let Some(id) = id {
            query = query.filter(merchant_api_keys::Column::Id.eq(id.as_uuid()));
        }
        let rows =
            query.order_by_desc(merchant_api_keys::Column::Id).all(&self.db).await.map_err(repo_err)?;
        rows.into_iter().map(|row| key_from_row(row).map(|(key, _)| key)).collect()
    }

    async fn key_by_prefix(&self, prefix: &str) -> Result<Option<(ApiKey, [u8; 32])>, RepoError> {
        let row = merchant_api_keys::Entity::find()
            .filter(merchant_api_keys::Column::Prefix.eq(prefix))
            .one(&self.db)
            .await
            .map_err(repo_err)?;
        row.map(key_from_row).transpose()
    }

    async fn update_key(
        &self,
        key: &ApiKey,
        used_at: Option<DateTime<Utc>>,
        audit: &[AuditRecord],
    ) -> Result<(), RepoError> {
        let by_id = merchant_api_keys::Column::Id.eq(key.id.as_uuid());
        if let Some(used_at) = used_at {
            // Only forward: two requests racing to record a use write one time, the later.
            let last = merchant_api_keys::Column::LastUsedAt;
            merchant_api_keys::Entity::update_many()
                .col_expr(last, Expr::value(used_at))
                .filter(by_id)
                .filter(last.is_null().or(last.lt(used_at)))
                .exec(&self.db)
                .await
                .map_err(repo_err)?;
            return Ok(());
        }
        let txn = self.db.begin().await.map_err(repo_err)?;
        merchant_api_keys::Entity::update_many()
            .col_expr(merchant_api_keys::Column::RevokedAt, Expr::value(key.revoked_at))
            .filter(by_id)
            .filter(merchant_api_keys::Column::RevokedAt.is_null())
            .exec(&txn)
            .await
            .map_err(repo_err)?;
        insert_audit(&txn, audit).await?;
        txn.commit().await.map_err(repo_err)
    }
}

/// One line of the daily report as the database sums it.
#[derive(sea_orm::FromQueryResult)]
struct ReportRow {
    store_id: Option<uuid::Uuid>,
    currency: String,
    orders: i64,
    gross: i64,
    refunds: i64,
    fees: Option<i64>,
    payouts: Option<i64>,
}

#[async_trait]
impl MerchantReports for SeaOrmStore {
    async fn daily(
        &self,
        merchant: MerchantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<ReportLine>, RepoError> {
        let backend = self.db.get_database_backend();
        // The statuses whose money was taken, as the domain spells them.
        let captured: Vec<String> = PaymentStatus::ALL
            .iter()
            .filter(|s| s.is_captured())
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        let sql = format!(
            "SELECT o.store_id AS store_id, o.currency AS currency, COUNT(*) AS orders, \
               CAST(COALESCE(SUM(p.amount), 0) AS BIGINT) AS gross, \
               CAST(COALESCE(SUM(p.refunded_amount), 0) AS BIGINT) AS refunds, \
               CAST(SUM(pay.fee) AS BIGINT) AS fees, CAST(SUM(pay.pay_out_amount) AS BIGINT) AS payouts \
             FROM orders o \
             LEFT JOIN payments p ON p.order_id = o.id AND p.status IN ({}) \
             LEFT JOIN (SELECT payment_id, SUM(fee) AS fee, SUM(pay_out_amount) AS pay_out_amount \
                        FROM payouts GROUP BY payment_id) pay ON pay.payment_id = p.id \
             WHERE o.merchant_id = $1 AND o.created_at >= $2 AND o.created_at < $3 \
             GROUP BY o.store_id, o.currency ORDER BY o.currency",
            captured.join(", ")
        );
        let sql = if backend == sea_orm::DatabaseBackend::Sqlite { sql.replace('$', "?") } else { sql };
        let values: Vec<sea_orm::Value> = vec![merchant.as_uuid().into(), from.into(), to.into()];
        let rows =
            ReportRow::find_by_statement(sea_orm::Statement::from_sql_and_values(backend, sql, values))
                .all(&self.db)
                .await
                .map_err(repo_err)?;
        Ok(rows
            .into_iter()
            .map(|r| ReportLine {
                store_id: r.store_id.map(StoreId::from_uuid),
                currency: r.currency,
                orders: r.orders,
                gross: r.gross,
                refunds: r.refunds,
                fees: r.fees,
                payouts: r.payouts,
            })
            .collect())
    }
}
