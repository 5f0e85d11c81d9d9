//! The errors of the provider ports: [`GatewayError`], what any call answers when the
//! provider could not be used or refused, and [`CancelError`], a cancel's, which adds the two
//! refusals only a cancel can meet.
//!
//! A business refusal is an outcome, not an error (a decline, a failed settlement); a
//! payment whose outcome cannot be known is [`super::ApprovalOutcome::Unknown`] — never
//! guessed.

use std::error::Error;
use std::fmt;

use super::error::Cause;

/// A provider could not be used; the caller may retry later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayError {
    /// The provider refused for a business reason (4xx): retrying will not help.
    Rejected { code: String, message: String },
    /// 5xx, refused connection or timeout on a call that is safe to repeat: the adapter's
    /// error, kept whole (its text is this error's, its sources follow it).
    Unavailable(Cause),
}

impl GatewayError {
    /// `Unavailable` for a cause told in words.
    pub fn unavailable(text: impl Into<String>) -> Self {
        GatewayError::Unavailable(Cause::msg(text))
    }
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GatewayError::Rejected { code, message } => write!(f, "rejected by provider: {code}: {message}"),
            GatewayError::Unavailable(cause) => write!(f, "provider unavailable: {cause}"),
        }
    }
}

impl Error for GatewayError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            GatewayError::Rejected { .. } => None,
            // The cause's own text is in this one's: its chain goes on from its source.
            GatewayError::Unavailable(cause) => cause.source(),
        }
    }
}

/// Why a cancel did not go through: any call's error, or a refusal only a cancel meets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelError {
    /// Refused or unavailable, as any call.
    Gateway(GatewayError),
    /// The provider has the payment cancelled already — by a cancel it never made under our
    /// key (outside the service, or one whose answer we lost). Nothing moved now; the caller
    /// asks the provider what cancelled it.
    AlreadyCancelled { code: String, message: String },
    /// The balance the cancel was sent with (Toss's `refundableAmount`) is not the
    /// provider's: a cancel was made outside the service and our books are behind. Nothing
    /// moved; the caller records the provider's cancels and decides again.
    StaleBalance { message: String },
}

impl From<GatewayError> for CancelError {
    fn from(error: GatewayError) -> Self {
        CancelError::Gateway(error)
    }
}

impl fmt::Display for CancelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelError::Gateway(error) => error.fmt(f),
            CancelError::AlreadyCancelled { code, message } => {
                write!(f, "the provider has the payment cancelled already: {code}: {message}")
            }
            CancelError::StaleBalance { message } => {
                write!(f, "the provider's refundable balance is not ours: {message}")
            }
        }
    }
}

impl Error for CancelError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            CancelError::Gateway(error) => error.source(),
            CancelError::AlreadyCancelled { .. } | CancelError::StaleBalance { .. } => None,
        }
    }
}
