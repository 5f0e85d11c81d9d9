//! Payment, settlement and notification providers: the simulated ones of mode `mock`
//! (driven by `X-Mock-Scenario`), the external HTTP client of docs/spec.md §9 and Toss
//! Payments' v1 API (§10).

mod email;
mod external;
mod measured;
mod simulated;
pub mod toss;
mod transport;
mod webhook;

pub use email::{EmailNotifier, EmailSettings, Locale, NO_RECIPIENT};
pub use external::{ExternalPaymentGateway, ExternalProviderSettings};
pub use measured::Measured;
pub use simulated::{ProviderCalls, SimulatedNotifier, SimulatedPaymentGateway, SimulatedSettlementGateway};
pub use toss::{TossClient, TossError, TossPaymentGateway, TossSettings};
pub use webhook::{
    Delivery, WebhookClient, WebhookNotifier, WebhookSecret, WebhookSettings, WebhookSettlements, signature,
};
