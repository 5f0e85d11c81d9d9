//! The audit trail's vocabulary (docs/spec.md §4): every replay, rejection, failure branch and
//! admin action writes one `audit_log` row with one of these actions. Spelled once here;
//! the store maps them to and from its column.

spelled!(
    /// What an audit row records.
    AuditAction {
        OrderPlaced => "ORDER_PLACED",
        PaymentAuthorized => "PAYMENT_AUTHORIZED",
        PaymentRejected => "PAYMENT_REJECTED",
        PaymentWindowExpired => "PAYMENT_WINDOW_EXPIRED",
        OrderRejected => "ORDER_REJECTED",
        Replay => "REPLAY",
        IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
        PaymentDeclined => "PAYMENT_DECLINED",
        PaymentOutcomeUnknown => "PAYMENT_OUTCOME_UNKNOWN",
        PaymentProviderUnavailable => "PAYMENT_PROVIDER_UNAVAILABLE",
        PaymentConfirmed => "PAYMENT_CONFIRMED",
        PaymentOutcomeUnstorable => "PAYMENT_OUTCOME_UNSTORABLE",
        SagaResumed => "SAGA_RESUMED",
        SagaRecoveryExhausted => "SAGA_RECOVERY_EXHAUSTED",
        OrchestrateNoop => "ORCHESTRATE_NOOP",
        NotificationSent => "NOTIFICATION_SENT",
        RefundRequested => "REFUND_REQUESTED",
        RefundUnresolved => "REFUND_UNRESOLVED",
        RegistrationRejected => "REGISTRATION_REJECTED",
        ReconciliationExhausted => "RECONCILIATION_EXHAUSTED",
        CompensationExhausted => "COMPENSATION_EXHAUSTED",
        CallbackRejected => "CALLBACK_REJECTED",
        CallbackDuplicate => "CALLBACK_DUPLICATE",
        SettlementFailed => "SETTLEMENT_FAILED",
        Compensated => "COMPENSATED",
        CompensationFailed => "COMPENSATION_FAILED",
        NotificationFailed => "NOTIFICATION_FAILED",
        NotificationIgnored => "NOTIFICATION_IGNORED",
        NotificationReprocess => "NOTIFICATION_REPROCESS",
        NotificationIgnore => "NOTIFICATION_IGNORE",
        Refunded => "REFUNDED",
        RefundFailed => "REFUND_FAILED",
        RefundRejected => "REFUND_REJECTED",
        InboundRejected => "INBOUND_REJECTED",
        InboundDuplicate => "INBOUND_DUPLICATE",
        NothingToRefund => "NOTHING_TO_REFUND",
        MeetingDeleted => "MEETING_DELETED",
        OutboxRepublish => "OUTBOX_REPUBLISH",
        OutboxDiscard => "OUTBOX_DISCARD",
        OutboxRedrive => "OUTBOX_REDRIVE",
    }
);
