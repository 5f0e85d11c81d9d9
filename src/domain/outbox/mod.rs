//! The outbox row's life cycle and its retry arithmetic (docs/spec.md §6).
//!
//! The relay changes many rows per statement, so instead of a per-row method each action
//! names the statuses it may leave from and the one it lands in; the store turns that into
//! the `WHERE status IN (...)` of its conditional update. Backoff is a pure function so that
//! it is tested without a clock.

pub mod lanes;

use chrono::{DateTime, Duration, Utc};

use crate::domain::retry::{NextAttempt, RetryPolicy};

spelled!(
    /// Delivery state of one outbox row.
    OutboxStatus {
        Ready => "READY",
        Processing => "PROCESSING",
        RetryWait => "RETRY_WAIT",
        Published => "PUBLISHED",
        DeadLetter => "DEAD_LETTER",
        Discarded => "DISCARDED",
    }
);

spelled!(
    /// What may happen to an outbox row.
    OutboxAction {
        Claim => "CLAIM",
        MarkPublished => "MARK_PUBLISHED",
        MarkFailed => "MARK_FAILED",
        RecoverLease => "RECOVER_LEASE",
        Republish => "REPUBLISH",
        Discard => "DISCARD",
        KeepRestoredProgress => "KEEP_RESTORED_PROGRESS",
    }
);

spelled!(
    /// Why a delivery attempt failed; stored as `failure_code`.
    FailureCode {
        Nacked => "NACK",
        Unroutable => "UNROUTABLE",
        ConfirmTimeout => "CONFIRM_TIMEOUT",
        ConnectionLost => "CONNECTION_LOST",
        BrokerUnavailable => "BROKER_UNAVAILABLE",
        LeaseExpired => "LEASE_EXPIRED",
        Unencodable => "UNENCODABLE",
    }
);

impl FailureCode {
    /// Whether a failure counts against the event's retries: every failure the event may
    /// have caused (a nack, a return, a lost confirm of one message) does; a broker that
    /// could not be reached, or that took no message of a whole wave (blocked by a memory or
    /// disk alarm, docs/operations.md), does not.
    pub fn spends_retry(self) -> bool {
        self != FailureCode::BrokerUnavailable
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboxError {
    #[error("outbox event cannot {action} from {from}")]
    InvalidTransition { from: OutboxStatus, action: OutboxAction },
}

impl OutboxStatus {
    /// Statuses of an earlier event that keep later events of its aggregate waiting:
    /// anything not yet delivered or given up by an operator (docs/spec.md §6 ordering).
    pub const BLOCKING: &'static [OutboxStatus] =
        &[OutboxStatus::Ready, OutboxStatus::Processing, OutboxStatus::RetryWait, OutboxStatus::DeadLetter];
}

impl OutboxAction {
    /// The statuses this action may start from.
    pub fn from_statuses(&self) -> &'static [OutboxStatus] {
        use OutboxStatus::*;
        match self {
            OutboxAction::Claim => &[Ready, RetryWait],
            // A fast-path event that the progress log of a database restored from a logical
            // dump had covered (the old server sent it): kept as sent, as a slow-path row
            // (docs/operations.md, "Restored from a logical dump").
            OutboxAction::KeepRestoredProgress => &[Ready],
            OutboxAction::MarkPublished | OutboxAction::MarkFailed | OutboxAction::RecoverLease => {
                &[Processing]
            }
            OutboxAction::Republish | OutboxAction::Discard => &[DeadLetter],
        }
    }

    /// Where one row lands; `MarkFailed` lands in `RETRY_WAIT` or `DEAD_LETTER` by
    /// [`RetrySchedule::after_failure`], reported here as `RETRY_WAIT`.
    pub fn target(&self) -> OutboxStatus {
        match self {
            OutboxAction::Claim => OutboxStatus::Processing,
            OutboxAction::MarkPublished | OutboxAction::KeepRestoredProgress => OutboxStatus::Published,
            OutboxAction::MarkFailed | OutboxAction::RecoverLease => OutboxStatus::RetryWait,
            OutboxAction::Republish => OutboxStatus::Ready,
            OutboxAction::Discard => OutboxStatus::Discarded,
        }
    }

    /// The transition function for one row.
    pub fn apply(&self, from: OutboxStatus) -> Result<OutboxStatus, OutboxError> {
        if self.from_statuses().contains(&from) {
            Ok(self.target())
        } else {
            Err(OutboxError::InvalidTransition { from, action: *self })
        }
    }
}

/// Retry policy of the relay: `retry_count` failures are retried up to `max_retries`
/// times, spaced `min(base * 2^(n-1), cap)` plus up to 20 % jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    pub max_retries: i32,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
}

/// The fate of a row whose publish failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureOutcome {
    /// `RETRY_WAIT` with the new `retry_count`, due at `next_attempt_at`.
    Retry { retry_count: i32, next_attempt_at: DateTime<Utc> },
    /// `DEAD_LETTER` with the new `retry_count`.
    DeadLetter { retry_count: i32 },
}

/// Up to 20 % of `delay`, as `jitter` in `[0, 1)` says: spreads the retries of a wave.
fn jitter_of(delay: Duration, jitter: f64) -> Duration {
    Duration::milliseconds((delay.num_milliseconds() as f64 * 0.2 * jitter.clamp(0.0, 1.0)) as i64)
}

impl RetrySchedule {
    /// The one retry rule this schedule is: the first attempt and `max_retries` more, the
    /// delay doubling from `backoff_base` up to `backoff_cap`, then the dead letters.
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy::new(self.max_retries.saturating_add(1), self.backoff_base).capped(self.backoff_cap)
    }

    /// The delay before retry number `retry_count` (1-based), without jitter.
    pub fn base_delay(&self, retry_count: i32) -> Duration {
        self.policy().delay_after(retry_count)
    }

    /// Decide what a failure with `code` does to a row that had failed `retry_count` times
    /// before. A failure that is the broker's, not the event's (`code` does not
    /// [`spend a retry`](FailureCode::spends_retry): the broker unreachable, or taking no
    /// messages at all), is retried after `backoff_base` and never dead-letters: an outage
    /// or a resource alarm spends no retry budget. `jitter` in `[0, 1)` stretches the delay
    /// by up to 20 %.
    pub fn after(
        &self,
        code: FailureCode,
        retry_count: i32,
        jitter: f64,
        now: DateTime<Utc>,
    ) -> FailureOutcome {
        if code == FailureCode::Unencodable {
            // The wire contract cannot say this event (docs/spec.md §12): no retry could.
            return FailureOutcome::DeadLetter { retry_count: retry_count.saturating_add(1) };
        }
        if code.spends_retry() {
            return self.after_failure(retry_count, jitter, now);
        }
        let base = self.backoff_base;
        FailureOutcome::Retry { retry_count, next_attempt_at: now + base + jitter_of(base, jitter) }
    }

    /// Decide what a failure does to a row that had failed `retry_count` times before: the
    /// retry rule's next attempt (`jitter` in `[0, 1)` stretching its delay by up to 20 %), or
    /// its operator, who reads the dead letters.
    pub fn after_failure(&self, retry_count: i32, jitter: f64, now: DateTime<Utc>) -> FailureOutcome {
        let retry_count = retry_count.saturating_add(1);
        match self.policy().after(retry_count, None, now) {
            NextAttempt::Operator => FailureOutcome::DeadLetter { retry_count },
            NextAttempt::At(at) => FailureOutcome::Retry {
                retry_count,
                next_attempt_at: at + jitter_of(self.base_delay(retry_count), jitter),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OutboxStatus::*;

    #[test]
    fn an_event_the_contract_cannot_encode_is_dead_at_once() {
        let schedule = RetrySchedule {
            max_retries: 5,
            backoff_base: Duration::seconds(1),
            backoff_cap: Duration::seconds(60),
        };
        let now = Utc::now();
        assert_eq!(
            schedule.after(FailureCode::Unencodable, 0, 0.0, now),
            FailureOutcome::DeadLetter { retry_count: 1 }
        );
        assert!(matches!(schedule.after(FailureCode::Nacked, 0, 0.0, now), FailureOutcome::Retry { .. }));
    }

    #[test]
    fn transition_table() {
        #[rustfmt::skip]
        let expected: [(OutboxAction, [Option<OutboxStatus>; 6]); 7] = [
            // from:           Ready,            Processing,       RetryWait,        Published, DeadLetter,      Discarded
            (OutboxAction::Claim,         [Some(Processing), None,             Some(Processing), None, None,            None]),
            (OutboxAction::MarkPublished, [None,             Some(Published),  None,             None, None,            None]),
            (OutboxAction::MarkFailed,    [None,             Some(RetryWait),  None,             None, None,            None]),
            (OutboxAction::RecoverLease,  [None,             Some(RetryWait),  None,             None, None,            None]),
            (OutboxAction::Republish,     [None,             None,             None,             None, Some(Ready),     None]),
            (OutboxAction::Discard,       [None,             None,             None,             None, Some(Discarded), None]),
            (OutboxAction::KeepRestoredProgress, [Some(Published), None,      None,             None, None,            None]),
        ];
        for (action, row) in expected {
            for (from, next) in OutboxStatus::ALL.iter().zip(row) {
                match next {
                    Some(next) => assert_eq!(action.apply(*from), Ok(next), "{from} {action}"),
                    None => assert_eq!(
                        action.apply(*from),
                        Err(OutboxError::InvalidTransition { from: *from, action }),
                        "{from} {action}"
                    ),
                }
            }
        }
    }

    fn schedule() -> RetrySchedule {
        RetrySchedule {
            max_retries: 3,
            backoff_base: Duration::seconds(10),
            backoff_cap: Duration::seconds(300),
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let s = RetrySchedule { max_retries: 100, ..schedule() };
        let delays: Vec<i64> = (1..=7).map(|n| s.base_delay(n).num_seconds()).collect();
        assert_eq!(delays, vec![10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(s.base_delay(i32::MAX).num_seconds(), 300);
    }

    #[test]
    fn failures_past_max_retries_dead_letter() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let s = schedule();
        assert_eq!(
            s.after_failure(0, 0.0, now),
            FailureOutcome::Retry { retry_count: 1, next_attempt_at: now + Duration::seconds(10) }
        );
        assert_eq!(
            s.after_failure(2, 0.0, now),
            FailureOutcome::Retry { retry_count: 3, next_attempt_at: now + Duration::seconds(40) }
        );
        assert_eq!(s.after_failure(3, 0.0, now), FailureOutcome::DeadLetter { retry_count: 4 });
    }

    #[test]
    fn a_broker_that_takes_nothing_spends_no_retry_and_never_dead_letters() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let s = schedule();
        for code in FailureCode::ALL {
            let after = s.after(*code, 3, 0.0, now);
            if *code == FailureCode::BrokerUnavailable {
                assert_eq!(
                    after,
                    FailureOutcome::Retry { retry_count: 3, next_attempt_at: now + Duration::seconds(10) }
                );
            } else {
                assert_eq!(after, FailureOutcome::DeadLetter { retry_count: 4 }, "{code}");
            }
        }
    }

    #[test]
    fn jitter_adds_at_most_twenty_percent() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let at = |j| match schedule().after_failure(0, j, now) {
            FailureOutcome::Retry { next_attempt_at, .. } => next_attempt_at - now,
            other => panic!("{other:?}"),
        };
        assert_eq!(at(0.0), Duration::seconds(10));
        assert_eq!(at(0.5), Duration::seconds(11));
        assert!(at(0.999_999) <= Duration::seconds(12));
    }
}
