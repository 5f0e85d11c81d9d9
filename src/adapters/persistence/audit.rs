//! Audit rows, inserted inside whichever transaction records what they describe, and their
//! retention.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::Set;
use sea_orm::{ConnectionTrait, DbBackend, EntityTrait, QueryTrait, Statement};

use super::entities::audit_log;
use super::repo_err;
use super::store::SeaOrmStore;
use crate::application::ports::{AuditLog, AuditRecord, RepoError};

/// Inserts `audit` on `conn` (a transaction, so the rows commit with the change).
pub(super) async fn insert_audit<C: ConnectionTrait>(
    conn: &C,
    audit: &[AuditRecord],
) -> Result<(), RepoError> {
    for statement in audit_inserts(audit, conn.get_database_backend()) {
        conn.execute_raw(statement).await.map_err(repo_err)?;
    }
    Ok(())
}

/// The statements inserting `audit`. Six values a row: 1 000 rows a statement stay far
/// under PostgreSQL's 65 535 parameters and SQLite's 32 766 (a ledger day audits one row per
/// finding).
pub(super) fn audit_inserts(audit: &[AuditRecord], backend: DbBackend) -> Vec<Statement> {
    audit
        .chunks(1000)
        .map(|chunk| {
            let rows = chunk.iter().map(|a| audit_log::ActiveModel {
                action: Set(a.action.as_str().to_owned()),
                entity_type: Set(a.entity_type.clone()),
                entity_id: Set(a.entity_id.clone()),
                actor: Set(a.actor.clone()),
                detail: Set(a.detail.clone()),
                created_at: Set(a.created_at),
                ..Default::default()
            });
            audit_log::Entity::insert_many(rows).build(backend)
        })
        .collect()
}

#[async_trait]
impl AuditLog for SeaOrmStore {
    async fn purge_audit(&self, before: DateTime<Utc>, limit: u32) -> Result<u64, RepoError> {
        let backend = self.db.get_database_backend();
        let sql = "DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE created_at < $1 \
                   ORDER BY id LIMIT $2)";
        let sql =
            if backend == sea_orm::DatabaseBackend::Sqlite { sql.replace('$', "?") } else { sql.to_owned() };
        let values: Vec<sea_orm::Value> = vec![before.into(), i64::from(limit).into()];
        let result = self
            .db
            .execute_raw(sea_orm::Statement::from_sql_and_values(backend, sql, values))
            .await
            .map_err(repo_err)?;
        Ok(result.rows_affected())
    }
}
