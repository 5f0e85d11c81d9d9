//! Idempotency keys over SeaORM: reserve with an insert that a unique key guards, take
//! over an expired reservation with a conditional update.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::Set;
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter};

use super::entities::idempotency_keys::{self, Column};
use super::repo_err;
use crate::application::ports::{IdempotencyBegin, IdempotencyStore, RepoError, StoredResponse};
use crate::domain::ids::OrderId;

#[derive(Clone)]
pub struct SeaOrmIdempotencyStore {
    db: DatabaseConnection,
}

impl SeaOrmIdempotencyStore {
    pub fn new(db: DatabaseConnection) -> Self {
        SeaOrmIdempotencyStore { db }
    }
}

#[async_trait]
impl IdempotencyStore for SeaOrmIdempotencyStore {
    async fn begin(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        order_id: OrderId,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<IdempotencyBegin, RepoError> {
        let row = idempotency_keys::ActiveModel {
            scope: Set(scope.to_owned()),
            idempotency_key: Set(key.to_owned()),
            fingerprint: Set(fingerprint.to_owned()),
            order_id: Set(order_id.as_uuid()),
            response_status: Set(None),
            response_body: Set(None),
            locked_until: Set(Some(lease_until)),
            created_at: Set(now),
        };
        let inserted = idempotency_keys::Entity::insert(row)
            .on_conflict(OnConflict::columns([Column::Scope, Column::IdempotencyKey]).do_nothing().to_owned())
            .exec_without_returning(&self.db)
            .await
            .map_err(repo_err)?;
        if inserted == 1 {
            return Ok(IdempotencyBegin::Started { order_id });
        }
        // Taken: by whom, and how far did it get?
        loop {
            let Some(existing) = idempotency_keys::Entity::find_by_id((scope.to_owned(), key.to_owned()))
                .one(&self.db)
                .await
                .map_err(repo_err)?
            else {
                // Released with `forget` between our insert and this read: start afresh.
                return Box::pin(self.begin(scope, key, fingerprint, order_id, now, lease_until)).await;
            };
            // A key whose first request still runs is busy, whatever this request is.
            let finished = existing.response_status.is_some();
            if !finished && existing.locked_until.is_some_and(|until| until > now) {
                return Ok(IdempotencyBegin::InProgress);
            }
            if existing.fingerprint != fingerprint {
                return Ok(IdempotencyBegin::Mismatch);
            }
            if let (Some(status), Some(body)) = (existing.response_status, existing.response_body.clone()) {
                return Ok(IdempotencyBegin::Completed(StoredResponse { status: status as u16, body }));
            }
            // The holder died or released it: take over, conditional on the lease we saw.
            let taken = idempotency_keys::Entity::update_many()
                .col_expr(Column::LockedUntil, Expr::value(lease_until))
                .filter(Column::Scope.eq(scope))
                .filter(Column::IdempotencyKey.eq(key))
                .filter(match existing.locked_until {
                    Some(until) => Column::LockedUntil.eq(until),
                    None => Column::LockedUntil.is_null(),
                })
                .filter(Column::ResponseStatus.is_null())
                .exec(&self.db)
                .await
                .map_err(repo_err)?;
            if taken.rows_affected == 1 {
                return Ok(IdempotencyBegin::Started { order_id: OrderId::from_uuid(existing.order_id) });
            }
            // Someone else took it or finished it in between: look again.
        }
    }

    async fn complete(
        &self,
        scope: &str,
        key: &str,
        response: &StoredResponse,
        _now: DateTime<Utc>,
    ) -> Result<(), RepoError> {
        idempotency_keys::Entity::update_many()
            .col_expr(Column::ResponseStatus, Expr::value(i32::from(response.status)))
            .col_expr(Column::ResponseBody, Expr::value(response.body.clone()))
            .col_expr(Column::LockedUntil, Expr::value(Option::<DateTime<Utc>>::None))
            .filter(Column::Scope.eq(scope))
            .filter(Column::IdempotencyKey.eq(key))
            .exec(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(())
    }

    async fn release(&self, scope: &str, key: &str, forget: bool) -> Result<(), RepoError> {
        if forget {
            idempotency_keys::Entity::delete_many()
                .filter(Column::Scope.eq(scope))
                .filter(Column::IdempotencyKey.eq(key))
                .filter(Column::ResponseStatus.is_null())
                .exec(&self.db)
                .await
                .map_err(repo_err)?;
        } else {
            idempotency_keys::Entity::update_many()
                .col_expr(Column::LockedUntil, Expr::value(Option::<DateTime<Utc>>::None))
                .filter(Column::Scope.eq(scope))
                .filter(Column::IdempotencyKey.eq(key))
                .filter(Column::ResponseStatus.is_null())
                .exec(&self.db)
                .await
                .map_err(repo_err)?;
        }
        Ok(())
    }

    async fn purge(&self, before: DateTime<Utc>) -> Result<u64, RepoError> {
        let result = idempotency_keys::Entity::delete_many()
            .filter(Column::CreatedAt.lt(before))
            .exec(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(result.rows_affected)
    }
}
