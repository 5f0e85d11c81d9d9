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

    /// One round: what it did, worth a log line (`None`: nothing to say).
    ///
    /// # Errors
    /// Why the round failed (the next one is tried all the same).
    async fn round(&self) -> Result<Option<String>, AppError>;
}

/// Runs `job`'s rounds every interval until `stop`, each reported to `progress`.
pub async fn run(job: Arc<dyn PeriodicJob>, progress: Option<Arc<LoopProgress>>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(job.interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let name = job.name();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => match job.round().await {
                Ok(done) => {
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
                }
            },
        }
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
}
