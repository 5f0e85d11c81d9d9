//! Merchants' webhook endpoints over SeaORM (docs/spec.md §16): each change with its audit
//! row; an endpoint's secrets stored sealed, each with the id of the key that sealed it.

use async_trait::async_trait;
use chrono::Utc;
use sea_orm::ActiveValue::Set;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, TransactionTrait};

use super::audit::insert_audit;
use super::entities::webhook_endpoints;
use super::mapping::{corrupt, parse_opt};
use super::store::SeaOrmStore;
use super::{repo_err, statement};
use crate::application::ports::{AuditRecord, EndpointSecrets, RepoError, Sealed, WebhookEndpointStore};
use crate::domain::ids::{MerchantId, WebhookEndpointId};
use crate::domain::webhook::{DisabledReason, Endpoint, EventFilter};

fn filter_to_text(filter: &EventFilter) -> String {
    filter.names().join(",")
}

pub(super) fn endpoint_from_row(row: &webhook_endpoints::Model) -> Result<Endpoint, RepoError> {
    let types: Vec<String> = row.event_types.split(',').map(str::to_owned).collect();
    // Stored as the domain checked it: read back whatever it names.
    let filter = EventFilter::parse(&types, |_| true)
        .map_err(|_| corrupt("webhook_endpoints.event_types", &row.event_types))?;
    Ok(Endpoint {
        id: WebhookEndpointId::from_uuid(row.id),
        merchant_id: MerchantId::from_uuid(row.merchant_id),
        url: row.url.clone(),
        description: row.description.clone(),
        filter,
        disabled: parse_opt(
            "webhook_endpoints.disabled_reason",
            row.disabled_reason.as_deref(),
            DisabledReason::parse,
        )?,
        created_at: row.created_at,
        last_success_at: row.last_success_at,
        failing_since: row.failing_since,
    })
}

pub(super) fn secrets_from_row(row: &webhook_endpoints::Model) -> EndpointSecrets {
    let previous = match (&row.previous_secret_key_id, &row.previous_secret, row.previous_secret_until) {
        (Some(key_id), Some(data), Some(until)) => {
            Some((Sealed { key_id: key_id.clone(), data: data.clone() }, until))
        }
        _ => None,
    };
    EndpointSecrets {
        current: Sealed { key_id: row.secret_key_id.clone(), data: row.secret.clone() },
        previous,
    }
}

#[async_trait]
impl WebhookEndpointStore for SeaOrmStore {
    async fn insert_endpoint(
        &self,
        endpoint: &Endpoint,
        secrets: &EndpointSecrets,
        audit: &AuditRecord,
    ) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        webhook_endpoints::Entity::insert(webhook_endpoints::ActiveModel {
            id: Set(endpoint.id.as_uuid()),
            merchant_id: Set(endpoint.merchant_id.as_uuid()),
            url: Set(endpoint.url.clone()),
            description: Set(endpoint.description.clone()),
            event_types: Set(filter_to_text(&endpoint.filter)),
            disabled_reason: Set(endpoint.disabled.map(|r| r.as_str().to_owned())),
            secret_key_id: Set(secrets.current.key_id.clone()),
            secret: Set(secrets.current.data.clone()),
            previous_secret_key_id: Set(None),
            previous_secret: Set(None),
            previous_secret_until: Set(None),
            created_at: Set(endpoint.created_at),
            updated_at: Set(endpoint.created_at),
            last_success_at: Set(endpoint.last_success_at),
            failing_since: Set(endpoint.failing_since),
        })
        .exec_without_returning(&txn)
        .await
        .map_err(repo_err)?;
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)
    }

    async fn update_endpoint(
        &self,
        endpoint: &Endpoint,
        audit: Option<AuditRecord>,
    ) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        webhook_endpoints::Entity::update(webhook_endpoints::ActiveModel {
            id: Set(endpoint.id.as_uuid()),
            url: Set(endpoint.url.clone()),
            description: Set(endpoint.description.clone()),
            event_types: Set(filter_to_text(&endpoint.filter)),
            updated_at: Set(Utc::now()),
            ..Default::default()
        })
        .exec(&txn)
        .await
        .map_err(repo_err)?;
        insert_audit(&txn, audit.as_slice()).await?;
        txn.commit().await.map_err(repo_err)
    }

    async fn enable_endpoint(&self, id: WebhookEndpointId, audit: AuditRecord) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        webhook_endpoints::Entity::update(webhook_endpoints::ActiveModel {
            id: Set(id.as_uuid()),
            disabled_reason: Set(None),
            failing_since: Set(None),
            updated_at: Set(Utc::now()),
            ..Default::default()
        })
        .exec(&txn)
        .await
        .map_err(repo_err)?;
        insert_audit(&txn, std::slice::from_ref(&audit)).await?;
        txn.commit().await.map_err(repo_err)
    }

    async fn delete_endpoint(
        &self,
        merchant: MerchantId,
        id: WebhookEndpointId,
        audit: &AuditRecord,
    ) -> Result<bool, RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        let deleted = webhook_endpoints::Entity::delete_many()
            .filter(webhook_endpoints::Column::Id.eq(id.as_uuid()))
            .filter(webhook_endpoints::Column::MerchantId.eq(merchant.as_uuid()))
            .exec(&txn)
            .await
            .map_err(repo_err)?;
        if deleted.rows_affected == 0 {
            return Ok(false);
        }
        let backend = self.db.get_database_backend();
        for table in ["webhook_messages", "webhook_attempts"] {
            let sql = format!("DELETE FROM {table} WHERE endpoint_id = $1");
            sea_orm::ConnectionTrait::execute_raw(&txn, statement(backend, &sql, vec![id.as_uuid().into()]))
                .await
                .map_err(repo_err)?;
        }
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)?;
        Ok(true)
    }

    async fn endpoint(
        &self,
        merchant: MerchantId,
        id: WebhookEndpointId,
    ) -> Result<Option<(Endpoint, EndpointSecrets)>, RepoError> {
        let row = webhook_endpoints::Entity::find_by_id(id.as_uuid())
            .filter(webhook_endpoints::Column::MerchantId.eq(merchant.as_uuid()))
            .one(&self.db)
            .await
            .map_err(repo_err)?;
        row.map(|r| Ok((endpoint_from_row(&r)?, secrets_from_row(&r)))).transpose()
    }

    async fn endpoints(&self, merchant: MerchantId) -> Result<Vec<Endpoint>, RepoError> {
        let rows = webhook_endpoints::Entity::find()
            .filter(webhook_endpoints::Column::MerchantId.eq(merchant.as_uuid()))
            .order_by_asc(webhook_endpoints::Column::CreatedAt)
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        rows.iter().map(endpoint_from_row).collect()
    }

    async fn set_secrets(
        &self,
        id: WebhookEndpointId,
        secrets: &EndpointSecrets,
        audit: &AuditRecord,
    ) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        webhook_endpoints::Entity::update(webhook_endpoints::ActiveModel {
            id: Set(id.as_uuid()),
            secret_key_id: Set(secrets.current.key_id.clone()),
            secret: Set(secrets.current.data.clone()),
            previous_secret_key_id: Set(secrets.previous.as_ref().map(|(s, _)| s.key_id.clone())),
            previous_secret: Set(secrets.previous.as_ref().map(|(s, _)| s.data.clone())),
            previous_secret_until: Set(secrets.previous.as_ref().map(|(_, until)| *until)),
            updated_at: Set(Utc::now()),
            ..Default::default()
        })
        .exec(&txn)
        .await
        .map_err(repo_err)?;
        insert_audit(&txn, std::slice::from_ref(audit)).await?;
        txn.commit().await.map_err(repo_err)
    }
}
