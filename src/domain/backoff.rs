//! The one doubling backoff every retry of the service spaces its attempts by: `min(base ·
//! 2ⁿ, cap)`.
//! Notifications, settlements, payment and refund reconciliation, compensations, stalled
//! sagas, the relay's failed rounds, the provider clients' and the meeting consumer's
//! retries all take their delay from here.

use chrono::Duration;

/// The largest exponent: at most 2¹⁶ times the base.
const MAX_EXPONENT: u32 = 16;

/// No cap worth naming: a year (a schedule that never runs out where nothing caps it).
pub const A_YEAR: Duration = Duration::days(365);

/// `min(base · 2ⁿ, cap)` (n capped at 16), to the millisecond; `cap` too where the product
/// does not fit a duration (counted in milliseconds: chrono's own `checked_mul` lets a
/// product near its bound through).
pub fn doubled(base: Duration, n: u32, cap: Duration) -> Duration {
    base.num_milliseconds()
        .checked_mul(1 << n.min(MAX_EXPONENT))
        .and_then(Duration::try_milliseconds)
        .map_or(cap, |delay| delay.min(cap))
}

/// The same for a pause between two attempts of one call (`std` time): `min(base · 2ⁿ,
/// cap)`, saturating.
pub fn doubled_pause(base: std::time::Duration, n: u32, cap: std::time::Duration) -> std::time::Duration {
    base.saturating_mul(1 << n.min(MAX_EXPONENT)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_its_cap() {
        let minute = Duration::minutes(1);
        assert_eq!(doubled(minute, 0, Duration::days(1)), minute);
        assert_eq!(doubled(minute, 3, Duration::days(1)), Duration::minutes(8));
        assert_eq!(doubled(minute, 40, A_YEAR), Duration::minutes(65_536), "n stops at 16");
        assert_eq!(doubled(minute, 11, Duration::days(1)), Duration::days(1), "the cap caps");
        assert_eq!(doubled(Duration::MAX, 1, Duration::days(1)), Duration::days(1), "overflow is the cap");
        let ms = std::time::Duration::from_millis(50);
        let max = std::time::Duration::MAX;
        assert_eq!(doubled_pause(ms, 2, max), std::time::Duration::from_millis(200));
        assert_eq!(
            doubled_pause(ms, 8, std::time::Duration::from_secs(1)),
            std::time::Duration::from_secs(1)
        );
        assert_eq!(doubled_pause(max, 3, max), max);
    }
}
