//! Errors of the settlement aggregate.

use super::status::{SettlementAction, SettlementStatus};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettlementError {
    #[error("settlement cannot {action} from {from}")]
    InvalidTransition { from: SettlementStatus, action: SettlementAction },
}
