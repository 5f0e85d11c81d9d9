//! Payment statuses and actions.

spelled!(
    /// Where a payment stands (docs/spec.md §3).
    PaymentStatus {
        Requested => "REQUESTED",
        Approved => "APPROVED",
        Declined => "DECLINED",
        ConfirmationRequired => "CONFIRMATION_REQUIRED",
        Cancelled => "CANCELLED",
        RefundPending => "REFUND_PENDING",
        PartiallyRefunded => "PARTIALLY_REFUNDED",
        Refunded => "REFUNDED",
    }
);

impl PaymentStatus {
    /// Whether the money was taken (and may since have been refunded, in part or whole): what
    /// a merchant's report counts as gross (docs/spec.md §15).
    pub fn is_captured(self) -> bool {
        matches!(
            self,
            PaymentStatus::Approved
                | PaymentStatus::RefundPending
                | PaymentStatus::PartiallyRefunded
                | PaymentStatus::Refunded
        )
    }
}

spelled!(
    /// The actions a payment accepts.
    PaymentAction {
        Approve => "APPROVE",
        Decline => "DECLINE",
        RequireConfirmation => "REQUIRE_CONFIRMATION",
        Cancel => "CANCEL",
        BeginRefund => "BEGIN_REFUND",
        Refund => "REFUND",
        RecordRefundFailure => "RECORD_REFUND_FAILURE",
        RecordReconcileAttempt => "RECORD_RECONCILE_ATTEMPT",
        RecordProviderRefund => "RECORD_PROVIDER_REFUND",
    }
);

spelled!(
    /// Where a refund stands.
    RefundStatus {
        Pending => "PENDING",
        Succeeded => "SUCCEEDED",
        Failed => "FAILED",
    }
);
