//! The payment aggregate: one attempt to take the order's money through the provider.
//!
//! `REQUESTED -> APPROVED | DECLINED | CONFIRMATION_REQUIRED`; `CONFIRMATION_REQUIRED ->
//! APPROVED | DECLINED` (reconciliation); `APPROVED -> CANCELLED` (compensation);
//! refunds, full or partial, each a [`Refund`] of its own: `APPROVED | PARTIALLY_REFUNDED ->
//! REFUND_PENDING` (one refund's intent at a time) `-> PARTIALLY_REFUNDED` while a balance
//! is left, `-> REFUNDED` at 0. A refund the provider refuses is recorded (`FAILED`) and the
//! payment returns to where it was.

mod error;
mod event;
#[allow(clippy::module_inception)]
mod payment;
mod refund;
mod status;

pub use error::PaymentError;
pub use event::PaymentEvent;
pub use payment::{AUTHORIZATION_MISMATCH, Payment, payment_request_id};
pub use refund::{PROVIDER_ACTOR, Refund, refund_key};
pub use status::{PaymentAction, PaymentStatus, RefundStatus};
