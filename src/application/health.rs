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

    /// What an operator should know of its state beyond up or down (a broker blocking
    /// publishers), shown in `/health/ready`'s warnings whatever the role.
    fn detail(&self) -> Option<String> {
        None
    }
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

    /// Each dependency with its state; ready when every one `role` needs is healthy. A
    /// dependency it does not need is reported all the same, and when it is down that is a
    /// warning (`serve` without its broker: orders are accepted, their events wait in the
    /// outbox).
    pub async fn check(&self, role: Role) -> Checked {
        let mut checks = Vec::with_capacity(self.probes.len());
        let mut warnings = self.warnings.clone();
        let mut ready = true;
        for probe in &self.probes {
            let healthy = tokio::time::timeout(std::time::Duration::from_secs(3), probe.is_healthy())
                .await
                .unwrap_or(false);
            let needed = role.needs(probe.name());
            if !healthy && needed {
                ready = false;
            } else if !healthy {
                warnings
                    .push(format!("{}: DOWN; not needed to serve (events wait in the outbox)", probe.name()));
            }
            if let Some(detail) = probe.detail() {
                warnings.push(format!("{}: {detail}", probe.name()));
            }
            checks.push((probe.name(), healthy));
        }
        Checked { ready, checks, warnings }
    }
}

/// What a process needs to do its job (docs/spec.md §5, `/health/ready`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `serve`: the database.
    Serve,
    /// `worker`: the database and the broker.
    Worker,
}

impl Role {
    fn needs(self, dependency: &str) -> bool {
        match self {
            Role::Serve => dependency == "database",
            Role::Worker => true,
        }
    }
}

/// A readiness answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub ready: bool,
    /// Every dependency with whether it answered.
    pub checks: Vec<(&'static str, bool)>,
    /// The set-up's warnings and the dependencies down that this role does not need.
    pub warnings: Vec<String>,
}
