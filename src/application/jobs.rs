//! Background work as jobs: each a [`PeriodicJob`] — its name, how often it runs, one round —
//! and one runner for all of them ([`run`]) that spaces the rounds, logs what a round did and
//! reports each job's health to the worker's readiness ([`LoopProgress`]): a job whose rounds
//! have all failed for longer than `worker.stuck_after` makes the worker unready, named with
//! its last error, until a round succeeds.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::application::AppError;
use crate::application::error::Chain;
use crate::application::health::LoopProgress;

/// Work the worker does on a schedule.
#[async_trait]
pub trait PeriodicJob: Send + Sync {
    /// Its name in the worker's log and readiness.
    fn name(&self) -> &'static str;

    /// How long from one round's start to the next (a round that overruns delays the next).
    fn interval(&self) -> Duration;

    /// How long one round may take before the job counts as silent (a round that never
    /// ends): three intervals, unless the job's rounds are long by nature.
    fn longest_round(&self) -> Duration {
        self.interval().saturating_mul(3)
    }

    /// One round: what it did, worth a log line (`None`: nothing to say).
    ///
    /// # Errors
    /// Why the round failed (the next one is tried all the same).
    async fn round(&self) -> Result<Option<String>, AppError>;
}

/// The pause after the `failures`-th failed round in a row: 1 s doubling, at most `interval`.
fn retry_pause(failures: u32, interval: Duration) -> Duration {
    crate::domain::backoff::doubled_pause(Duration::from_secs(1), failures.saturating_sub(1), interval)
}

/// Runs `job`'s rounds every interval until `stop`, each reported to `progress`: a round that
/// panics is a failed round (the runner goes on, trying again within seconds after a failure), and a round that never ends leaves the job
/// silent, which `progress` reports as stuck.
pub async fn run(job: Arc<dyn PeriodicJob>, progress: Option<Arc<LoopProgress>>, stop: CancellationToken) {
    use futures_util::FutureExt;
    let mut tick = tokio::time::interval(job.interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let name = job.name();
    if let Some(p) = &progress {
        p.started(name, job.longest_round());
    }
    let mut failures = 0u32;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => match std::panic::AssertUnwindSafe(job.round()).catch_unwind().await.unwrap_or_else(|panic| {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(AppError::internal(format!("the round panicked: {why}")))
            }) {
                Ok(done) => {
                    failures = 0;
                    if let Some(done) = done {
                        tracing::info!(job = name, "{done}");
                    }
                    if let Some(p) = &progress {
                        p.ok(name);
                    }
                }
                Err(err) => {
                    tracing::error!(job = name, error = %Chain(&err), "a job's round failed");
                    if let Some(p) = &progress {
                        p.failed(name, Chain(&err));
                    }
                    // Tried again soon (1 s doubling, at most its interval): a job whose
                    // rounds are far apart is not left failing for an interval after a blip.
                    failures = failures.saturating_add(1);
                    tick.reset_after(retry_pause(failures, job.interval()));
                }
            },
        }
    }
    if let Some(p) = &progress {
        p.stopped(name);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Fails its first two rounds, then succeeds.
    struct Flaky(AtomicUsize);

    #[async_trait]
    impl PeriodicJob for Flaky {
        fn name(&self) -> &'static str {
            "flaky"
        }
        fn interval(&self) -> Duration {
            Duration::from_millis(5)
        }
        async fn round(&self) -> Result<Option<String>, AppError> {
            match self.0.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(AppError::unavailable("the database is down")),
                _ => Ok(None),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_round_is_reported_and_a_success_clears_the_failure() {
        let progress = Arc::new(LoopProgress::new(Duration::ZERO));
        let job = Arc::new(Flaky(AtomicUsize::new(0)));
        let stop = CancellationToken::new();
        let runner = tokio::spawn(run(job.clone(), Some(progress.clone()), stop.clone()));
        while job.0.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let stuck = progress.stuck();
        assert!(
            stuck.len() == 1 && stuck[0].starts_with("flaky: ") && stuck[0].contains("database is down"),
            "{stuck:?}"
        );
        while job.0.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(progress.stuck().is_empty(), "a round that succeeds frees the job");
        stop.cancel();
        runner.await.unwrap();
    }

    /// Fails its first round, then succeeds; rounds an hour apart.
    struct Hourly(AtomicUsize);

    #[async_trait]
    impl PeriodicJob for Hourly {
        fn name(&self) -> &'static str {
            "hourly"
        }
        fn interval(&self) -> Duration {
            Duration::from_secs(3600)
        }
        async fn round(&self) -> Result<Option<String>, AppError> {
            match self.0.fetch_add(1, Ordering::SeqCst) {
                0 => Err(AppError::unavailable("the database is locked")),
                _ => Ok(None),
            }
        }
    }

    /// A job whose rounds are far apart is not left failing (and its worker unready) for a
    /// whole interval after one failed round: it tries again within seconds, then keeps its
    /// interval once a round succeeds.
    #[tokio::test(start_paused = true)]
    async fn a_failed_round_is_tried_again_soon_not_an_interval_later() {
        let progress = Arc::new(LoopProgress::new(Duration::ZERO));
        let job = Arc::new(Hourly(AtomicUsize::new(0)));
        let stop = CancellationToken::new();
        let runner = tokio::spawn(run(job.clone(), Some(progress.clone()), stop.clone()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(job.0.load(Ordering::SeqCst), 1, "the first round at once");
        assert_eq!(progress.stuck().len(), 1, "{:?}", progress.stuck());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(job.0.load(Ordering::SeqCst), 2, "tried again within seconds");
        assert!(progress.stuck().is_empty(), "{:?}", progress.stuck());
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(job.0.load(Ordering::SeqCst), 2, "then an interval apart again");
        stop.cancel();
        runner.await.unwrap();
    }

    /// Panics in its first round, then succeeds; or, `hang`, never ends its first round.
    struct Wild {
        rounds: AtomicUsize,
        hang: bool,
    }

    #[async_trait]
    impl PeriodicJob for Wild {
        fn name(&self) -> &'static str {
            "wild"
        }
        fn interval(&self) -> Duration {
            Duration::from_millis(10)
        }
        async fn round(&self) -> Result<Option<String>, AppError> {
            if self.rounds.fetch_add(1, Ordering::SeqCst) == 0 {
                if self.hang {
                    std::future::pending::<()>().await;
                }
                panic!("a bug in the round");
            }
            Ok(None)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_round_is_a_failed_round_and_the_runner_goes_on() {
        let progress = Arc::new(LoopProgress::new(Duration::ZERO));
        let job = Arc::new(Wild { rounds: AtomicUsize::new(0), hang: false });
        let stop = CancellationToken::new();
        let runner = tokio::spawn(run(job.clone(), Some(progress.clone()), stop.clone()));
        while job.rounds.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        let stuck = progress.stuck();
        assert!(stuck.len() == 1 && stuck[0].contains("the round panicked: a bug in the round"), "{stuck:?}");
        while job.rounds.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(progress.stuck().is_empty(), "the next round ran and succeeded");
        stop.cancel();
        runner.await.unwrap();
    }

    #[test]
    fn a_job_silent_past_its_intervals_is_stuck_and_a_stopped_one_is_not() {
        // Real time here: a paused clock does not move `Instant`.
        let progress = LoopProgress::new(Duration::ZERO);
        progress.started("quick", Duration::from_millis(15));
        progress.started("slow", Duration::from_secs(3600));
        assert!(progress.stuck().is_empty(), "just started");
        std::thread::sleep(Duration::from_millis(30));
        let stuck = progress.stuck();
        assert!(stuck.len() == 1 && stuck[0].starts_with("quick: silent for"), "{stuck:?}");
        progress.ok("quick");
        assert!(progress.stuck().is_empty(), "heard from again");
        std::thread::sleep(Duration::from_millis(30));
        progress.stopped("quick");
        assert!(progress.stuck().is_empty(), "a stopped job's silence says nothing");
    }

    #[tokio::test]
    async fn a_round_that_never_ends_leaves_its_job_silent_and_stuck() {
        let progress = Arc::new(LoopProgress::new(Duration::ZERO));
        let job = Arc::new(Wild { rounds: AtomicUsize::new(0), hang: true });
        let stop = CancellationToken::new();
        let runner = tokio::spawn(run(job.clone(), Some(progress.clone()), stop.clone()));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let stuck = loop {
            let stuck = progress.stuck();
            if !stuck.is_empty() || std::time::Instant::now() > deadline {
                break stuck;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert!(stuck.len() == 1 && stuck[0].starts_with("wild: silent for"), "{stuck:?}");
        assert_eq!(job.rounds.load(Ordering::SeqCst), 1, "its first round never ended");
        runner.abort();
    }
}
