//! Payment, settlement and notification providers: the simulated ones of mode `mock`
//! (driven by `X-Mock-Scenario`) and the external HTTP client of docs/spec.md §9.

mod external;
mod measured;
mod simulated;

pub use external::{ExternalPaymentGateway, ExternalProviderSettings};
pub use measured::Measured;
pub use simulated::{ProviderCalls, SimulatedNotifier, SimulatedPaymentGateway, SimulatedSettlementGateway};
