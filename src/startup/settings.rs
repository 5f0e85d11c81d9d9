//! The application services' settings, translated from [`Settings`]' sections.

use super::chrono;
use crate::application::money::ledger::LedgerSettings;
use crate::application::money::refunds::RefundSettings;
use crate::application::notification_retry::NotificationRetrySettings;
use crate::application::orchestration::{CheckoutSettings, SagaSettings};
use crate::application::outbox::HousekeepingSettings;
use crate::application::recovery::ReconciliationSettings;
use crate::config::{ProviderKind, Settings};
use crate::domain::retry::RetryPolicy;

/// The payment provider's name in metrics.
pub(super) fn payment_provider(settings: &Settings) -> &'static str {
    match settings.payment.provider {
        ProviderKind::Mock => "mock",
        ProviderKind::External => "external",
        ProviderKind::Toss => "toss",
    }
}

/// How an undelivered settlement is tried again (`settlement.retry.*`).
pub(super) fn settlement_policy(settings: &Settings) -> RetryPolicy {
    RetryPolicy::new(settings.settlement.retry_max_attempts, chrono(settings.settlement.retry_backoff_base))
}

/// `notification.retry_*`: how failed notifications are retried.
pub(super) fn notification_policy(settings: &Settings) -> RetryPolicy {
    RetryPolicy::new(
        settings.notification.retry_max_attempts,
        chrono(settings.notification.retry_backoff_base),
    )
}

pub(super) fn notification_settings(settings: &Settings) -> NotificationRetrySettings {
    NotificationRetrySettings {
        policy: notification_policy(settings),
        lease: chrono(settings.notification.retry_lease),
        batch: settings.notification.retry_batch,
        interval: settings.notification.retry_interval,
    }
}

/// The saga's settings; a checkout window only where payments are confirmed by the buyer
/// (Toss).
pub(super) fn saga_settings(settings: &Settings) -> SagaSettings {
    SagaSettings {
        notification_retry: notification_policy(settings),
        settlement_retry: settlement_policy(settings),
        saga_lease: chrono(settings.worker.saga_lease),
        checkout: (settings.payment.provider == ProviderKind::Toss)
            .then(|| CheckoutSettings { window: chrono(settings.payment.toss.confirm_window) }),
        hold_expiry: chrono(settings.http.hold_expiry),
    }
}

/// `payment.reconciliation.*`: how an unknown outcome (a payment's, a refund's) is looked up
/// again before an operator must decide.
fn lookup_policy(settings: &Settings) -> RetryPolicy {
    RetryPolicy::new(
        settings.payment.reconciliation_max_attempts,
        chrono(settings.payment.reconciliation_interval),
    )
}

pub(super) fn refund_settings(settings: &Settings) -> RefundSettings {
    RefundSettings { lease: chrono(settings.worker.saga_lease), retry: lookup_policy(settings) }
}

/// Reconciliation of unknown payments, compensations and stalled sagas. Compensations and
/// stalled sagas are tried at most a day apart.
pub(super) fn reconciliation_settings(settings: &Settings) -> ReconciliationSettings {
    let day = chrono::Duration::days(1);
    ReconciliationSettings {
        interval: settings.payment.reconciliation_interval,
        lookups: lookup_policy(settings),
        compensations: RetryPolicy::new(
            settings.payment.reconciliation_max_attempts.max(1),
            chrono(settings.payment.reconciliation_interval),
        )
        .capped(day),
        stalled: RetryPolicy::new(
            settings.worker.saga_recovery_max_attempts,
            chrono(settings.worker.saga_lease),
        )
        .capped(day),
    }
}

/// Lease recovery and clean-up by retention.
pub(super) fn housekeeping_settings(settings: &Settings) -> HousekeepingSettings {
    HousekeepingSettings {
        recovery_interval: settings.outbox.recovery_interval,
        cleanup_at: settings.outbox.cleanup_at,
        retention_published: chrono(settings.outbox.retention_published),
        retention_dead_letter: chrono(settings.outbox.retention_dead_letter),
        retention_idempotency: chrono(settings.idempotency.retention),
        retention_audit: chrono(settings.audit.retention),
        cleanup_batch: settings.outbox.cleanup_batch,
    }
}

/// The provider's zone and the time its previous day is reconciled (`payment.toss.*`;
/// `config.rs` accepts Asia/Seoul alone).
pub(super) fn ledger_settings(settings: &Settings) -> LedgerSettings {
    const SEOUL: i32 = 9 * 3600;
    LedgerSettings {
        // Cannot fail: east_opt refuses only offsets of ±24 h or more, and this is +9 h.
        zone: chrono::FixedOffset::east_opt(SEOUL).expect("UTC+09:00 is a valid offset"),
        at: settings.payment.toss.ledger_at,
        // Cannot fail for any grace the configuration accepts (chrono's range is ±262 000
        // years); the default's 7 days otherwise.
        settlement_grace: chrono::Duration::from_std(settings.payment.toss.settlement_grace)
            .unwrap_or_else(|_| chrono::Duration::days(7)),
        max_findings: settings.payment.toss.ledger_max_findings,
    }
}
