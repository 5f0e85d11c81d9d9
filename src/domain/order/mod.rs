//! The order aggregate: what was bought, by whom, and where it stands in the saga.
//!
//! `CREATED -> PAYMENT_APPROVED -> SETTLEMENT_REQUESTED -> COMPLETED`, with `FAILED`,
//! `CANCELLED` and `PENDING_CONFIRMATION` as docs/spec.md §3 describes. The saga's step records
//! (`step.rs`) live here too because they are part of an order's story.

mod error;
mod event;
#[allow(clippy::module_inception)]
mod order;
mod status;
mod step;

pub use error::OrderError;
pub use event::OrderEvent;
pub use order::{NewOrder, NewOrderItem, Order, OrderItem, limits, registration_key};
pub use status::{FailureReason, FailureStage, OrderAction, OrderSource, OrderStart, OrderStatus};
pub use step::{SagaStep, StepFact, StepStatus};
