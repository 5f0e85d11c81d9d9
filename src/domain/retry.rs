//! The one rule of every retried piece of work (notifications, settlements, unknown payment
//! outcomes, pending refunds, compensations, stalled sagas, the outbox's failed events):
//! after a failed attempt, either the next attempt at a time — the doubling backoff up to its
//! cap, or later where the other side asked for later — or, the attempts spent, an operator
//! (for the outbox: its dead letters).

use chrono::{DateTime, Duration, Utc};

/// How automatic attempts are spaced and bounded: the one settings shape of every retried
/// piece of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (the first included) before an operator must decide.
    pub max_attempts: i32,
    /// Delay before the first retry; doubled for each further one.
    pub backoff_base: Duration,
    /// The longest delay between two attempts.
    pub backoff_cap: Duration,
}

/// What follows a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextAttempt {
    /// Tried again, not before then.
    At(DateTime<Utc>),
    /// The attempts are spent: an operator decides.
    Operator,
}

impl RetryPolicy {
    /// `max_attempts` in all, `backoff_base` doubling, capped at nothing worth naming (a year).
    pub const fn new(max_attempts: i32, backoff_base: Duration) -> RetryPolicy {
        RetryPolicy { max_attempts, backoff_base, backoff_cap: crate::domain::backoff::A_YEAR }
    }

    /// The same, no delay longer than `cap`.
    pub const fn capped(self, cap: Duration) -> RetryPolicy {
        RetryPolicy { backoff_cap: cap, ..self }
    }

    /// Delay after the `attempts`-th failed attempt: `min(base · 2^(attempts-1), cap)`,
    /// saturating.
    pub fn delay_after(&self, attempts: i32) -> Duration {
        let n = attempts.saturating_sub(1).max(0).unsigned_abs();
        crate::domain::backoff::doubled(self.backoff_base, n, self.backoff_cap)
    }

    /// The longest wait the schedule itself ever makes: the delay before its last attempt.
    pub fn longest_delay(&self) -> Duration {
        self.delay_after(self.max_attempts.saturating_sub(1).max(1))
    }

    /// What follows the `attempts`-th failed attempt (the first is 1), failed at `now`: an
    /// operator once `max_attempts` are spent, else the next attempt after the backoff, or
    /// after `not_before` when the other side asked for longer (a `Retry-After`) — but never
    /// later than the schedule's own longest wait: a receiver cannot park work for years
    /// out of an operator's sight.
    pub fn after(&self, attempts: i32, not_before: Option<Duration>, now: DateTime<Utc>) -> NextAttempt {
        if attempts >= self.max_attempts {
            return NextAttempt::Operator;
        }
        let asked = not_before.unwrap_or_else(Duration::zero).min(self.longest_delay());
        NextAttempt::At(now + self.delay_after(attempts).max(asked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_attempt_or_an_operator() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let policy = RetryPolicy::new(4, Duration::seconds(60));
        let minutes = |m| NextAttempt::At(now + Duration::minutes(m));
        // (attempts failed so far, asked to wait, what follows)
        let cases = [
            (1, None, minutes(1)),
            (2, None, minutes(2)),
            (3, None, minutes(4)),
            (3, Some(Duration::minutes(3)), minutes(4)),
            (2, Some(Duration::minutes(3)), minutes(3)),
            // Asked for longer than the schedule ever waits (4 min before its last attempt):
            // that long, no longer (issue 67: a `Retry-After` of ten years).
            (2, Some(Duration::minutes(10)), minutes(4)),
            (1, Some(Duration::days(3650)), minutes(4)),
            (3, Some(Duration::seconds(5)), minutes(4)),
            (4, None, NextAttempt::Operator),
            (4, Some(Duration::minutes(10)), NextAttempt::Operator),
            (9, None, NextAttempt::Operator),
            (0, None, minutes(1)),
        ];
        for (attempts, not_before, expected) in cases {
            assert_eq!(policy.after(attempts, not_before, now), expected, "{attempts} {not_before:?}");
        }
        let once = RetryPolicy::new(1, Duration::seconds(60));
        assert_eq!(once.after(1, None, now), NextAttempt::Operator, "one attempt: straight to an operator");
        let capped = RetryPolicy::new(10, Duration::seconds(60)).capped(Duration::minutes(3));
        assert_eq!(capped.after(2, None, now), minutes(2));
        assert_eq!(capped.after(3, None, now), minutes(3), "the cap caps");
        assert_eq!(capped.after(9, None, now), minutes(3));
        assert_eq!(
            capped.after(3, Some(Duration::minutes(10)), now),
            minutes(3),
            "a Retry-After beyond the cap is cut to it"
        );
        assert_eq!(capped.longest_delay(), Duration::minutes(3));
        assert_eq!(policy.longest_delay(), Duration::minutes(4));
    }
}
