//! The raw shape's root, as the sources give it (each section's own shape is in its module),
//! and `DEFAULTS`: every fixed default, in one place.

use serde::Deserialize;

use super::auth::RawAuth;
use super::broker::RawBroker;
use super::channels::{RawNotification, RawSettlement};
use super::database::RawDatabase;
use super::http::RawHttp;
use super::meetings::RawMeetings;
use super::outbox::RawOutbox;
use super::payment::RawPayment;
use super::retention::{RawAudit, RawIdempotency};
use super::telemetry::{RawLog, RawTelemetry};
use super::worker::{RawSaga, RawWorker};

// ---- raw shape, as the sources give it ------------------------------------------------
//
// Every fixed default is in `DEFAULTS` below, the one place defaults live: a field is an
// `Option` only where being unset means something (a default that depends on another
// key, or a value that is simply absent).

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    pub(super) http: RawHttp,
    pub(super) database: RawDatabase,
    pub(super) broker: RawBroker,
    pub(super) outbox: RawOutbox,
    pub(super) notification: RawNotification,
    pub(super) settlement: RawSettlement,
    pub(super) payment: RawPayment,
    pub(super) worker: RawWorker,
    pub(super) saga: RawSaga,
    pub(super) auth: RawAuth,
    #[serde(default)]
    pub(super) log: RawLog,
    pub(super) audit: RawAudit,
    pub(super) idempotency: RawIdempotency,
    pub(super) telemetry: RawTelemetry,
    pub(super) meetings: RawMeetings,
    #[serde(default)]
    pub(super) secrets: super::secrets::RawSecrets,
    pub(super) webhooks: super::webhooks::RawWebhooks,
}

/// Every fixed default, in the shape of a configuration file (docs/configuration.md lists
/// them with what each means).
pub(super) const DEFAULTS: &str = r#"
[http]
bind = "127.0.0.1:8080"

[http.dialects.commerce]
demo_token = false
token_validity = "1h"
issuer = "commerce-orchestration-backend"
hold_expiry = "24h"
merchant = "DEFAULT"

[database]
url = "sqlite://data/app.db?mode=rwc"
max_connections = 16
connect_timeout = "3s"
lock_timeout = "2s"
statement_timeout = "30s"

[broker]
queue_type = "classic"
exchange = "commerce.events"
confirm_timeout = "30s"
meeting_exchange = "meeting.events"
dead_letter_exchange = "payment.dlx"
register_queue = "payment.participant-register"
cancel_queue = "payment.participant-cancel"
meeting_deleted_queue = "payment.meeting-deleted"
prefetch = 32
consumer_retries = 3
consumer_retry_backoff = "1s"
delivery_limit = 5
contract = "native"

[broker.cloudevents]
mode = "binary"
source = "/commerce-orchestrator"
type_prefix = "io.commerce."

[broker.kafka]
topic = "commerce.events"
client_id = "commerce-orchestrator"
inbound = ["meeting.events"]
group = "commerce-orchestrator"
partitions = 16
connect_timeout = "5s"

[outbox]
batch_size = 256
poll_interval = "10s"
retry_poll_interval = "30s"
trickle_wait = "1ms"
max_retries = 3
backoff_base = "10s"
backoff_cap = "300s"
processing_timeout = "5m"
recovery_interval = "1m"
cleanup_at = "03:00"
retention_published = "30d"
retention_dead_letter = "90d"
publish_window = 256
lanes = 16
max_connections = 4
cleanup_batch = 1000

[notification.webhook]
timeout = "10s"

[notification.email]
locale = "ko"
timeout = "10s"

[settlement.webhook]
timeout = "10s"

[settlement.retry]
max_attempts = 5
backoff_base = "60s"
interval = "30s"
batch = 100

[notification.retry]
interval = "30s"
backoff_base = "60s"
max_attempts = 5
lease = "5m"
batch = 100

[payment]
retries = 2
retry_backoff = "200ms"

[payment.reconciliation]
interval = "30s"
max_attempts = 10

[payment.external]
timeout = "5s"

[payment.toss]
base_url = "https://api.tosspayments.com"
timeout = "5s"
confirm_window = "10m"
timezone = "Asia/Seoul"
ledger_at = "04:00"
ledger_timeout = "60s"
settlement_grace = "7d"
ledger_max_findings = 50000

[worker]
stuck_after = "60s"

[worker.http]
bind = "127.0.0.1:8081"

[saga]
lease = "60s"
recovery_max_attempts = 5

[auth]
roles_claim = "roles"
jwks_refresh_interval = "1m"

[audit]
retention = "365d"

[idempotency]
retention = "24h"

[webhooks]
allow_http = false
allow_private_networks = false
rotation_overlap = "24h"
schedule = "5s,5m,30m,2h,5h,10h,10h"
timeout = "15s"
max_in_flight = 8
workers = 64
max_rate = 0
disable_after = "5d"
retention = "30d"

[meetings]
fee_source = "message"
merchant = "DEFAULT"
currency = "KRW"
timezone = "Asia/Seoul"

[meetings.fee_sql]
query = "SELECT participation_fee, title FROM meetings WHERE id = ? AND is_deleted = 0 AND status = 'IN_PROGRESS' AND current_participants_count <= max_participants_count"

[telemetry]
service_name = "orchestrator"

[log]
"#;
