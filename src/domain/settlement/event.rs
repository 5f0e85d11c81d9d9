//! Events a settlement emits.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettlementEvent {
    Failed { reason: String },
}

impl SettlementEvent {
    /// The event type, which is also its routing key (docs/spec.md §6).
    pub fn event_type(&self) -> &'static str {
        match self {
            SettlementEvent::Failed { .. } => "settlement.failed",
        }
    }
}
