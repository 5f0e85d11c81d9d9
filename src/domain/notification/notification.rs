//! The notification aggregate and its transition functions.

use chrono::{DateTime, Duration, Utc};

use super::error::NotificationError;
use super::event::NotificationEvent;
use super::status::{FailurePolicy, NO_POLICY, NotificationAction, NotificationStatus};
use crate::domain::ids::{NotificationId, OrderId};
use crate::domain::retry::{NextAttempt, RetryPolicy};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub id: NotificationId,
    pub order_id: OrderId,
    pub status: NotificationStatus,
    /// The policy of the last failure, if any.
    pub policy: Option<FailurePolicy>,
    /// Send attempts made so far.
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// While `PROCESSING`: the claim lease; a claim past it may be recovered.
    pub claimed_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: i64,
}

impl Notification {
    pub fn new(order_id: OrderId, now: DateTime<Utc>) -> Self {
        Notification {
            id: NotificationId::new(),
            order_id,
            status: NotificationStatus::Pending,
            policy: None,
            attempts: 0,
            next_attempt_at: None,
            last_error: None,
            claimed_until: None,
            created_at: now,
            updated_at: now,
            version: 0,
        }
    }

    fn guard(&self, action: NotificationAction, allowed: bool) -> Result<(), NotificationError> {
        if allowed { Ok(()) } else { Err(NotificationError::InvalidTransition { from: self.status, action }) }
    }

    fn move_to(&mut self, status: NotificationStatus, now: DateTime<Utc>) {
        self.status = status;
        self.updated_at = now;
        if status != NotificationStatus::Processing {
            self.claimed_until = None;
        }
        if status != NotificationStatus::RetryScheduled {
            self.next_attempt_at = None;
        }
    }

    fn attempting(&self) -> bool {
        matches!(self.status, NotificationStatus::Pending | NotificationStatus::Processing)
    }

    /// An attempt (first send or retry) went through.
    pub fn mark_sent(&mut self, now: DateTime<Utc>) -> Result<Vec<NotificationEvent>, NotificationError> {
        self.guard(NotificationAction::MarkSent, self.attempting())?;
        self.attempts += 1;
        self.last_error = None;
        self.move_to(NotificationStatus::Sent, now);
        Ok(vec![])
    }

    /// An attempt failed. The policy decides: `AUTO_RETRY` schedules the next attempt by
    /// `retry` (or ends `FAILED` once its attempts are spent), `MANUAL_INTERVENTION` waits
    /// for an operator, `IGNORE` gives up without blocking the order.
    pub fn record_failure(
        &mut self,
        policy: FailurePolicy,
        reason: impl Into<String>,
        retry: &RetryPolicy,
        now: DateTime<Utc>,
    ) -> Result<Vec<NotificationEvent>, NotificationError> {
        self.record_failure_not_before(policy, reason, retry, None, now)
    }

    /// [`Notification::record_failure`], the next attempt no sooner than `not_before` from
    /// now when the other side asked for that (a webhook receiver's `Retry-After`): the
    /// longer of it and the backoff.
    ///
    /// # Errors
    /// As [`Notification::record_failure`].
    pub fn record_failure_not_before(
        &mut self,
        policy: FailurePolicy,
        reason: impl Into<String>,
        retry: &RetryPolicy,
        not_before: Option<Duration>,
        now: DateTime<Utc>,
    ) -> Result<Vec<NotificationEvent>, NotificationError> {
        self.guard(NotificationAction::RecordFailure, self.attempting())?;
        self.attempts += 1;
        let reason = reason.into();
        self.last_error = Some(reason.clone());
        self.policy = Some(policy);
        let next = match policy {
            FailurePolicy::AutoRetry => match retry.after(self.attempts, not_before, now) {
                NextAttempt::At(at) => {
                    self.next_attempt_at = Some(at);
                    NotificationStatus::RetryScheduled
                }
                NextAttempt::Operator => NotificationStatus::Failed,
            },
            FailurePolicy::ManualIntervention => NotificationStatus::ManualInterventionRequired,
            FailurePolicy::Ignore => NotificationStatus::Ignored,
        };
        self.move_to(next, now);
        Ok(vec![NotificationEvent::Failed { policy, reason, attempts: self.attempts }])
    }

    /// The retry processor claims a due retry; `lease_until` bounds how long it may hold it.
    pub fn claim(
        &mut self,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<NotificationEvent>, NotificationError> {
        self.guard(NotificationAction::Claim, self.status == NotificationStatus::RetryScheduled)?;
        self.move_to(NotificationStatus::Processing, now);
        self.claimed_until = Some(lease_until);
        Ok(vec![])
    }

    /// An operator asks for another attempt now.
    pub fn reprocess(
        &mut self,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<NotificationEvent>, NotificationError> {
        use NotificationStatus::*;
        self.guard(
            NotificationAction::Reprocess,
            matches!(self.status, RetryScheduled | ManualInterventionRequired | Failed),
        )?;
        self.move_to(Processing, now);
        self.claimed_until = Some(lease_until);
        Ok(vec![])
    }

    /// An operator decides the customer need not be told.
    pub fn ignore(&mut self, now: DateTime<Utc>) -> Result<Vec<NotificationEvent>, NotificationError> {
        use NotificationStatus::*;
        self.guard(
            NotificationAction::Ignore,
            matches!(self.status, RetryScheduled | ManualInterventionRequired | Failed),
        )?;
        self.move_to(Ignored, now);
        // docs/spec.md §3: `policy` shows the current handling; the failure's policy is in the audit.
        self.policy = Some(FailurePolicy::Ignore);
        Ok(vec![])
    }

    /// A claim whose holder vanished goes back to the retry schedule, due at once.
    pub fn release_claim(&mut self, now: DateTime<Utc>) -> Result<Vec<NotificationEvent>, NotificationError> {
        self.guard(NotificationAction::ReleaseClaim, self.status == NotificationStatus::Processing)?;
        self.move_to(NotificationStatus::RetryScheduled, now);
        self.next_attempt_at = Some(now);
        Ok(vec![])
    }

    /// docs/spec.md §3's `policy`: the current handling — [`NO_POLICY`] once sent, else the last
    /// failure's policy (`IGNORE` once an operator ignored it); `None` before any attempt.
    pub fn handling(&self) -> Option<&'static str> {
        if self.status == NotificationStatus::Sent {
            Some(NO_POLICY)
        } else {
            self.policy.map(|p| p.as_str())
        }
    }

    /// Whether this notification no longer keeps its order from completing.
    pub fn is_settled(&self) -> bool {
        matches!(self.status, NotificationStatus::Sent | NotificationStatus::Ignored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NotificationStatus::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    const RETRY: RetryPolicy = RetryPolicy::new(3, Duration::seconds(60));

    fn in_status(status: NotificationStatus) -> Notification {
        let mut n = Notification::new(OrderId::new(), now());
        n.status = status;
        n
    }

    type Action = fn(&mut Notification) -> Result<Vec<NotificationEvent>, NotificationError>;

    #[test]
    fn transition_table() {
        let lease = now() + Duration::minutes(5);
        let actions: [(NotificationAction, Action); 8] = [
            (NotificationAction::MarkSent, |n| n.mark_sent(now())),
            (NotificationAction::RecordFailure, |n| {
                n.record_failure(FailurePolicy::AutoRetry, "x", &RETRY, now())
            }),
            (NotificationAction::RecordFailure, |n| {
                n.record_failure(FailurePolicy::ManualIntervention, "x", &RETRY, now())
            }),
            (NotificationAction::RecordFailure, |n| {
                n.record_failure(FailurePolicy::Ignore, "x", &RETRY, now())
            }),
            (NotificationAction::Claim, |n| n.claim(now() + Duration::minutes(5), now())),
            (NotificationAction::Reprocess, |n| n.reprocess(now() + Duration::minutes(5), now())),
            (NotificationAction::Ignore, |n| n.ignore(now())),
            (NotificationAction::ReleaseClaim, |n| n.release_claim(now())),
        ];
        #[rustfmt::skip]
        let expected: [(NotificationStatus, [Option<NotificationStatus>; 8]); 7] = [
            (Pending, [Some(Sent), Some(RetryScheduled), Some(ManualInterventionRequired), Some(Ignored), None, None, None, None]),
            (Sent, [None; 8]),
            (RetryScheduled, [None, None, None, None, Some(Processing), Some(Processing), Some(Ignored), None]),
            (Processing, [Some(Sent), Some(RetryScheduled), Some(ManualInterventionRequired), Some(Ignored), None, None, None, Some(RetryScheduled)]),
            (ManualInterventionRequired, [None, None, None, None, None, Some(Processing), Some(Ignored), None]),
            (Ignored, [None; 8]),
            (Failed, [None, None, None, None, None, Some(Processing), Some(Ignored), None]),
        ];
        for (from, row) in expected {
            for ((action, apply), next) in actions.iter().zip(row) {
                let mut n = in_status(from);
                let result = apply(&mut n);
                match next {
                    Some(next) => {
                        assert!(result.is_ok(), "{from} {action}: {result:?}");
                        assert_eq!(n.status, next, "{from} {action}");
                        if next == Processing {
                            assert_eq!(n.claimed_until, Some(lease));
                        }
                    }
                    None => {
                        assert_eq!(
                            result,
                            Err(NotificationError::InvalidTransition { from, action: *action }),
                            "{from} {action}"
                        );
                        assert_eq!(n.status, from);
                    }
                }
            }
        }
    }

    /// docs/spec.md §13: a receiver's `Retry-After` is honoured when it asks for longer than
    /// the backoff, never to come back sooner — and never beyond the schedule's own longest
    /// wait (issue 67: ten years parked a notification out of an operator's sight).
    #[test]
    fn a_retry_waits_at_least_as_long_as_the_receiver_asked() {
        let mut n = in_status(Pending);
        n.record_failure_not_before(
            FailurePolicy::AutoRetry,
            "429",
            &RETRY,
            Some(Duration::seconds(100)),
            now(),
        )
        .unwrap();
        assert_eq!(n.next_attempt_at, Some(now() + Duration::seconds(100)));
        let mut parked = in_status(Pending);
        parked
            .record_failure_not_before(
                FailurePolicy::AutoRetry,
                "429",
                &RETRY,
                Some(Duration::days(3650)),
                now(),
            )
            .unwrap();
        assert_eq!(parked.next_attempt_at, Some(now() + Duration::minutes(2)), "the schedule's longest wait");
        n.claim(now(), now()).unwrap();
        n.record_failure_not_before(
            FailurePolicy::AutoRetry,
            "429",
            &RETRY,
            Some(Duration::seconds(2)),
            now(),
        )
        .unwrap();
        assert_eq!(n.next_attempt_at, Some(now() + Duration::seconds(120)), "the backoff, when longer");
    }

    #[test]
    fn auto_retry_backs_off_then_fails_when_attempts_run_out() {
        let mut n = in_status(Pending);
        n.record_failure(FailurePolicy::AutoRetry, "smtp", &RETRY, now()).unwrap();
        assert_eq!(n.status, RetryScheduled);
        assert_eq!(n.next_attempt_at, Some(now() + Duration::seconds(60)));
        n.claim(now(), now()).unwrap();
        n.record_failure(FailurePolicy::AutoRetry, "smtp", &RETRY, now()).unwrap();
        assert_eq!(n.next_attempt_at, Some(now() + Duration::seconds(120)));
        n.claim(now(), now()).unwrap();
        let events = n.record_failure(FailurePolicy::AutoRetry, "smtp", &RETRY, now()).unwrap();
        assert_eq!(n.status, Failed);
        assert_eq!(n.attempts, 3);
        assert_eq!(n.next_attempt_at, None);
        assert_eq!(
            events,
            vec![NotificationEvent::Failed {
                policy: FailurePolicy::AutoRetry,
                reason: "smtp".into(),
                attempts: 3
            }]
        );
    }

    #[test]
    fn backoff_saturates_instead_of_overflowing() {
        assert!(RETRY.delay_after(i32::MAX) > Duration::zero());
    }
}
