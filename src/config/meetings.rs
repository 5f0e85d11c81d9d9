//! `meetings.*`: what the meetup platform's messages leave to us (docs/spec.md §12) — where a
//! registration's fee comes from, its currency and the platform's zone.

use serde::Deserialize;

use super::{BrokerSettings, ConfigError, invalid};
use crate::adapters::Secret;
use crate::adapters::messaging::contract::ContractName;
use crate::adapters::messaging::contract::topology::QueueType;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMeetings {
    pub(super) fee_source: String,
    pub(super) fee_sql: RawFeeSql,
    pub(super) currency: String,
    pub(super) timezone: String,
    pub(super) merchant: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFeeSql {
    pub(super) url: Option<Secret>,
    pub(super) query: String,
}

/// Where a registration's fee comes from (`meetings.fee_source`, docs/spec.md §12).
#[derive(Debug, Clone)]
pub enum FeeSource {
    /// The message's `amount` (the native contract's registrations carry it).
    Message,
    /// Read from the meeting's record in the platform's database, read-only.
    Sql { url: Secret, query: String },
}

/// `meetings.*`: what the meetup platform's messages leave to us (docs/spec.md §12).
#[derive(Debug, Clone)]
pub struct MeetingsSettings {
    pub fee_source: FeeSource,
    /// The currency of a fee read from the platform (`meetings.currency`).
    pub currency: String,
    /// The zone of the platform's local times (`meetings.timezone`, IANA).
    pub timezone: chrono_tz::Tz,
    /// The code of the merchant whose orders registrations are (`meetings.merchant`,
    /// docs/spec.md §15): `DEFAULT` unless set; found when the service starts.
    pub merchant: String,
}

pub(super) fn resolve_meetings(
    raw: RawMeetings,
    broker: &BrokerSettings,
) -> Result<MeetingsSettings, ConfigError> {
    let momo = broker.contract == ContractName::Momo;
    let fee_source = match raw.fee_source.as_str() {
        "message" if momo => {
            return Err(invalid(
                "meetings.fee_source",
                "must be sql with broker.contract = momo (its registrations carry no amount)",
            ));
        }
        "message" => FeeSource::Message,
        "sql" => {
            let url = raw.fee_sql.url.ok_or_else(|| {
                invalid("meetings.fee_sql.url", "is required when meetings.fee_source = sql")
            })?;
            let scheme = url.expose().split(':').next().unwrap_or_default();
            if !["mysql", "mariadb", "postgres", "postgresql"].contains(&scheme) {
                return Err(invalid(
                    "meetings.fee_sql.url",
                    "expected mysql://..., mariadb://... or postgres://...",
                ));
            }
            let query = raw.fee_sql.query.trim().to_owned();
            if query.matches('?').count() != 1 {
                return Err(invalid("meetings.fee_sql.query", "must take the meeting's id as its one `?`"));
            }
            FeeSource::Sql { url, query }
        }
        other => return Err(invalid("meetings.fee_source", format!("`{other}` is not message or sql"))),
    };
    if raw.currency.parse::<crate::domain::money::Currency>().is_err() {
        return Err(invalid("meetings.currency", format!("`{}` is not a currency we know", raw.currency)));
    }
    let timezone = raw
        .timezone
        .parse::<chrono_tz::Tz>()
        .map_err(|_| invalid("meetings.timezone", format!("`{}` is not an IANA time zone", raw.timezone)))?;
    if momo && broker.queue_type == QueueType::Quorum {
        return Err(invalid(
            "broker.queue_type",
            "quorum is refused with broker.contract = momo (its queues are the platform's, classic)",
        ));
    }
    let merchant = super::merchant_code("meetings.merchant", &raw.merchant)?;
    Ok(MeetingsSettings { fee_source, currency: raw.currency, timezone, merchant })
}
