//! Payment, settlement and notification providers: the simulated ones of mode `mock`
//! (driven by `X-Mock-Scenario`), the external HTTP client of docs/spec.md §9 and Toss
//! Payments' v1 API (§10).

mod email;
mod external;
mod measured;
mod routed;
mod simulated;
pub mod toss;
mod transport;
mod webhook;

pub use email::{EmailNotifier, EmailSettings, Locale, NO_RECIPIENT};
pub use external::{ExternalPaymentGateway, ExternalProviderSettings};
pub use measured::Measured;
pub use routed::{MERCHANT_WEBHOOK_TIMEOUT, RoutedNotifier, RoutedSettlements};
pub use simulated::{ProviderCalls, SimulatedNotifier, SimulatedPaymentGateway, SimulatedSettlementGateway};
pub use toss::{TossClient, TossError, TossPaymentGateway, TossSettings};
pub use webhook::{
    Delivery, WebhookClient, WebhookNotifier, WebhookSecret, WebhookSettings, WebhookSettlements, signature,
};

pub use crate::adapters::SetupError;

/// How a provider's answer breaks its protocol (unreadable, over-long, out of range, a
/// control character): the caller treats such an answer as an unknown outcome, never as a
/// decision. Its text names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BrokenAnswer(pub String);

impl From<String> for BrokenAnswer {
    fn from(why: String) -> Self {
        BrokenAnswer(why)
    }
}

impl From<&str> for BrokenAnswer {
    fn from(why: &str) -> Self {
        BrokenAnswer(why.to_owned())
    }
}
