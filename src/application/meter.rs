//! Where a service's metrics go. Each running app has its own registry ([`Meter`]), so
//! that two apps in one process (the tests under `cargo test`) never add to each other's
//! counters; services record through it instead of the process-global recorder.

use std::sync::Arc;

/// A handle on one app's metrics registry; `Meter::default()` records to the global one.
#[derive(Clone, Default)]
pub struct Meter(Option<Arc<dyn metrics::Recorder + Send + Sync>>);

impl Meter {
    pub fn new(recorder: Arc<dyn metrics::Recorder + Send + Sync>) -> Self {
        Meter(Some(recorder))
    }

    /// Runs `record` (which uses the `metrics::counter!` / `gauge!` / `histogram!` macros)
    /// against this registry.
    pub fn record<T>(&self, record: impl FnOnce() -> T) -> T {
        match &self.0 {
            Some(recorder) => metrics::with_local_recorder(recorder.as_ref(), record),
            None => record(),
        }
    }
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Meter(local)" } else { "Meter(global)" })
    }
}
