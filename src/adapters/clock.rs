//! Clocks: the system clock, and a manual one for tests.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};

use crate::application::ports::Clock;

pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        let now = Utc::now();
        // Both databases keep microseconds; truncating here makes what is read back equal
        // to what was written. Truncation of a valid instant cannot fail.
        now.duration_trunc(TimeDelta::microseconds(1)).unwrap_or(now)
    }
}

/// A clock that moves only when told to: tests drive backoffs, leases and retention by
/// advancing it instead of sleeping. Starts at the system time, so that tokens and rows
/// written by other means still compare sensibly.
pub struct ManualClock(std::sync::Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new() -> Self {
        ManualClock(std::sync::Mutex::new(SystemClock.now()))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: TimeDelta) {
        let mut now = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += by;
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new();
        let start = clock.now();
        assert_eq!(clock.now(), start);
        clock.advance(TimeDelta::seconds(90));
        assert_eq!(clock.now() - start, TimeDelta::seconds(90));
    }
}
