//! The money's use cases, beyond the saga's own charge and settlement: what moves money back,
//! what checks it against the provider's books, and what the provider keeps for a customer.
//!
//! - [`refunds`]: a refund asked for (HTTP, an inbound cancellation, an operator), its intent
//!   committed before the provider's cancel, the answer decided by a pure table
//!   (`refunds/decide.rs`), the provider's own cancels recorded as its refunds;
//! - [`ledger`]: the daily run that pages the provider's transactions for a day and matches
//!   each against our approvals and refunds, and its settlements against our transactions
//!   (what it pays out), storing the payouts and what does not match as findings;
//! - [`payment_methods`]: a customer's saved card (billing key), saved and forgotten with
//!   its audit row in the same transaction;
//! - [`provider_view`]: the provider's own record of a payment, for support;
//! - [`member_payments`]: a member's own payments (the momo dialect): listed, looked up at
//!   the provider, refunded;
//! - [`key_in`]: a member's meeting fee charged to a keyed-in card (the momo dialect's test
//!   payments), placed as an order only once the provider took it.
//!
//! Each uses only the provider's capability ports it needs (`ProviderLedger`,
//! `ProviderCustomers`, `ProviderRecords`, `CardKeyIn`), present only where the provider has them.

pub mod key_in;
pub mod ledger;
pub mod member_payments;
pub mod payment_methods;
pub mod provider_view;
pub mod refunds;
