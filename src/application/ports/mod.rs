//! Ports: one trait per capability the use cases need, each documenting its contract.
//!
//! Adapters implement them (`SeaOrm...`, `Amqp...`, `Log...`, `Mock...`); application
//! services hold them as `Arc<dyn Port>`.

mod audit;
mod clock;
mod error;
mod idempotency;
mod outbox;
mod providers;
mod repository;

pub use audit::AuditRecord;
pub use clock::Clock;
pub use error::RepoError;
pub use idempotency::{IdempotencyBegin, IdempotencyStore, StoredResponse};
pub use outbox::{
    DeliveryFailure, EventPublisher, FastBatch, FastSettlement, HeldLane, LaneCursor, LaneFilter,
    NewOutboxEvent, OutboxFilter, OutboxRecord, OutboxStats, OutboxStore, PublishOutcome,
};
pub use providers::{
    ApprovalOutcome, ApprovePayment, Behaviour, CancelPayment, GatewayError, LookupOutcome,
    NotificationRequest, Notifier, NotifyFailure, PaymentGateway, Scenario, ScenarioError, SettlementGateway,
    SettlementOutcome, SettlementRequest,
};
pub use repository::{
    AuditLog, Changes, InboxEntry, NewStep, NotificationRepository, OrderContext, OrderFilter, OrderRecord,
    OrderRepository, PaymentRepository, SagaLease, StepRecord, UnitOfWork, Write,
};

#[cfg(test)]
pub use clock::MockClock;
#[cfg(test)]
pub use idempotency::MockIdempotencyStore;
#[cfg(test)]
pub use outbox::{MockEventPublisher, MockOutboxStore};
#[cfg(test)]
pub use providers::{MockNotifier, MockPaymentGateway, MockSettlementGateway};
#[cfg(test)]
pub use repository::{
    MockNotificationRepository, MockOrderRepository, MockPaymentRepository, MockUnitOfWork,
};
