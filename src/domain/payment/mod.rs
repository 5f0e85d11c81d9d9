//! The payment aggregate: one attempt to take the order's money through the provider.
//!
//! `REQUESTED -> APPROVED | DECLINED | CONFIRMATION_REQUIRED`; `CONFIRMATION_REQUIRED ->
//! APPROVED | DECLINED` (reconciliation); `APPROVED -> CANCELLED` (compensation) |
//! `REFUNDED`. A refund that fails is recorded and the payment stays `APPROVED`.

mod error;
mod event;
#[allow(clippy::module_inception)]
mod payment;
mod status;

pub use error::PaymentError;
pub use event::PaymentEvent;
pub use payment::{Payment, payment_request_id};
pub use status::{PaymentAction, PaymentStatus};
