//! The system clock.

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
