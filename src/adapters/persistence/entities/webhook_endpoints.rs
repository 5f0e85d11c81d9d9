//! Entity of table `webhook_endpoints` (docs/spec.md §16): its secrets sealed.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoints")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub merchant_id: Uuid,
    pub url: String,
    pub description: String,
    /// `*`, or the event types, comma-separated.
    pub event_types: String,
    pub disabled_reason: Option<String>,
    /// The key that sealed the current secret.
    pub secret_key_id: String,
    pub secret: String,
    pub previous_secret_key_id: Option<String>,
    pub previous_secret: Option<String>,
    pub previous_secret_until: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub last_success_at: Option<DateTimeUtc>,
    pub failing_since: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
