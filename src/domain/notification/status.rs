//! Notification statuses, failure policies and actions.

spelled!(
    /// Where a notification stands (docs/spec.md §3).
    NotificationStatus {
        Pending => "PENDING",
        Sent => "SENT",
        RetryScheduled => "RETRY_SCHEDULED",
        Processing => "PROCESSING",
        ManualInterventionRequired => "MANUAL_INTERVENTION_REQUIRED",
        Ignored => "IGNORED",
        Failed => "FAILED",
    }
);

spelled!(
    /// What a failed send asks for.
    FailurePolicy {
        AutoRetry => "AUTO_RETRY",
        ManualIntervention => "MANUAL_INTERVENTION",
        Ignore => "IGNORE",
    }
);

/// The `policy` of a notification that needs no handling (sent).
pub const NO_POLICY: &str = "NONE";

spelled!(
    /// The actions a notification accepts.
    NotificationAction {
        MarkSent => "MARK_SENT",
        RecordFailure => "RECORD_FAILURE",
        Claim => "CLAIM",
        Reprocess => "REPROCESS",
        Ignore => "IGNORE",
        ReleaseClaim => "RELEASE_CLAIM",
    }
);
