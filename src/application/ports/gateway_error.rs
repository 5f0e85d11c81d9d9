//! The one error every provider port returns when the provider could not be used.
//!
//! A business refusal is an outcome, not an error (a decline, a failed settlement); a
//! payment whose outcome cannot be known is [`super::ApprovalOutcome::Unknown`] — never
//! guessed.

/// A provider could not be used; the caller may retry later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// The provider refused for a business reason (4xx): retrying will not help.
    #[error("rejected by provider: {code}: {message}")]
    Rejected { code: String, message: String },
    /// 5xx, refused connection or timeout on a call that is safe to repeat.
    #[error("provider unavailable: {0}")]
    Unavailable(String),
}
