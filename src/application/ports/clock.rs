//! Time, as a port, so that tests decide what "now" is.

use chrono::{DateTime, Utc};

#[cfg_attr(test, mockall::automock)]
pub trait Clock: Send + Sync {
    /// The current instant. MUST be truncated to microseconds (what both databases store), so a
    /// value read back compares equal to the value written.
    fn now(&self) -> DateTime<Utc>;
}
