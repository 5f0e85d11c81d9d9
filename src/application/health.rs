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
                let why = if probe.name() == "broker" { " (events wait in the outbox)" } else { "" };
                warnings.push(format!("{}: DOWN; not needed to serve{why}", probe.name()));
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
            // The worker loops a `serve` may embed are reported, never a reason to stop serving.
            Role::Serve => dependency == "database",
            Role::Worker => true,
        }
    }
}

/// Whether the worker's loops make progress (docs/spec.md §5: readiness is what the process
/// needs to do its job): each loop reports every round; one whose rounds have all failed for
/// longer than `stuck_after` (a table locked by another session, a broker that takes
/// nothing) makes a worker unready, named with its last error, until a round succeeds.
pub struct LoopProgress {
    stuck_after: std::time::Duration,
    loops: std::sync::Mutex<std::collections::BTreeMap<&'static str, Failing>>,
    /// The jobs running, each with when it last reported a round and how long it may be
    /// silent: one that says nothing for longer (a round that never ends) is stuck too.
    running: std::sync::Mutex<std::collections::BTreeMap<&'static str, Heard>>,
}

/// When a running job last reported, and how long it may stay silent.
struct Heard {
    last: std::time::Instant,
    allowed: std::time::Duration,
}

/// A loop failing since `since`, with its last error.
struct Failing {
    since: std::time::Instant,
    why: String,
}

impl LoopProgress {
    pub fn new(stuck_after: std::time::Duration) -> Self {
        LoopProgress { stuck_after, loops: Default::default(), running: Default::default() }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<&'static str, Heard>> {
        // A poisoned lock holds a plain map: keep using it.
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `name` started, its rounds taking at most `longest_round`: silent for longer than
    /// that plus `stuck_after`, it is stuck.
    pub fn started(&self, name: &'static str, longest_round: std::time::Duration) {
        let allowed = self.stuck_after + longest_round;
        self.running().insert(name, Heard { last: std::time::Instant::now(), allowed });
    }

    /// `name` stopped (a shutdown): its silence says nothing any more.
    pub fn stopped(&self, name: &'static str) {
        self.running().remove(name);
    }

    fn heard(&self, name: &'static str) {
        if let Some(heard) = self.running().get_mut(name) {
            heard.last = std::time::Instant::now();
        }
    }

    fn loops(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<&'static str, Failing>> {
        // A poisoned lock holds a plain map: keep using it.
        self.loops.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A round of `name` did its work.
    pub fn ok(&self, name: &'static str) {
        self.heard(name);
        self.loops().remove(name);
    }

    /// A round of `name` failed with `why` (the first failure after a success starts the
    /// clock).
    pub fn failed(&self, name: &'static str, why: impl std::fmt::Display) {
        self.heard(name);
        let why: String = why.to_string().chars().take(300).collect();
        self.loops()
            .entry(name)
            .and_modify(|f| f.why = why.clone())
            .or_insert(Failing { since: std::time::Instant::now(), why });
    }

    /// The loops failing for longer than `stuck_after` (`"name: no round has succeeded for
    /// 12s: why"`), and the jobs silent for longer than they may be (`"name: silent for
    /// 95s"`: a round that never ends).
    pub fn stuck(&self) -> Vec<String> {
        let mut stuck: Vec<String> = self
            .loops()
            .iter()
            .filter(|(_, f)| f.since.elapsed() >= self.stuck_after)
            .map(|(name, f)| {
                format!("{name}: no round has succeeded for {}s: {}", f.since.elapsed().as_secs(), f.why)
            })
            .collect();
        stuck.extend(self.running().iter().filter(|(_, h)| h.last.elapsed() > h.allowed).map(|(name, h)| {
            format!("{name}: silent for {}s: a round has not ended", h.last.elapsed().as_secs())
        }));
        stuck
    }
}

#[async_trait]
impl HealthProbe for LoopProgress {
    fn name(&self) -> &'static str {
        "loops"
    }

    async fn is_healthy(&self) -> bool {
        self.stuck().is_empty()
    }

    fn detail(&self) -> Option<String> {
        let stuck = self.stuck();
        (!stuck.is_empty()).then(|| stuck.join("; "))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_is_stuck_once_its_rounds_have_failed_for_long_enough_and_free_at_its_next_success() {
        let progress = LoopProgress::new(std::time::Duration::ZERO);
        assert!(progress.stuck().is_empty());
        progress.failed("outbox relay", "lock timeout");
        progress.failed("outbox relay", "lock timeout again");
        let stuck = progress.stuck();
        assert_eq!(stuck.len(), 1);
        assert!(
            stuck[0].starts_with("outbox relay: ") && stuck[0].ends_with("lock timeout again"),
            "{stuck:?}"
        );
        progress.ok("outbox relay");
        assert!(progress.stuck().is_empty());
        let patient = LoopProgress::new(std::time::Duration::from_secs(3600));
        patient.failed("payment recovery", "down");
        assert!(patient.stuck().is_empty(), "not for long enough yet");
    }
}
