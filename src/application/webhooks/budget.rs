//! `webhooks.max_rate`: how many webhook messages a second this process makes (the fan-out)
//! and attempts (the workers), so that on a box the saga and the relay share, webhooks take
//! at most their share of it and the rest waits where it is already kept — the outbox for the
//! fan-out, the messages for the workers (docs/decisions.md, "A budget for webhooks").
//!
//! A token bucket holding at most one second's worth: a quiet second does not buy a burst
//! of many. Time is tokio's, so tests can move it by hand.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

pub struct Budget {
    /// Messages a second; `None`: no bound.
    rate: Option<f64>,
    /// The last refill and the tokens then (below zero: spent ahead, a debt the next
    /// seconds pay).
    state: Mutex<(Instant, f64)>,
}

impl Budget {
    /// `rate` messages a second; 0 is no bound.
    pub fn new(rate: u32) -> Self {
        let rate = (rate > 0).then_some(f64::from(rate));
        Budget { rate, state: Mutex::new((Instant::now(), rate.unwrap_or(0.0))) }
    }

    /// The tokens now, after the refill since the last look.
    fn level(&self, rate: f64) -> std::sync::MutexGuard<'_, (Instant, f64)> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let refill = now.duration_since(state.0).as_secs_f64() * rate;
        *state = (now, (state.1 + refill).min(rate));
        state
    }

    /// How many may be made now (`usize::MAX` without a bound).
    pub fn available(&self) -> usize {
        let Some(rate) = self.rate else { return usize::MAX };
        let state = self.level(rate);
        if state.1 < 1.0 { 0 } else { state.1 as usize }
    }

    /// Takes up to `want` now: how many were taken.
    pub fn take(&self, want: usize) -> usize {
        let Some(rate) = self.rate else { return want };
        let mut state = self.level(rate);
        let whole = if state.1 < 1.0 { 0 } else { state.1 as usize };
        let taken = want.min(whole);
        state.1 -= taken as f64;
        taken
    }

    /// Gives back what was taken and not used.
    pub fn give_back(&self, n: usize) {
        if let Some(rate) = self.rate {
            let mut state = self.level(rate);
            state.1 = (state.1 + n as f64).min(rate);
        }
    }

    /// Spends `n`, going into debt if need be (a batch already made).
    pub fn spend(&self, n: usize) {
        if let Some(rate) = self.rate {
            self.level(rate).1 -= n as f64;
        }
    }

    /// How long until one more may be made (zero when one may now).
    pub fn wait(&self) -> Duration {
        let Some(rate) = self.rate else { return Duration::ZERO };
        let missing = 1.0 - self.level(rate).1;
        if missing <= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(missing / rate) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_second_s_worth_at_most_then_the_rate() {
        let budget = Budget::new(100);
        assert_eq!(budget.take(500), 100, "one second's worth to start");
        assert_eq!(budget.take(1), 0);
        assert_eq!(budget.wait(), Duration::from_millis(10));
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(budget.available(), 25);
        assert_eq!(budget.take(10), 10);
        budget.give_back(4);
        assert_eq!(budget.available(), 19);
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(budget.available(), 100, "a quiet minute buys no more than a second");
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_spent_ahead_is_paid_by_the_next_seconds() {
        let budget = Budget::new(100);
        budget.spend(300);
        assert_eq!(budget.available(), 0);
        assert_eq!(budget.wait(), Duration::from_millis(2010), "200 owed and one more");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(budget.available(), 0);
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(budget.available(), 1);
    }

    #[test]
    fn zero_is_no_bound() {
        let budget = Budget::new(0);
        assert_eq!(budget.take(1_000_000), 1_000_000);
        budget.spend(usize::MAX);
        assert_eq!(budget.available(), usize::MAX);
        assert_eq!(budget.wait(), Duration::ZERO);
    }
}
