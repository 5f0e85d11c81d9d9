//! Readiness: whether the dependencies this process needs answer right now.

use std::sync::Arc;

use async_trait::async_trait;

/// Something whose reachability decides readiness (database, broker).
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait HealthProbe: Send + Sync {
    /// The dependency's name in `/health/ready` (`database`, `broker`).
    fn name(&self) -> &'static str;

    /// Whether it answers now. Must return within a few seconds and never panic.
    async fn is_healthy(&self) -> bool;
}

pub struct Readiness {
    probes: Vec<Arc<dyn HealthProbe>>,
    /// Simulated parts of a production set-up, shown with every answer (docs/spec.md §2).
    warnings: Vec<String>,
}

impl Readiness {
    pub fn new(probes: Vec<Arc<dyn HealthProbe>>) -> Self {
        Readiness { probes, warnings: Vec::new() }
    }

    /// Adds what an operator must see about this process's set-up.
    pub fn with_warnings(mut self, warnings: Vec<String>) -> Self {
        self.warnings = warnings;
        self
    }

    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Each dependency with its state; ready when all are healthy.
    pub async fn check(&self) -> (bool, Vec<(&'static str, bool)>) {
        let mut results = Vec::with_capacity(self.probes.len());
        for probe in &self.probes {
            let healthy = tokio::time::timeout(std::time::Duration::from_secs(3), probe.is_healthy())
                .await
                .unwrap_or(false);
            results.push((probe.name(), healthy));
        }
        (results.iter().all(|(_, ok)| *ok), results)
    }
}
