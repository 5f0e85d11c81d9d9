//! What a saga step's row records as a fact beside its text (`orchestration_steps.fact`,
//! `StepFact`): readers such as the commerce dialect's flow read the fact, never the text.
//! Rows written before are given the fact their text said: a failed notification's policy
//! (its text began with it) and the notification status a failed order waited on (its
//! compensation's text was `notification <status>`).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// `FailurePolicy` and `NotificationStatus` as the domain spells them (this crate does not
/// see the domain).
const POLICIES: [&str; 3] = ["AUTO_RETRY", "MANUAL_INTERVENTION", "IGNORE"];
const STATUSES: [&str; 7] =
    ["PENDING", "SENT", "RETRY_SCHEDULED", "PROCESSING", "MANUAL_INTERVENTION_REQUIRED", "IGNORED", "FAILED"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Alias::new("orchestration_steps"))
                .add_column(string_len_null(Alias::new("fact"), 64))
                .to_owned(),
        )
        .await?;
        let db = m.get_connection();
        for policy in POLICIES {
            db.execute_unprepared(&format!(
                "UPDATE orchestration_steps SET fact = 'NOTIFICATION_FAILED {policy}' \
                 WHERE step = 'NOTIFICATION' AND status = 'FAILED' AND detail LIKE '{policy} %'"
            ))
            .await?;
        }
        for status in STATUSES {
            db.execute_unprepared(&format!(
                "UPDATE orchestration_steps SET fact = 'AWAITING_NOTIFICATION {status}' \
                 WHERE step = 'COMPENSATION' AND status = 'READY' AND detail = 'notification {status}'"
            ))
            .await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Alias::new("orchestration_steps"))
                .drop_column(Alias::new("fact"))
                .to_owned(),
        )
        .await
    }
}
