//! Webhook subscriptions (docs/spec.md §16): a merchant's endpoints, managed under its path
//! (an `OPERATOR` creates, changes, deletes, reads and rotates secrets; a `VIEWER` reads),
//! their `whsec_` secrets made here from the operating system's randomness, sealed as §15's
//! and opened only for their operator or to sign (`endpoints`); the fan-out from the outbox
//! (`fanout`), the delivery workers (`delivery`) and what an attempt makes of its endpoint
//! (`outcomes`), both within `webhooks.max_rate` (`budget`),
//! and the messages' log, replays and upkeep (`messages`).

pub mod budget;
pub mod delivery;
pub mod endpoints;
pub mod fanout;
pub mod messages;
pub mod outcomes;
#[cfg(test)]
mod tests;

pub use budget::Budget;
pub use delivery::{Deliveries, DeliverySettings};
pub use endpoints::{NewEndpoint, WebhookEndpoints, WebhookSettings};
pub use fanout::FanOut;
pub use messages::{MessagePage, WebhookMessages, WebhookUpkeep};
