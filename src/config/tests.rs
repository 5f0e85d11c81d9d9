//! The configuration's unit tests: defaults, every source's precedence, and each invalid value named by its key.

use std::time::Duration;

use super::*;
use crate::adapters::Secret;
use crate::adapters::http::auth::DEV_KID;
use crate::application::input::parse_duration;

fn load(env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    Settings::load_from(None, env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

#[test]
fn defaults_are_the_embedded_mode() {
    let s = load(&[]).unwrap();
    assert!(s.database.is_sqlite());
    assert_eq!(s.http.bind.to_string(), "127.0.0.1:8080");
    assert_eq!(s.broker.kind, BrokerKind::Log);
    assert!(s.worker.embedded);
    assert!(s.notification.retry_enabled);
    assert_eq!(s.outbox.batch_size, 256);
    assert_eq!(s.outbox.processing_timeout, Duration::from_secs(300));
    assert_eq!(s.outbox.retention_published, Duration::from_secs(30 * 86_400));
    assert_eq!(s.auth.keys[0].kid, DEV_KID);
}

#[test]
fn environment_overrides_defaults() {
    let s = load(&[
        ("APP__OUTBOX__BATCH_SIZE", "64"),
        ("APP__OUTBOX__POLL_INTERVAL", "250ms"),
        ("APP__NOTIFICATION__RETRY__ENABLED", "false"),
        ("APP__BROKER__URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
    ])
    .unwrap();
    assert_eq!(s.outbox.batch_size, 64);
    assert_eq!(s.outbox.poll_interval, Duration::from_millis(250));
    assert!(!s.notification.retry_enabled);
    assert_eq!(s.broker.kind, BrokerKind::Amqp, "a broker url implies amqp");
}

#[test]
fn a_cluster_is_a_list_of_urls() {
    let s = load(&[("APP__BROKER__URLS", "amqp://u:p@r1:5672/%2f, amqp://u:p@r2:5672/%2f,amqp://u:p@r3")])
        .unwrap();
    assert_eq!(s.broker.kind, BrokerKind::Amqp, "urls imply amqp");
    assert!(s.broker.explicit);
    let urls: Vec<&str> = s.broker.urls.iter().map(Secret::expose).collect();
    assert_eq!(urls, ["amqp://u:p@r1:5672/%2f", "amqp://u:p@r2:5672/%2f", "amqp://u:p@r3"]);

    let dir = std::env::temp_dir().join(format!("cfg-urls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("app.toml");
    std::fs::write(&file, "[broker]\nurls = [\"amqp://a\", \"amqp://b\"]\n").unwrap();
    let s = Settings::load_from(Some(&file), std::iter::empty()).unwrap();
    assert_eq!(s.broker.urls.len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();

    for (env, key) in [
        (vec![("APP__BROKER__URLS", "amqp://a,http://b")], "broker.urls"),
        (vec![("APP__BROKER__URLS", " , ")], "broker.urls"),
        (vec![("APP__BROKER__URL", "amqp://a"), ("APP__BROKER__URLS", "amqp://b")], "broker.urls"),
    ] {
        let err = load(&env).unwrap_err().to_string();
        assert!(err.contains(key), "{env:?}: {err}");
        assert!(!err.contains("://a") && !err.contains("://b"), "no url (secrets) in {err}");
    }
}

#[test]
fn keys_come_from_one_json_array_in_the_environment() {
    let s = load(&[(
        "APP__AUTH__KEYS",
        r#"[{"kid":"k1","algorithm":"HS256","secret":"0123456789abcdef0123456789abcdef"}]"#,
    )])
    .unwrap();
    assert_eq!(s.auth.keys[0].kid, "k1");
    assert!(!format!("{:?}", s.auth).contains("0123456789abcdef"), "secrets never print");
}

#[test]
fn kafka_is_chosen_with_its_brokers_and_passes_security_settings_through() {
    let s = load(&[
        ("APP__BROKER__KIND", "kafka"),
        ("APP__BROKER__KAFKA__BROKERS", "k1:9092,k2:9092"),
        ("APP__BROKER__KAFKA__INBOUND", "meeting.events, other.events"),
        ("APP__BROKER__KAFKA__PROPERTIES__SECURITY_PROTOCOL", "SASL_SSL"),
        ("APP__BROKER__KAFKA__PROPERTIES__SASL_PASSWORD", "hunter2-kafka"),
    ])
    .unwrap();
    assert_eq!(s.broker.kind, BrokerKind::Kafka);
    assert!(s.broker.explicit);
    let k = &s.broker.kafka;
    assert_eq!(k.brokers, "k1:9092,k2:9092");
    assert_eq!((k.topic.as_str(), k.group.as_str()), ("commerce.events", "commerce-orchestrator"));
    assert_eq!(k.inbound, ["meeting.events", "other.events"]);
    let keys: Vec<&str> = k.properties.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["sasl.password", "security.protocol"]);
    assert!(!format!("{:?}", s.broker).contains("hunter2-kafka"), "secrets never print");
    let err = load(&[("APP__BROKER__KIND", "kafka"), ("APP__BROKER__URL", "amqp://x")]).unwrap_err();
    assert!(err.to_string().contains("broker.url"), "{err}");
    // An empty URL (a shell's `APP__BROKER__URL=` override) is no URL.
    let s = load(&[
        ("APP__BROKER__KIND", "kafka"),
        ("APP__BROKER__URL", ""),
        ("APP__BROKER__KAFKA__BROKERS", "k1:9092"),
    ])
    .unwrap();
    assert_eq!(s.broker.kind, BrokerKind::Kafka);
}

#[test]
fn invalid_values_name_their_key() {
    for (key, value, named) in [
        ("APP__OUTBOX__POLL_INTERVAL", "soon", "outbox.poll_interval"),
        ("APP__OUTBOX__BATCH_SIZE", "0", "outbox.batch_size"),
        ("APP__HTTP__BIND", "nowhere", "http.bind"),
        ("APP__BROKER__KIND", "kafka", "broker.kafka.brokers"),
        ("APP__BROKER__KIND", "nats", "broker.kind"),
        ("APP__BROKER__KAFKA__INBOUND", "meeting events", "broker.kafka.inbound"),
        ("APP__BROKER__KAFKA__PARTITIONS", "0", "broker.kafka.partitions"),
        ("APP__BROKER__KAFKA__PROPERTIES__ACKS", "1", "broker.kafka.properties.acks"),
        ("APP__PAYMENT__PROVIDER", "external", "payment.external.base_url"),
        ("APP__PAYMENT__PROVIDER", "toss", "payment.toss.secret_key"),
        ("APP__PAYMENT__PROVIDER", "paypal", "payment.provider"),
        ("APP__PAYMENT__TOSS__TIMEZONE", "Europe/Paris", "payment.toss.timezone"),
        ("APP__PAYMENT__TOSS__LEDGER_AT", "4am", "payment.toss.ledger_at"),
        ("APP__PAYMENT__TOSS__CONFIRM_WINDOW", "0s", "payment.toss.confirm_window"),
        ("APP__LOG__FORMAT", "xml", "log.format"),
        ("APP__OUTBOX__CLEANUP_AT", "3am", "outbox.cleanup_at"),
        ("APP__OUTBOX__TRICKLE_WAIT", "2s", "outbox.trickle_wait"),
        ("APP__OUTBOX__TRICKLE_WAIT", "1", "outbox.trickle_wait"),
    ] {
        let err = load(&[(key, value)]).unwrap_err().to_string();
        assert!(err.contains(named), "{key}={value}: {err}");
    }
    let err = load(&[("APP__OUTBOX__BATCH_SIZE", "many")]).unwrap_err().to_string();
    assert!(err.contains("batch_size"), "{err}");
}

#[test]
fn a_toss_key_that_is_no_secret_key_is_refused_without_being_printed() {
    for key in ["test_ck_client_key_0000", "live_gck_widget", "sk_live_stripe"] {
        let err = load(&[("APP__PAYMENT__PROVIDER", "toss"), ("APP__PAYMENT__TOSS__SECRET_KEY", key)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("payment.toss.secret_key") && !err.contains(key), "{err}");
    }
    let s = load(&[("APP__PAYMENT__PROVIDER", "toss"), ("APP__PAYMENT__TOSS__SECRET_KEY", "test_sk_abc")])
        .unwrap();
    assert_eq!(s.payment.provider, ProviderKind::Toss);
    assert_eq!(s.payment.toss.confirm_window, Duration::from_secs(600));
    assert!(!format!("{:?}", s.payment).contains("test_sk_abc"), "secrets never print");
}

#[test]
fn production_refuses_the_built_in_key() {
    let s = load(&[("APP__DATABASE__URL", "postgres://postgres@127.0.0.1/app")])
        .expect("`app migrate` needs no signing key");
    let err = s.require_explicit_production().unwrap_err();
    assert!(err.to_string().contains("auth.keys"), "{err}");
}

/// Issue 57 item 4: a start refused for configuration names every key at once, on one line,
/// not one per restart.
#[test]
fn a_refused_start_names_every_missing_key_at_once() {
    let s = load(&[("APP__DATABASE__URL", "postgres://postgres@127.0.0.1/app")]).unwrap();
    let err = s.require_explicit_production().unwrap_err().to_string();
    for key in ["auth.keys", "broker.url", "payment.provider", "settlement.channel", "notification.channel"] {
        assert!(err.contains(&format!("`{key}`")), "{key} not named: {err}");
    }
    assert!(!err.contains('\n'), "one line: {err}");
    // Invalid values in several sections: each named, in one error.
    let err = load(&[
        ("APP__OUTBOX__BATCH_SIZE", "0"),
        ("APP__PAYMENT__PROVIDER", "paypal"),
        ("APP__HTTP__BIND", "nowhere"),
        ("APP__AUTH__AUDIENCE", ""),
    ])
    .unwrap_err()
    .to_string();
    for key in ["outbox.batch_size", "payment.provider", "http.bind", "auth.audience"] {
        assert!(err.contains(&format!("`{key}`")), "{key} not named: {err}");
    }
    // With everything given, nothing is refused.
    let s = load(&[
        ("APP__DATABASE__URL", "postgres://postgres@127.0.0.1/app"),
        (
            "APP__AUTH__KEYS",
            r#"[{"kid":"k1","algorithm":"HS256","secret":"change-me-to-32-bytes-or-more-please"}]"#,
        ),
        ("APP__BROKER__URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
        ("APP__PAYMENT__PROVIDER", "mock"),
        ("APP__SETTLEMENT__CHANNEL", "simulated"),
        ("APP__NOTIFICATION__CHANNEL", "simulated"),
    ])
    .unwrap();
    assert!(s.require_explicit_production().is_ok());
}

#[test]
fn an_identity_provider_replaces_the_built_in_key() {
    let jwks = ("APP__AUTH__JWKS_URL", "https://idp.example/certs");
    let s = load(&[jwks]).expect("SQLite with an identity provider");
    assert!(s.auth.keys.is_empty(), "no built-in key beside an identity provider");
    assert_eq!(s.auth.roles_claim, "roles");
    assert_eq!(s.auth.jwks_refresh_interval, Duration::from_secs(60));
    let s = load(&[jwks, ("APP__DATABASE__URL", "postgres://postgres@127.0.0.1/app")]).expect("production");
    assert!(!s.auth.only_dev_key());
    for (key, value, named) in [
        ("APP__AUTH__JWKS_URL", "idp.example/certs", "auth.jwks_url"),
        ("APP__AUTH__ROLES_CLAIM", "realm_access..roles", "auth.roles_claim"),
        ("APP__AUTH__AUDIENCE", "", "auth.audience"),
        ("APP__AUTH__JWKS_REFRESH_INTERVAL", "often", "auth.jwks_refresh_interval"),
    ] {
        let err = load(&[jwks, (key, value)]).unwrap_err().to_string();
        assert!(err.contains(named), "{key}={value}: {err}");
    }
}

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    assert_eq!(parse_duration("30d").unwrap(), Duration::from_secs(30 * 86_400));
    for bad in ["", "10", "s", "1.5s", "-1s", "10 minutes"] {
        assert!(parse_duration(bad).is_err(), "{bad}");
    }
}

#[test]
fn redaction_hides_url_credentials() {
    assert_eq!(redact("bad amqp://guest:secret@host/vhost"), "bad amqp://***@host/vhost");
}

#[test]
fn the_documented_defaults_are_the_defaults() {
    // docs/configuration.md's table and `DEFAULTS` must not drift apart: every key whose
    // documented default is a plain value has exactly that value in `DEFAULTS`, and
    // every key of `DEFAULTS` is documented.
    let defaults = config::Config::builder()
        .add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml))
        .build()
        .unwrap();
    let doc = include_str!("../../docs/configuration.md");
    let mut documented = Vec::new();
    for row in doc.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let key = cells[0].trim_start_matches("| ").trim_matches('`');
        documented.push(key.to_owned());
        let default = cells[1];
        // Plain values only: `—` (none) and prose (mode-dependent) are not literals.
        if default.matches('`').count() == 2 && default.starts_with('`') && default.ends_with('`') {
            let value = default.trim_matches('`');
            assert_eq!(defaults.get_string(key).ok().as_deref(), Some(value), "{key}");
        }
    }
    fn keys(prefix: &str, table: config::Map<String, config::Value>, out: &mut Vec<String>) {
        for (k, v) in table {
            let key = if prefix.is_empty() { k } else { format!("{prefix}.{k}") };
            match v.kind {
                config::ValueKind::Table(t) => keys(&key, t, out),
                _ => out.push(key),
            }
        }
    }
    let mut all = Vec::new();
    keys("", defaults.clone().try_deserialize().unwrap(), &mut all);
    for key in all {
        assert!(documented.contains(&key), "`{key}` has a default but is not in docs/configuration.md");
    }
}

#[test]
fn the_commerce_dialect_is_off_until_bound_and_its_key_and_demo_tokens_are_checked() {
    assert!(load(&[]).unwrap().http.commerce.is_none(), "off by default");
    let secret = "0123456789abcdef0123456789abcdef";
    let on = load(&[
        ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
        ("APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET", secret),
    ])
    .unwrap()
    .http
    .commerce
    .unwrap();
    assert!(!on.demo_token);
    assert_eq!(on.token_validity, Duration::from_secs(3600));
    assert_eq!(on.issuer, "commerce-orchestration-backend");
    for (env, named) in [
        (vec![("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0")], "jwt_secret"),
        (
            vec![
                ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
                ("APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET", "31-bytes-is-too-short-for-hs256"),
            ],
            "at least 32 bytes",
        ),
        (
            vec![
                ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
                ("APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET", secret),
                ("APP__HTTP__DIALECTS__COMMERCE__DEMO_TOKEN", "true"),
                ("APP__PAYMENT__PROVIDER", "toss"),
                ("APP__PAYMENT__TOSS__SECRET_KEY", "test_sk_abc"),
            ],
            "http.dialects.commerce.bind",
        ),
        (
            vec![
                ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
                ("APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET", secret),
                ("APP__HTTP__DIALECTS__COMMERCE__DEMO_TOKEN", "true"),
                ("APP__PAYMENT__PROVIDER", "external"),
                ("APP__PAYMENT__EXTERNAL__BASE_URL", "http://127.0.0.1:9"),
            ],
            "http.dialects.commerce.demo_token",
        ),
    ] {
        let err = load(&env).unwrap_err().to_string();
        assert!(err.contains(named), "{named}: {err}");
        assert!(!err.contains(secret), "the key is never printed: {err}");
    }
}

#[test]
fn the_momo_dialect_is_off_until_bound_and_its_key_is_checked() {
    assert!(load(&[]).unwrap().http.momo.is_none(), "off by default");
    let secret = "momo-platform-jwt-secret-key-0123";
    let on = load(&[
        ("APP__HTTP__DIALECTS__MOMO__BIND", "127.0.0.1:0"),
        ("APP__HTTP__DIALECTS__MOMO__JWT_SECRET", secret),
    ])
    .unwrap()
    .http
    .momo
    .unwrap();
    assert_eq!(on.jwt_secret.expose(), secret);
    for (env, named) in [
        (vec![("APP__HTTP__DIALECTS__MOMO__BIND", "127.0.0.1:0")], "http.dialects.momo.jwt_secret"),
        (
            vec![
                ("APP__HTTP__DIALECTS__MOMO__BIND", "127.0.0.1:0"),
                ("APP__HTTP__DIALECTS__MOMO__JWT_SECRET", "31-bytes-is-too-short-for-hs256"),
            ],
            "at least 32 bytes",
        ),
    ] {
        let err = load(&env).unwrap_err().to_string();
        assert!(err.contains(named), "{named}: {err}");
    }
}
