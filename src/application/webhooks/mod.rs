//! Webhook subscriptions (docs/spec.md §16): a merchant's endpoints, managed under its path
//! (an `OPERATOR` creates, changes, deletes, reads and rotates secrets; a `VIEWER` reads),
//! their `whsec_` secrets made here from the operating system's randomness, sealed as §15's
//! and opened only for their operator or to sign. Delivery is `delivery`'s.

pub mod endpoints;

pub use endpoints::{NewEndpoint, WebhookEndpoints, WebhookSettings};
