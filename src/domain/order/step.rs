//! The saga's step vocabulary: one `orchestration_steps` row per step outcome (docs/spec.md §4).

use crate::domain::notification::{FailurePolicy, NotificationStatus};

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

/// What a step's row records as a fact beside its text (`orchestration_steps.fact`), for
/// readers that must not parse the text (the commerce dialect's flow): the text is ours to
/// reword, the fact is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepFact {
    /// A notification's send failed under this policy (a `NOTIFICATION FAILED` row).
    NotificationFailed(FailurePolicy),
    /// The order waits for its notification, which stood so when the order failed for it
    /// (a `COMPENSATION READY` row).
    AwaitingNotification(NotificationStatus),
}

impl StepFact {
    const FAILED: &'static str = "NOTIFICATION_FAILED ";
    const AWAITING: &'static str = "AWAITING_NOTIFICATION ";

    /// How the fact is stored: its kind and its value, one space between.
    pub fn as_text(&self) -> String {
        match self {
            StepFact::NotificationFailed(policy) => format!("{}{}", Self::FAILED, policy.as_str()),
            StepFact::AwaitingNotification(status) => format!("{}{}", Self::AWAITING, status.as_str()),
        }
    }

    /// The fact stored as `text` ([`StepFact::as_text`]); `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        if let Some(policy) = text.strip_prefix(Self::FAILED) {
            return FailurePolicy::parse(policy).map(StepFact::NotificationFailed);
        }
        text.strip_prefix(Self::AWAITING)
            .and_then(NotificationStatus::parse)
            .map(StepFact::AwaitingNotification)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_fact_reads_back_as_written_and_nothing_else_reads_as_one() {
        let facts = FailurePolicy::ALL
            .iter()
            .map(|p| StepFact::NotificationFailed(*p))
            .chain(NotificationStatus::ALL.iter().map(|s| StepFact::AwaitingNotification(*s)));
        for fact in facts {
            assert_eq!(StepFact::parse(&fact.as_text()), Some(fact), "{fact:?}");
        }
        for text in
            ["", "AUTO_RETRY", "NOTIFICATION_FAILED", "NOTIFICATION_FAILED  AUTO_RETRY", "notification SENT"]
        {
            assert_eq!(StepFact::parse(text), None, "{text:?}");
        }
    }
}
