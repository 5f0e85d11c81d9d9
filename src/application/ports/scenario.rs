//! Behaviours the simulated providers are asked to show (`X-Mock-Scenario`, mock mode
//! only): each use case passes them through to the provider it calls.

use std::fmt;

/// A behaviour a mock provider is asked to show (docs/spec.md §4, `X-Mock-Scenario`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Decline,
    Timeout,
    Fail,
    /// Fail this many times, then succeed.
    AutoRetry(u32),
    Manual,
    Ignore,
}

/// Requested mock behaviours, one per target. Empty means "everything succeeds".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scenario {
    pub payment: Option<Behaviour>,
    pub settlement: Option<Behaviour>,
    pub notification: Option<Behaviour>,
    pub refund: Option<Behaviour>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown scenario `{0}`; expected a comma-separated list of payment=decline|timeout, settlement=fail, notification=auto_retry[:N]|manual|ignore, refund=fail"
)]
pub struct ScenarioError(pub String);

impl Scenario {
    /// Parses `target=behaviour[,target=behaviour...]`; whitespace around parts is ignored.
    ///
    /// # Errors
    /// MUST return [`ScenarioError`] naming the first part that is not a known target/behaviour pair.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        let mut scenario = Scenario::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || ScenarioError(part.chars().take(64).collect());
            let (target, behaviour) = part.split_once('=').ok_or_else(bad)?;
            let (target, behaviour) = (target.trim(), behaviour.trim());
            match (target, behaviour) {
                ("payment", "decline") => scenario.payment = Some(Behaviour::Decline),
                ("payment", "timeout") => scenario.payment = Some(Behaviour::Timeout),
                ("settlement", "fail") => scenario.settlement = Some(Behaviour::Fail),
                ("refund", "fail") => scenario.refund = Some(Behaviour::Fail),
                ("notification", "manual") => scenario.notification = Some(Behaviour::Manual),
                ("notification", "ignore") => scenario.notification = Some(Behaviour::Ignore),
                ("notification", b) if b == "auto_retry" || b.starts_with("auto_retry:") => {
                    let times = match b.strip_prefix("auto_retry:") {
                        None => 1,
                        Some(n) => n.parse::<u32>().ok().filter(|n| *n <= 1000).ok_or_else(bad)?,
                    };
                    scenario.notification = Some(Behaviour::AutoRetry(times));
                }
                _ => return Err(bad()),
            }
        }
        Ok(scenario)
    }

    pub fn is_empty(&self) -> bool {
        *self == Scenario::default()
    }
}

impl fmt::Display for Scenario {
    /// The canonical spelling, which [`Scenario::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let name = |b: Behaviour| match b {
            Behaviour::Decline => "decline".to_string(),
            Behaviour::Timeout => "timeout".to_string(),
            Behaviour::Fail => "fail".to_string(),
            Behaviour::AutoRetry(n) => format!("auto_retry:{n}"),
            Behaviour::Manual => "manual".to_string(),
            Behaviour::Ignore => "ignore".to_string(),
        };
        for (target, behaviour) in [
            ("payment", self.payment),
            ("settlement", self.settlement),
            ("notification", self.notification),
            ("refund", self.refund),
        ] {
            if let Some(b) = behaviour {
                parts.push(format!("{target}={}", name(b)));
            }
        }
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_parse_and_print_canonically() {
        let s = Scenario::parse(" payment=decline , notification=auto_retry:3,refund=fail").unwrap();
        assert_eq!(s.payment, Some(Behaviour::Decline));
        assert_eq!(s.notification, Some(Behaviour::AutoRetry(3)));
        assert_eq!(s.to_string(), "payment=decline,notification=auto_retry:3,refund=fail");
        assert_eq!(Scenario::parse(&s.to_string()).unwrap(), s);
        assert_eq!(
            Scenario::parse("notification=auto_retry").unwrap().notification,
            Some(Behaviour::AutoRetry(1))
        );
        assert!(Scenario::parse("").unwrap().is_empty());
    }

    #[test]
    fn unknown_scenarios_are_refused() {
        for bad in ["payment=explode", "payment", "x=y", "notification=auto_retry:-1", "settlement=decline"] {
            assert!(Scenario::parse(bad).is_err(), "{bad}");
        }
    }
}
