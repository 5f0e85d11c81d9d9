//! The payment step's decision: what a provider's answer to an approval means, as a pure
//! function of the answer — the saga's first approval and reconciliation's approve-again
//! read an answer the same way.

use crate::application::ports::{ApprovalOutcome, GatewayError};

/// What an approval answer means for the saga.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalDecision {
    Approved {
        provider_transaction_id: String,
    },
    /// A business decline (`200 DECLINED` or a `4xx`).
    Declined {
        code: String,
        provider_transaction_id: Option<String>,
        detail: String,
    },
    /// Sent, but no answer we can act on: reconcile, never guess.
    Unknown {
        reason: String,
    },
    /// Never reached the provider (after its bounded retries): nothing was charged.
    Unavailable {
        reason: String,
    },
}

pub fn decide_approval(answer: Result<ApprovalOutcome, GatewayError>) -> ApprovalDecision {
    match answer {
        Ok(ApprovalOutcome::Approved { provider_transaction_id }) => {
            ApprovalDecision::Approved { provider_transaction_id }
        }
        Ok(ApprovalOutcome::Declined { code, provider_transaction_id }) => {
            let detail = format!("declined: {code}");
            ApprovalDecision::Declined { code, provider_transaction_id, detail }
        }
        Err(GatewayError::Rejected { code, message }) => {
            let detail = format!("declined: {code}: {message}");
            ApprovalDecision::Declined { code, provider_transaction_id: None, detail }
        }
        Ok(ApprovalOutcome::Unknown { reason }) => ApprovalDecision::Unknown { reason },
        Err(GatewayError::Unavailable(reason)) => ApprovalDecision::Unavailable { reason },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_has_one_meaning() {
        let cases = [
            (
                Ok(ApprovalOutcome::Approved { provider_transaction_id: "tx".into() }),
                ApprovalDecision::Approved { provider_transaction_id: "tx".into() },
            ),
            (
                Ok(ApprovalOutcome::Declined {
                    code: "CARD".into(),
                    provider_transaction_id: Some("tx".into()),
                }),
                ApprovalDecision::Declined {
                    code: "CARD".into(),
                    provider_transaction_id: Some("tx".into()),
                    detail: "declined: CARD".into(),
                },
            ),
            (
                Err(GatewayError::Rejected { code: "NO_FUNDS".into(), message: "no".into() }),
                ApprovalDecision::Declined {
                    code: "NO_FUNDS".into(),
                    provider_transaction_id: None,
                    detail: "declined: NO_FUNDS: no".into(),
                },
            ),
            (
                Ok(ApprovalOutcome::Unknown { reason: "timed out".into() }),
                ApprovalDecision::Unknown { reason: "timed out".into() },
            ),
            (
                Err(GatewayError::Unavailable("503".into())),
                ApprovalDecision::Unavailable { reason: "503".into() },
            ),
        ];
        for (answer, expected) in cases {
            assert_eq!(decide_approval(answer.clone()), expected, "{answer:?}");
        }
    }
}
