//! Audit rows, inserted inside whichever transaction records what they describe.

use sea_orm::ActiveValue::Set;
use sea_orm::{ConnectionTrait, EntityTrait};

use super::entities::audit_log;
use super::repo_err;
use crate::application::ports::{AuditRecord, RepoError};

/// Inserts `audit` on `conn` (a transaction, so the rows commit with the change).
pub(super) async fn insert_audit<C: ConnectionTrait>(
    conn: &C,
    audit: &[AuditRecord],
) -> Result<(), RepoError> {
    let rows = audit.iter().map(|a| audit_log::ActiveModel {
        action: Set(a.action.as_str().to_owned()),
        entity_type: Set(a.entity_type.clone()),
        entity_id: Set(a.entity_id.clone()),
        actor: Set(a.actor.clone()),
        detail: Set(a.detail.clone()),
        created_at: Set(a.created_at),
        ..Default::default()
    });
    audit_log::Entity::insert_many(rows).exec_without_returning(conn).await.map_err(repo_err)?;
    Ok(())
}
