//! The one rule of every retried piece of work (notifications, settlements, unknown payment
//! outcomes, pending refunds): after a failed attempt, either the next attempt at a time —
//! the doubling backoff, or later where the other side asked for later — or, the attempts
//! spent, an operator.

use chrono::{DateTime, Duration, Utc};

/// How automatic attempts are spaced and bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (the first included) before an operator must decide.
    pub max_attempts: i32,
    /// Delay before the first retry; doubled for each further one.
    pub backoff_base: Duration,
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
    /// Delay after the `attempts`-th failed attempt: `base · 2^(attempts-1)`, saturating.
    pub fn delay_after(&self, attempts: i32) -> Duration {
        let n = attempts.saturating_sub(1).max(0).unsigned_abs();
        crate::domain::backoff::doubled(self.backoff_base, n, crate::domain::backoff::A_YEAR)
    }

    /// What follows the `attempts`-th failed attempt (the first is 1), failed at `now`: an
    /// operator once `max_attempts` are spent, else the next attempt after the backoff, or
    /// after `not_before` when the other side asked for longer (a `Retry-After`).
    pub fn after(&self, attempts: i32, not_before: Option<Duration>, now: DateTime<Utc>) -> NextAttempt {
        if attempts >= self.max_attempts {
            return NextAttempt::Operator;
        }
        NextAttempt::At(now + self.delay_after(attempts).max(not_before.unwrap_or_else(Duration::zero)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_attempt_or_an_operator() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let policy = RetryPolicy { max_attempts: 4, backoff_base: Duration::seconds(60) };
        let minutes = |m| NextAttempt::At(now + Duration::minutes(m));
        // (attempts failed so far, asked to wait, what follows)
        let cases = [
            (1, None, minutes(1)),
            (2, None, minutes(2)),
            (3, None, minutes(4)),
            (3, Some(Duration::minutes(10)), minutes(10)),
            (3, Some(Duration::seconds(5)), minutes(4)),
            (4, None, NextAttempt::Operator),
            (4, Some(Duration::minutes(10)), NextAttempt::Operator),
            (9, None, NextAttempt::Operator),
            (0, None, minutes(1)),
        ];
        for (attempts, not_before, expected) in cases {
            assert_eq!(policy.after(attempts, not_before, now), expected, "{attempts} {not_before:?}");
        }
        let once = RetryPolicy { max_attempts: 1, backoff_base: Duration::seconds(60) };
        assert_eq!(once.after(1, None, now), NextAttempt::Operator, "one attempt: straight to an operator");
    }
}
