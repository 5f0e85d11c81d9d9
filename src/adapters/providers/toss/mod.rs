//! Toss Payments' v1 REST API (docs/spec.md §10; docs/toss.md has every call, the error
//! table and the sources), in four parts:
//!
//! - [`client`]: [`TossClient`] owns the wire: `Authorization: Basic base64("{secret_key}:")`
//!   on every call, the intent's `Idempotency-Key` on every POST, the configured timeout
//!   (60 s for the ledger), bounded retries with the *same* key for what Toss calls temporary,
//!   a pause and the same key for `409 IDEMPOTENT_REQUEST_PROCESSING`, and every answer
//!   checked before it is believed;
//! - [`model`]: the objects Toss answers, as we read and check them, and the bodies we send,
//!   as typed structs;
//! - [`answer`]: what an error means, one table for every call;
//! - [`gateway`]: [`TossPaymentGateway`] maps Toss's answers onto the payment port and the
//!   provider's capability ports (records, ledger, customers).
//!
//! The secret key and billing keys are never logged or put into an error: errors carry
//! Toss's code and message and our reason only.

mod answer;
mod client;
mod gateway;
mod model;

pub use self::answer::{Call, Meaning, meaning};
pub use self::client::{TossClient, TossError, TossSettings};
pub use self::gateway::TossPaymentGateway;
pub use self::model::{KeyIn, TossBilling, TossCancel, TossPayment, TossStatus, TossTransaction};
