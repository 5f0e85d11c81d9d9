//! Lanes (docs/spec.md §6): `outbox_events.lane` (the aggregate's lane, written at insert), the lane
//! leases `outbox_lanes` (one row per lane: its owner, lease end and fencing epoch) and the
//! relays' heartbeats `outbox_relays` that fair sharing counts.
//!
//! Existing rows get lane 0. Their order is kept all the same: a row is claimed only when no
//! earlier row of its aggregate is undelivered, in whatever lane that row is.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Alias::new("outbox_events"))
                .add_column(small_integer(Alias::new("lane")).default(0))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(Alias::new("outbox_lanes"))
                .col(small_integer(Alias::new("lane")).primary_key())
                .col(string_len_null(Alias::new("owner"), 200))
                .col(timestamp_with_time_zone_null(Alias::new("lease_until")))
                .col(big_integer(Alias::new("epoch")).default(0))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(Alias::new("outbox_relays"))
                .col(string_len(Alias::new("worker"), 200).primary_key())
                .col(timestamp_with_time_zone(Alias::new("alive_until")))
                .to_owned(),
        )
        .await?;
        // The claim scans due rows by lane.
        m.get_connection()
            .execute_unprepared(
                "CREATE INDEX idx_outbox_claimable_lane ON outbox_events (lane, id) \
                 WHERE status IN ('READY', 'RETRY_WAIT')",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection().execute_unprepared("DROP INDEX idx_outbox_claimable_lane").await?;
        m.drop_table(Table::drop().table(Alias::new("outbox_relays")).to_owned()).await?;
        m.drop_table(Table::drop().table(Alias::new("outbox_lanes")).to_owned()).await?;
        m.alter_table(
            Table::alter().table(Alias::new("outbox_events")).drop_column(Alias::new("lane")).to_owned(),
        )
        .await?;
        Ok(())
    }
}
