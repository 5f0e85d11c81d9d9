//! Payment, settlement and notification providers: the simulated ones of mode `mock`
//! (driven by `X-Mock-Scenario`) and, later, the external HTTP client.

mod simulated;

pub use simulated::{
    ProviderCalls, SimulatedNotifier, SimulatedPaymentGateway, SimulatedSettlementGateway,
};
