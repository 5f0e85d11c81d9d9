//! Each section resolved from its raw shape into its settings, every invalid value reported
//! with the key that holds it.

use std::net::SocketAddr;
use std::time::Duration;

use chrono::NaiveTime;

use super::{
    BrokerKind, BrokerSettings, CommerceDialectSettings, ConfigError, DEV_SECRET, DatabaseSettings,
    FeeSource, IdempotencySettings, KafkaSettings, LogSettings, MeetingsSettings, MomoDialectSettings,
    NotificationChannel, NotificationSettings, OutboxSettings, PaymentSettings, ProviderKind, RawAuth,
    RawBroker, RawCommerceDialect, RawDatabase, RawEmail, RawIdempotency, RawKafka, RawKeys, RawLog,
    RawMeetings, RawMomoDialect, RawNotification, RawOutbox, RawPayment, RawSaga, RawSettlement,
    RawTelemetry, RawWebhook, RawWorker, SettlementChannel, SettlementSettings, TossConfig, WorkerSettings,
    invalid,
};
use crate::adapters::Secret;
use crate::adapters::http::auth::{AuthSettings, DEV_KID, KeyAlgorithm, KeySettings, RawKey};
use crate::adapters::messaging::contract::topology::QueueType;
use crate::adapters::messaging::contract::{CloudEventsMode, CloudEventsSettings, ContractName};
use crate::adapters::providers::{EmailSettings, Locale, WebhookSecret, WebhookSettings};
use crate::application::input::parse_duration;
use crate::telemetry::{LogFormat, TelemetrySettings};

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
    Ok(MeetingsSettings { fee_source, currency: raw.currency, timezone })
}

pub(super) fn resolve_idempotency(raw: RawIdempotency) -> Result<IdempotencySettings, ConfigError> {
    let retention = duration("idempotency.retention", &raw.retention)?;
    if retention < Duration::from_secs(24 * 3600) {
        return Err(invalid("idempotency.retention", "must be at least 24h (docs/spec.md §5)"));
    }
    Ok(IdempotencySettings { retention })
}

pub(super) fn duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    parse_duration(text).map_err(|e| invalid(key, e))
}

/// A duration that must be greater than zero.
pub(super) fn positive(key: &str, text: &str) -> Result<Duration, ConfigError> {
    let value = duration(key, text)?;
    if value.is_zero() {
        return Err(invalid(key, "must be greater than zero"));
    }
    Ok(value)
}

pub(super) fn address(key: &str, text: &str) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|_| invalid(key, "expected HOST:PORT, e.g. 127.0.0.1:8080"))
}

/// An exchange or queue name.
pub(super) fn name(key: &str, value: String) -> Result<String, ConfigError> {
    if value.is_empty() || value.len() > 255 {
        return Err(invalid(key, "must be 1 to 255 characters"));
    }
    Ok(value)
}

pub(super) fn resolve_database(raw: RawDatabase) -> Result<DatabaseSettings, ConfigError> {
    let url = raw.url.expose();
    if !(url.starts_with("sqlite:") || url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(invalid("database.url", "expected sqlite:... or postgres://..."));
    }
    if raw.max_connections == 0 {
        return Err(invalid("database.max_connections", "must be at least 1"));
    }
    Ok(DatabaseSettings {
        url: raw.url,
        max_connections: raw.max_connections,
        connect_timeout: positive("database.connect_timeout", &raw.connect_timeout)?,
        lock_timeout: duration("database.lock_timeout", &raw.lock_timeout)?,
        statement_timeout: duration("database.statement_timeout", &raw.statement_timeout)?,
    })
}

pub(super) fn resolve_broker(raw: RawBroker) -> Result<BrokerSettings, ConfigError> {
    // An empty value is no value: `APP__BROKER__URL=` on a command line unsets the URL a
    // shell exported (README's walk-throughs switch brokers so).
    let url = raw.url.filter(|u| !u.expose().trim().is_empty());
    let (urls, key) = match (url, raw.urls) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "broker.urls",
                "set broker.url (one node) or broker.urls (a cluster), not both",
            ));
        }
        (Some(url), None) => (vec![url], "broker.url"),
        (None, Some(urls)) => {
            let urls = urls.into_list();
            if urls.is_empty() {
                return Err(invalid("broker.urls", "lists no node"));
            }
            (urls, "broker.urls")
        }
        (None, None) => (Vec::new(), "broker.url"),
    };
    let kind = match raw.kind.as_deref() {
        None if !urls.is_empty() => BrokerKind::Amqp,
        None | Some("log") => BrokerKind::Log,
        Some("amqp") => BrokerKind::Amqp,
        Some("kafka") => BrokerKind::Kafka,
        Some(other) => return Err(invalid("broker.kind", format!("`{other}` is not log, amqp or kafka"))),
    };
    if kind == BrokerKind::Kafka && !urls.is_empty() {
        return Err(invalid(key, "is for RabbitMQ: with broker.kind = kafka set broker.kafka.brokers"));
    }
    if kind == BrokerKind::Amqp {
        if urls.is_empty() {
            return Err(invalid("broker.url", "is required when broker.kind = amqp"));
        }
        for (i, url) in urls.iter().enumerate() {
            if !(url.expose().starts_with("amqp://") || url.expose().starts_with("amqps://")) {
                let which = if urls.len() > 1 { format!("node {}: ", i + 1) } else { String::new() };
                return Err(invalid(key, format!("{which}expected amqp://...")));
            }
        }
    }
    let queue_type = match raw.queue_type.as_str() {
        "classic" => QueueType::Classic,
        "quorum" => QueueType::Quorum,
        other => return Err(invalid("broker.queue_type", format!("`{other}` is not classic or quorum"))),
    };
    if raw.prefetch == 0 {
        return Err(invalid("broker.prefetch", "must be at least 1"));
    }
    let contract = ContractName::parse(&raw.contract).ok_or_else(|| {
        invalid("broker.contract", format!("`{}` is not native, cloudevents, momo or commerce", raw.contract))
    })?;
    let defined = match contract {
        ContractName::Native => true,
        ContractName::CloudEvents => kind != BrokerKind::Log,
        ContractName::Momo => kind == BrokerKind::Amqp,
        ContractName::Commerce => kind == BrokerKind::Kafka,
    };
    if !defined {
        return Err(invalid(
            "broker.contract",
            format!("`{contract}` is not defined for broker.kind = {}", kind.as_str()),
        ));
    }
    let cloudevents = CloudEventsSettings {
        mode: CloudEventsMode::parse(&raw.cloudevents.mode).ok_or_else(|| {
            invalid(
                "broker.cloudevents.mode",
                format!("`{}` is not binary or structured", raw.cloudevents.mode),
            )
        })?,
        source: cloudevents_attribute("broker.cloudevents.source", raw.cloudevents.source)?,
        type_prefix: cloudevents_attribute("broker.cloudevents.type_prefix", raw.cloudevents.type_prefix)?,
    };
    Ok(BrokerSettings {
        contract,
        cloudevents,
        kind,
        explicit: raw.kind.is_some() || !urls.is_empty(),
        urls,
        queue_type,
        exchange: name("broker.exchange", raw.exchange)?,
        confirm_timeout: positive("broker.confirm_timeout", &raw.confirm_timeout)?,
        meeting_exchange: name("broker.meeting_exchange", raw.meeting_exchange)?,
        dead_letter_exchange: name("broker.dead_letter_exchange", raw.dead_letter_exchange)?,
        register_queue: name("broker.register_queue", raw.register_queue)?,
        cancel_queue: name("broker.cancel_queue", raw.cancel_queue)?,
        meeting_deleted_queue: name("broker.meeting_deleted_queue", raw.meeting_deleted_queue)?,
        prefetch: raw.prefetch,
        consumer_retries: raw.consumer_retries,
        consumer_retry_backoff: duration("broker.consumer_retry_backoff", &raw.consumer_retry_backoff)?,
        delivery_limit: raw.delivery_limit,
        kafka: resolve_kafka(raw.kafka, kind == BrokerKind::Kafka)?,
    })
}

/// A CloudEvents attribute we send: non-empty printable ASCII (it goes in headers).
pub(super) fn cloudevents_attribute(key: &str, value: String) -> Result<String, ConfigError> {
    if value.is_empty() || value.len() > 200 || !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(invalid(key, "must be 1 to 200 printable ASCII characters"));
    }
    Ok(value)
}

/// Which client settings `broker.kafka.properties` may carry: how to reach and authenticate
/// to the cluster, nothing that would weaken delivery (`acks`, idempotence, timeouts are the
/// service's).
pub(super) const KAFKA_PASSED_THROUGH: [&str; 3] = ["security.", "ssl.", "sasl."];

pub(super) fn resolve_kafka(raw: RawKafka, chosen: bool) -> Result<KafkaSettings, ConfigError> {
    let brokers = raw.brokers.map(|b| b.trim().to_owned()).unwrap_or_default();
    if chosen && brokers.is_empty() {
        return Err(invalid("broker.kafka.brokers", "is required when broker.kind = kafka"));
    }
    let inbound = raw.inbound.into_list();
    if inbound.is_empty() {
        return Err(invalid("broker.kafka.inbound", "lists no topic"));
    }
    kafka_topic("broker.kafka.topic", &raw.topic)?;
    for topic in &inbound {
        kafka_topic("broker.kafka.inbound", topic)?;
    }
    if !(1..=10_000).contains(&raw.partitions) {
        return Err(invalid("broker.kafka.partitions", "must be between 1 and 10000"));
    }
    let mut properties = Vec::new();
    for (key, value) in raw.properties {
        // From the environment a key comes lower-cased with `_` for `.`
        // (`APP__BROKER__KAFKA__PROPERTIES__SASL_USERNAME`); librdkafka's names have no `_`.
        let key = key.replace('_', ".");
        if !KAFKA_PASSED_THROUGH.iter().any(|prefix| key.starts_with(prefix)) {
            return Err(invalid(
                &format!("broker.kafka.properties.{key}"),
                "only security.*, ssl.* and sasl.* settings are passed to the client",
            ));
        }
        properties.push((key, value));
    }
    Ok(KafkaSettings {
        brokers,
        topic: raw.topic,
        client_id: name("broker.kafka.client_id", raw.client_id)?,
        inbound,
        group: name("broker.kafka.group", raw.group)?,
        partitions: raw.partitions,
        connect_timeout: positive("broker.kafka.connect_timeout", &raw.connect_timeout)?,
        properties,
    })
}

/// A Kafka topic name: 1 to 249 of `[a-zA-Z0-9._-]`.
pub(super) fn kafka_topic(key: &str, topic: &str) -> Result<(), ConfigError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) || topic == "." || topic == ".." {
        return Err(invalid(key, format!("`{topic}` is not a Kafka topic name")));
    }
    Ok(())
}

pub(super) fn resolve_outbox(o: RawOutbox) -> Result<OutboxSettings, ConfigError> {
    if o.batch_size == 0 || o.batch_size > 10_000 {
        return Err(invalid("outbox.batch_size", "must be between 1 and 10000"));
    }
    if o.publish_window == 0 || o.publish_window > 10_000 {
        return Err(invalid("outbox.publish_window", "must be between 1 and 10000"));
    }
    if o.max_retries < 0 {
        return Err(invalid("outbox.max_retries", "must not be negative"));
    }
    if o.max_connections == 0 || o.max_connections > 1000 {
        return Err(invalid("outbox.max_connections", "must be between 1 and 1000"));
    }
    if o.cleanup_batch == 0 || o.cleanup_batch > 100_000 {
        return Err(invalid("outbox.cleanup_batch", "must be between 1 and 100000"));
    }
    let max_lanes = crate::domain::outbox::lanes::MAX_LANES;
    if o.lanes == 0 || o.lanes > max_lanes {
        return Err(invalid("outbox.lanes", format!("must be between 1 and {max_lanes}")));
    }
    let trickle_wait = duration("outbox.trickle_wait", &o.trickle_wait)?;
    if trickle_wait > Duration::from_secs(1) {
        return Err(invalid("outbox.trickle_wait", "must be at most 1s: every event waits it"));
    }
    let cleanup_at = NaiveTime::parse_from_str(&o.cleanup_at, "%H:%M")
        .map_err(|_| invalid("outbox.cleanup_at", "expected HH:MM (UTC), e.g. 03:00"))?;
    Ok(OutboxSettings {
        batch_size: o.batch_size,
        poll_interval: positive("outbox.poll_interval", &o.poll_interval)?,
        retry_poll_interval: duration("outbox.retry_poll_interval", &o.retry_poll_interval)?,
        trickle_wait,
        max_retries: o.max_retries,
        backoff_base: duration("outbox.backoff_base", &o.backoff_base)?,
        backoff_cap: duration("outbox.backoff_cap", &o.backoff_cap)?,
        processing_timeout: positive("outbox.processing_timeout", &o.processing_timeout)?,
        recovery_interval: positive("outbox.recovery_interval", &o.recovery_interval)?,
        cleanup_at,
        retention_published: duration("outbox.retention_published", &o.retention_published)?,
        retention_dead_letter: duration("outbox.retention_dead_letter", &o.retention_dead_letter)?,
        publish_window: o.publish_window,
        lanes: o.lanes,
        max_connections: o.max_connections,
        cleanup_batch: o.cleanup_batch,
    })
}

/// `<step>.webhook.*`, required when the step's channel is `webhook`.
pub(super) fn resolve_webhook(step: &str, raw: RawWebhook) -> Result<WebhookSettings, ConfigError> {
    let key = |name: &str| format!("{step}.webhook.{name}");
    let url =
        raw.url.ok_or_else(|| invalid(&key("url"), format!("is required when {step}.channel = webhook")))?;
    let parsed = reqwest::Url::parse(url.expose()).map_err(|_| invalid(&key("url"), "is not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(&key("url"), "must be http:// or https://"));
    }
    let secrets: Vec<Secret> = match raw.secrets {
        None => Vec::new(),
        // Several during a rotation: space- or comma-separated in the environment.
        Some(list) => list
            .into_list()
            .into_iter()
            .flat_map(|s| s.expose().split_whitespace().map(Secret::new).collect::<Vec<_>>())
            .collect(),
    };
    if secrets.is_empty() {
        return Err(invalid(
            &key("secrets"),
            format!("at least one whsec_ secret is required when {step}.channel = webhook"),
        ));
    }
    let secrets = secrets
        .iter()
        .map(|s| WebhookSecret::parse(s.expose()).map_err(|e| invalid(&key("secrets"), e)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(WebhookSettings { url, secrets, timeout: positive(&key("timeout"), &raw.timeout)? })
}

pub(super) fn resolve_email(raw: RawEmail) -> Result<EmailSettings, ConfigError> {
    let smtp_url = raw.smtp_url.ok_or_else(|| {
        invalid("notification.email.smtp_url", "is required when notification.channel = email")
    })?;
    let scheme = smtp_url.expose().split("://").next().unwrap_or_default();
    if !["smtp", "smtps"].contains(&scheme) || !smtp_url.expose().contains("://") {
        return Err(invalid(
            "notification.email.smtp_url",
            "must be smtp://host[:port] or smtps://host[:port]",
        ));
    }
    let from = raw
        .from
        .ok_or_else(|| invalid("notification.email.from", "is required when notification.channel = email"))?;
    let locale = Locale::parse(&raw.locale)
        .ok_or_else(|| invalid("notification.email.locale", format!("`{}` is not ko or en", raw.locale)))?;
    let settings = EmailSettings {
        smtp_url,
        from,
        locale,
        timeout: positive("notification.email.timeout", &raw.timeout)?,
    };
    // Built once here so that a bad URL or sender stops the start, naming the key.
    crate::adapters::providers::EmailNotifier::new(&settings)
        .map_err(|e| invalid("notification.email", e))?;
    Ok(settings)
}

pub(super) fn resolve_settlement(raw: RawSettlement) -> Result<SettlementSettings, ConfigError> {
    let channel = match raw.channel.as_deref() {
        None | Some("simulated") => SettlementChannel::Simulated,
        Some("webhook") => SettlementChannel::Webhook(resolve_webhook("settlement", raw.webhook)?),
        Some(other) => {
            return Err(invalid("settlement.channel", format!("`{other}` is not simulated or webhook")));
        }
    };
    let r = raw.retry;
    if r.max_attempts < 1 {
        return Err(invalid("settlement.retry.max_attempts", "must be at least 1"));
    }
    if r.batch == 0 || r.batch > 10_000 {
        return Err(invalid("settlement.retry.batch", "must be between 1 and 10000"));
    }
    Ok(SettlementSettings {
        channel,
        channel_explicit: raw.channel.is_some(),
        retry_max_attempts: r.max_attempts,
        retry_backoff_base: positive("settlement.retry.backoff_base", &r.backoff_base)?,
        retry_interval: positive("settlement.retry.interval", &r.interval)?,
        retry_batch: r.batch,
    })
}

pub(super) fn resolve_notification(
    raw: RawNotification,
    sqlite: bool,
) -> Result<NotificationSettings, ConfigError> {
    let channel = match raw.channel.as_deref() {
        None | Some("simulated") => NotificationChannel::Simulated,
        Some("webhook") => NotificationChannel::Webhook(resolve_webhook("notification", raw.webhook)?),
        Some("email") => NotificationChannel::Email(resolve_email(raw.email)?),
        Some(other) => {
            return Err(invalid(
                "notification.channel",
                format!("`{other}` is not simulated, webhook or email"),
            ));
        }
    };
    let channel_explicit = raw.channel.is_some();
    let r = raw.retry;
    if r.max_attempts < 1 {
        return Err(invalid("notification.retry.max_attempts", "must be at least 1"));
    }
    if r.batch == 0 || r.batch > 10_000 {
        return Err(invalid("notification.retry.batch", "must be between 1 and 10000"));
    }
    Ok(NotificationSettings {
        channel,
        channel_explicit,
        retry_enabled: r.enabled.unwrap_or(sqlite),
        retry_interval: duration("notification.retry.interval", &r.interval)?,
        retry_backoff_base: duration("notification.retry.backoff_base", &r.backoff_base)?,
        retry_max_attempts: r.max_attempts,
        retry_lease: positive("notification.retry.lease", &r.lease)?,
        retry_batch: r.batch,
    })
}

pub(super) fn resolve_payment(p: RawPayment) -> Result<PaymentSettings, ConfigError> {
    let provider = match p.provider.as_deref() {
        None | Some("mock") => ProviderKind::Mock,
        Some("external") => ProviderKind::External,
        Some("toss") => ProviderKind::Toss,
        Some(other) => {
            return Err(invalid("payment.provider", format!("`{other}` is not mock, toss or external")));
        }
    };
    if provider == ProviderKind::Toss {
        match &p.toss.secret_key {
            None => {
                return Err(invalid("payment.toss.secret_key", "is required when payment.provider = toss"));
            }
            Some(key) if !(key.expose().starts_with("test_sk_") || key.expose().starts_with("live_sk_")) => {
                // Never the key itself in the message.
                return Err(invalid(
                    "payment.toss.secret_key",
                    "must be a secret key, test_sk_... or live_sk_...",
                ));
            }
            Some(_) => {}
        }
    }
    if !(p.toss.base_url.starts_with("http://") || p.toss.base_url.starts_with("https://")) {
        return Err(invalid("payment.toss.base_url", "expected http(s)://..."));
    }
    if p.toss.timezone != "Asia/Seoul" {
        return Err(invalid("payment.toss.timezone", "only Asia/Seoul (Toss's zone) is supported"));
    }
    let ledger_at = NaiveTime::parse_from_str(&p.toss.ledger_at, "%H:%M")
        .map_err(|_| invalid("payment.toss.ledger_at", "expected HH:MM"))?;
    if provider == ProviderKind::External {
        for (key, present) in [
            ("payment.external.base_url", p.external.base_url.is_some()),
            ("payment.external.secret_key", p.external.secret_key.is_some()),
            ("payment.external.webhook_secret", p.external.webhook_secret.is_some()),
        ] {
            if !present {
                return Err(invalid(key, "is required when payment.provider = external"));
            }
        }
    }
    if p.retries > 10 {
        return Err(invalid("payment.retries", "must be at most 10"));
    }
    if p.reconciliation.max_attempts < 1 {
        return Err(invalid("payment.reconciliation.max_attempts", "must be at least 1"));
    }
    let bad_url = |u: &String| !(u.starts_with("http://") || u.starts_with("https://"));
    if p.external.base_url.as_ref().is_some_and(bad_url) {
        return Err(invalid("payment.external.base_url", "expected http(s)://..."));
    }
    Ok(PaymentSettings {
        provider,
        provider_explicit: p.provider.is_some(),
        retries: p.retries,
        retry_backoff: duration("payment.retry_backoff", &p.retry_backoff)?,
        reconciliation_interval: duration("payment.reconciliation.interval", &p.reconciliation.interval)?,
        reconciliation_max_attempts: p.reconciliation.max_attempts,
        external_base_url: p.external.base_url,
        external_secret_key: p.external.secret_key,
        external_webhook_secret: p.external.webhook_secret,
        external_timeout: duration("payment.external.timeout", &p.external.timeout)?,
        toss: TossConfig {
            secret_key: p.toss.secret_key,
            base_url: p.toss.base_url,
            timeout: positive("payment.toss.timeout", &p.toss.timeout)?,
            confirm_window: positive("payment.toss.confirm_window", &p.toss.confirm_window)?,
            timezone: p.toss.timezone,
            ledger_at,
            ledger_timeout: positive("payment.toss.ledger_timeout", &p.toss.ledger_timeout)?,
            settlement_grace: positive("payment.toss.settlement_grace", &p.toss.settlement_grace)?,
        },
    })
}

pub(super) fn resolve_worker(
    raw: RawWorker,
    saga: RawSaga,
    sqlite: bool,
) -> Result<WorkerSettings, ConfigError> {
    let saga_lease = duration("saga.lease", &saga.lease)?;
    if saga_lease < Duration::from_secs(1) {
        return Err(invalid("saga.lease", "must be at least 1s"));
    }
    if saga.recovery_max_attempts < 1 {
        return Err(invalid("saga.recovery_max_attempts", "must be at least 1"));
    }
    Ok(WorkerSettings {
        http_bind: address("worker.http.bind", &raw.http.bind)?,
        embedded: raw.embedded.unwrap_or(sqlite),
        stuck_after: positive("worker.stuck_after", &raw.stuck_after)?,
        saga_lease,
        saga_recovery_max_attempts: saga.recovery_max_attempts,
    })
}

/// `auth.*`. The built-in development key off SQLite is refused where the service starts
/// (`Settings::require_explicit_production`), beside every other key production needs.
pub(super) fn resolve_auth(raw: RawAuth) -> Result<AuthSettings, ConfigError> {
    let raw_keys: Vec<RawKey> = match raw.keys {
        // With an identity provider, tokens are verified with its keys only.
        None if raw.jwks_url.is_some() => Vec::new(),
        None => vec![RawKey {
            kid: DEV_KID.into(),
            algorithm: "HS256".into(),
            secret: Some(Secret::new(DEV_SECRET)),
            public_key: None,
            private_key: None,
        }],
        Some(RawKeys::List(keys)) => keys,
        Some(RawKeys::Json(json)) => serde_json::from_str(&json).map_err(|e| {
            invalid("auth.keys", format!("not a JSON array of keys: {}", redact(&e.to_string())))
        })?,
    };
    if raw_keys.is_empty() && raw.jwks_url.is_none() {
        return Err(invalid("auth.keys", "must hold at least one key (or set auth.jwks_url)"));
    }
    let keys = raw_keys.into_iter().enumerate().map(|(i, k)| resolve_key(i, k)).collect::<Result<_, _>>()?;
    if let Some(url) = &raw.jwks_url
        && !(url.starts_with("https://") || url.starts_with("http://"))
    {
        return Err(invalid("auth.jwks_url", "must be an http:// or https:// URL"));
    }
    if raw.roles_claim.is_empty() || raw.roles_claim.split('.').any(str::is_empty) {
        return Err(invalid(
            "auth.roles_claim",
            "must be a claim name or a dotted path such as realm_access.roles",
        ));
    }
    if raw.audience.as_deref().is_some_and(str::is_empty) {
        return Err(invalid("auth.audience", "must not be empty"));
    }
    let auth = AuthSettings {
        keys,
        issuer: raw.issuer,
        audience: raw.audience,
        roles_claim: raw.roles_claim,
        jwks_url: raw.jwks_url,
        jwks_refresh_interval: duration("auth.jwks_refresh_interval", &raw.jwks_refresh_interval)?,
    };
    Ok(auth)
}

pub(super) fn resolve_telemetry(raw: RawTelemetry) -> Result<TelemetrySettings, ConfigError> {
    if let Some(url) = &raw.otlp_endpoint
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(invalid("telemetry.otlp_endpoint", "expected http(s)://host:4318"));
    }
    if raw.service_name.is_empty() {
        return Err(invalid("telemetry.service_name", "must not be empty"));
    }
    Ok(TelemetrySettings { otlp_endpoint: raw.otlp_endpoint, service_name: raw.service_name })
}

pub(super) fn resolve_log(raw: RawLog) -> Result<LogSettings, ConfigError> {
    let format = match raw.format.as_deref() {
        // Unset: pretty for a person at a terminal, JSON lines for a collector.
        None if std::io::IsTerminal::is_terminal(&std::io::stderr()) => LogFormat::Pretty,
        None | Some("json") => LogFormat::Json,
        Some("pretty") => LogFormat::Pretty,
        Some(other) => return Err(invalid("log.format", format!("`{other}` is not json or pretty"))),
    };
    Ok(LogSettings { format })
}

/// Error messages from the config crate may quote values; never let one carry a secret.
/// One static key, its algorithm parsed once and its material checked for presence.
pub(super) fn resolve_key(i: usize, key: RawKey) -> Result<KeySettings, ConfigError> {
    let name = format!("auth.keys[{i}]");
    let algorithm = KeyAlgorithm::parse(&key.algorithm).ok_or_else(|| {
        invalid(
            &format!("{name}.algorithm"),
            format!("`{}` is not HS256, RS256, ES256 or EdDSA", key.algorithm),
        )
    })?;
    if algorithm.is_asymmetric() && key.public_key.is_none() {
        return Err(invalid(&format!("{name}.public_key"), "is required for RS256, ES256 and EdDSA"));
    }
    if !algorithm.is_asymmetric() && key.secret.as_ref().is_none_or(|s| s.expose().len() < 32) {
        return Err(invalid(&format!("{name}.secret"), "HS256 needs a secret of at least 32 bytes"));
    }
    if key.kid.is_empty() {
        return Err(invalid(&format!("{name}.kid"), "must not be empty"));
    }
    Ok(KeySettings {
        kid: key.kid,
        algorithm,
        secret: key.secret,
        public_key: key.public_key,
        private_key: key.private_key,
    })
}

pub(super) fn redact(message: &str) -> String {
    // The config crate quotes offending values in backticks or quotes; URLs may carry
    // passwords. Drop any `user:password@` part of a URL-looking token.
    message
        .split(' ')
        .map(|word| match (word.find("://"), word.find('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}://***{}", &word[..scheme], &word[at..])
            }
            _ => word.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `payment.provider` is (or defaults to) `mock`, for the checks of other sections.
pub(super) fn payment_is_mock(p: &RawPayment) -> bool {
    matches!(p.provider.as_deref(), None | Some("mock"))
}

/// `http.dialects.commerce` (docs/spec.md §14): off while `bind` is unset. Its key is the
/// platform's: HMAC over the secret's UTF-8 bytes, which its JWT library refuses under 32
/// bytes; its demo tokens only with simulated payments, as the platform allows demo mode
/// only outside production.
pub(super) fn resolve_commerce_dialect(
    raw: RawCommerceDialect,
    payment: &RawPayment,
) -> Result<Option<CommerceDialectSettings>, ConfigError> {
    let payment_mock = payment_is_mock(payment);
    let Some(bind) = raw.bind.filter(|b| !b.trim().is_empty()) else {
        return Ok(None);
    };
    let bind = address("http.dialects.commerce.bind", &bind)?;
    let jwt_secret = raw
        .jwt_secret
        .filter(|s| !s.expose().is_empty())
        .ok_or_else(|| invalid("http.dialects.commerce.jwt_secret", "is required when its bind is set"))?;
    if jwt_secret.expose().len() < 32 {
        return Err(invalid(
            "http.dialects.commerce.jwt_secret",
            "must be at least 32 bytes (HS256's key size; 48 for HS384, 64 for HS512)",
        ));
    }
    if payment.provider.as_deref() == Some("toss") {
        // Toss charges what a customer authorized (its widget, a saved card); an order made
        // here carries neither, so every one would be declined (docs/dialects.md).
        return Err(invalid(
            "http.dialects.commerce.bind",
            "its orders carry no card for Toss to charge: use payment.provider = mock or external",
        ));
    }
    if raw.demo_token && !payment_mock {
        return Err(invalid(
            "http.dialects.commerce.demo_token",
            "mints tokens for anyone: only with payment.provider = mock",
        ));
    }
    let token_validity = match raw.token_validity.as_deref() {
        None => Duration::from_secs(3600),
        Some(text) => positive("http.dialects.commerce.token_validity", text)?,
    };
    let issuer = raw.issuer.unwrap_or_else(|| "commerce-orchestration-backend".to_owned());
    Ok(Some(CommerceDialectSettings { bind, jwt_secret, demo_token: raw.demo_token, token_validity, issuer }))
}

/// `http.dialects.momo` (docs/spec.md §14): off while `bind` is unset. Its key is the
/// platform's `jwt.secret.key`, which it refuses under 32 bytes.
pub(super) fn resolve_momo_dialect(raw: RawMomoDialect) -> Result<Option<MomoDialectSettings>, ConfigError> {
    let Some(bind) = raw.bind.filter(|b| !b.trim().is_empty()) else {
        return Ok(None);
    };
    let bind = address("http.dialects.momo.bind", &bind)?;
    let jwt_secret = raw
        .jwt_secret
        .filter(|s| !s.expose().is_empty())
        .ok_or_else(|| invalid("http.dialects.momo.jwt_secret", "is required when its bind is set"))?;
    if jwt_secret.expose().len() < 32 {
        return Err(invalid("http.dialects.momo.jwt_secret", "must be at least 32 bytes (HS256's key size)"));
    }
    Ok(Some(MomoDialectSettings { bind, jwt_secret }))
}
