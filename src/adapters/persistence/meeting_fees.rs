//! [`MeetingFees`] read from the platform's own database (`meetings.fee_source = sql`,
//! docs/spec.md §12): MySQL/MariaDB or PostgreSQL, through `meetings.fee_sql.url`, one
//! `meetings.fee_sql.query` in a read-only transaction per look-up: its first column is the
//! fee, an optional second the meeting's title, and it finds only a meeting the platform
//! still sells (the default reads the platform's own deleted flag, status and capacity). The pool connects when
//! first used, so the service starts while that database is down; a look-up then fails
//! `Unavailable` (the registration is retried, then dead-lettered).

use std::time::Duration;

use async_trait::async_trait;
use sea_orm::{
    AccessMode, ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
    TransactionTrait,
};

use crate::application::ports::{Cause, MeetingFee, MeetingFees, RepoError};

pub struct SqlMeetingFees {
    db: DatabaseConnection,
    query: String,
}

impl SqlMeetingFees {
    /// A pool of at most 4 connections to `url`, opened when first used.
    ///
    /// # Errors
    /// The URL is not one sea-orm can speak.
    pub async fn new(url: &str, query: &str) -> Result<Self, RepoError> {
        // `mariadb://` is MySQL's protocol.
        let url =
            url.strip_prefix("mariadb://").map_or_else(|| url.to_owned(), |rest| format!("mysql://{rest}"));
        let mut options = ConnectOptions::new(url);
        options
            .max_connections(4)
            .min_connections(0)
            .connect_timeout(Duration::from_secs(3))
            .acquire_timeout(Duration::from_secs(3))
            .connect_lazy(true)
            .sqlx_logging(false);
        let db = Database::connect(options)
            .await
            .map_err(|e| RepoError::Unavailable(Cause::context("meetings.fee_sql.url", e)))?;
        // PostgreSQL numbers its parameters; the query is written with MySQL's `?`.
        let query = match db.get_database_backend() {
            DbBackend::Postgres => query.replacen('?', "$1", 1),
            _ => query.to_owned(),
        };
        Ok(SqlMeetingFees { db, query })
    }
}

fn unavailable(err: sea_orm::DbErr) -> RepoError {
    RepoError::Unavailable(Cause::context("the meetings' database", err))
}

#[async_trait]
impl MeetingFees for SqlMeetingFees {
    async fn meeting(&self, meeting_id: &str) -> Result<Option<MeetingFee>, RepoError> {
        // The platform's ids are longs: any other id names no meeting of it.
        let Ok(id) = meeting_id.parse::<i64>() else { return Ok(None) };
        let backend = self.db.get_database_backend();
        let tx = self.db.begin_with_config(None, Some(AccessMode::ReadOnly)).await.map_err(unavailable)?;
        let row = tx
            .query_one_raw(Statement::from_sql_and_values(backend, &self.query, [id.into()]))
            .await
            .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        let Some(row) = row else { return Ok(None) };
        // `participation_fee int` on the platform; a BIGINT or a NUMERIC column read alike.
        let fee = row
            .try_get_by_index::<i64>(0)
            .or_else(|_| row.try_get_by_index::<i32>(0).map(i64::from))
            .map_err(|e| {
            RepoError::corrupt(format!("meetings.fee_sql.query's first column is not a whole number: {e}"))
        })?;
        // The title, where the query reads one as its second column.
        let title = row.try_get_by_index::<Option<String>>(1).ok().flatten();
        Ok(Some(MeetingFee { fee, title }))
    }
}
