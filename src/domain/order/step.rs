//! The saga's step vocabulary: one `orchestration_steps` row per step outcome (docs/spec.md §4).

spelled!(
    /// A step of the order saga.
    SagaStep {
        Payment => "PAYMENT",
        Settlement => "SETTLEMENT",
        Notification => "NOTIFICATION",
        Compensation => "COMPENSATION",
    }
);

spelled!(
    /// The outcome recorded for a step. `READY` means "waiting: a retry or an operator is
    /// needed" (a notification to re-send, a payment to reconcile).
    StepStatus {
        Success => "SUCCESS",
        Failed => "FAILED",
        Ready => "READY",
        Skipped => "SKIPPED",
    }
);
