//! Ports: one trait per capability the use cases need, one file each, every method's
//! contract stated as what implementors MUST do and return.
//!
//! Adapters implement them (`SeaOrm...`, `Amqp...`, `Log...`, `Simulated...`); application
//! services hold them as `Arc<dyn Port>`; unit tests use the `Mock...` doubles mockall
//! generates.
//!
//! Storage ports return [`RepoError`]. Unless a method says otherwise, every one of them
//! MUST return `Unavailable` (with its cause) when the database cannot be reached or fails,
//! having written nothing; `Corrupt` when a stored value does not map back to the domain;
//! and `Conflict` only where its doc says so. "Not found" is never an error: a look-up
//! returns `Ok(None)` or an empty list.
//!
//! - [`unit_of_work`](UnitOfWork) — every write, in one transaction.
//! - [`order_repository`](OrderRepository), [`payment_repository`](PaymentRepository),
//!   [`notification_repository`](NotificationRepository) — reads.
//! - [`audit_log`](AuditLog) — audit rows and their retention.
//! - [`outbox_store`](OutboxStore: [`RelayStore`], [`OutboxUpkeep`], [`OutboxOperations`])
//!   and [`event_publisher`](EventPublisher) — the outbox.
//! - [`idempotency`](IdempotencyStore) — idempotency keys.
//! - [`payment_gateway`](PaymentGateway), [`settlement_gateway`](SettlementGateway),
//!   [`notifier`](Notifier) — the providers the saga calls, with [`GatewayError`] and the
//!   mock [`Scenario`].
//! - [`meeting_fees`](MeetingFees) — a meeting's fee, from the platform that keeps it.
//! - [`settlement_repository`](SettlementRepository) — settlements waiting for a retry or an operator.
//! - [`merchant_store`](MerchantDirectory, [`MerchantAccessStore`]) — merchants, stores,
//!   memberships and API keys.
//! - [`secret_box`](SecretBox) — what is sealed at rest under `secrets.key`.
//! - [`webhook_store`](WebhookEndpointStore) — merchants' webhook endpoints (§16).
//! - [`webhook_delivery`](WebhookFanoutStore, [`WebhookDeliveryStore`],
//!   [`WebhookMessageStore`], [`WebhookSender`]) — their messages, attempts and the call.
//! - [`clock`](Clock) — time.

mod audit_log;
mod clock;
mod error;
mod event_publisher;
mod gateway_error;
mod idempotency;
mod ledger_store;
mod meeting_fees;
mod merchant_store;
mod notification_repository;
mod notifier;
mod order_repository;
mod outbox_store;
mod payment_gateway;
mod payment_methods;
mod payment_repository;
mod scenario;
mod secret_box;
mod settlement_gateway;
mod settlement_repository;
mod unit_of_work;
mod webhook_delivery;
mod webhook_store;

pub use audit_log::{AuditLog, AuditRecord};
pub use clock::Clock;
pub use error::{Cause, RepoError};
pub use event_publisher::{BrokerUnavailable, EventPublisher, PendingVerdicts, PublishOutcome};
pub use gateway_error::{CancelError, GatewayError};
pub use idempotency::{IdempotencyBegin, IdempotencyStore, StoredResponse};
pub use ledger_store::{LedgerRun, LedgerStore, PayoutStore};
pub use meeting_fees::{MeetingFee, MeetingFees, Unchargeable};
pub use merchant_store::{
    MerchantAccessStore, MerchantChannelStore, MerchantDirectory, MerchantReports, ReportLine,
};
pub use notification_repository::NotificationRepository;
pub use notifier::{NotificationRequest, Notifier, NotifyFailure};
pub use order_repository::{
    InboxEntry, MeetingOrders, Numbered, OrderContext, OrderFilter, OrderRecord, OrderRepository, SagaLease,
    SagaRuns, StepRecord,
};
pub use outbox_store::{
    BatchToken, DeliveryFailure, FastBatch, FastRecord, HeldLane, NewOutboxEvent, OutboxFilter,
    OutboxOperations, OutboxRecord, OutboxStats, OutboxStore, OutboxUpkeep, RelayStore, RestoredRebase,
};
pub use payment_gateway::{
    ApprovalOutcome, ApprovePayment, BillingKey, CancelPayment, CancelReceipt, CardKeyIn, IssuedCard,
    KeyInCharge, KeyedCard, LedgerPage, LookupOutcome, PaymentAuthorization, PaymentGateway, ProviderCancel,
    ProviderCustomers, ProviderFailure, ProviderLedger, ProviderRecord, ProviderRecords, SettlementPage,
};
pub use payment_methods::{PaymentMethodRepository, SavedCard};
pub use payment_repository::{
    CustomerPayments, MeetingPayment, MeetingPayments, PaymentRepository, PaymentSortKey,
};
pub use scenario::{Behaviour, Scenario, ScenarioError};
pub use secret_box::{SealError, Sealed, SecretBox};
pub use settlement_gateway::{SettlementGateway, SettlementOutcome, SettlementRequest};
pub use settlement_repository::{ListedSettlement, SettlementRepository};
pub use unit_of_work::{Changes, NewStep, Placed, UnitOfWork, Write};
pub use webhook_delivery::{
    AttemptRecord, DeliveryRecord, DueMessage, EndpointChange, FanoutBatch, FanoutPosition, MessageQuery,
    MessageView, OutboxEventView, PostAnswer, PostError, Recorded, RefusedHost, WebhookDeliveryStore,
    WebhookEvent, WebhookFanoutStore, WebhookMessageStore, WebhookPost, WebhookSender,
};
pub use webhook_store::{EndpointSecrets, WebhookEndpointStore};

#[cfg(test)]
pub use clock::MockClock;
#[cfg(test)]
pub use event_publisher::MockEventPublisher;
#[cfg(test)]
pub use idempotency::MockIdempotencyStore;
#[cfg(test)]
pub use ledger_store::{MockLedgerStore, MockPayoutStore};
#[cfg(test)]
pub use merchant_store::{MockMerchantAccessStore, MockMerchantDirectory, MockMerchantReports};
#[cfg(test)]
pub use notification_repository::MockNotificationRepository;
#[cfg(test)]
pub use notifier::MockNotifier;
#[cfg(test)]
pub use order_repository::{MockMeetingOrders, MockOrderRepository, MockSagaRuns};
#[cfg(test)]
pub use outbox_store::{MockOutboxOperations, MockOutboxUpkeep, MockRelayStore};
#[cfg(test)]
pub use payment_gateway::{MockCardKeyIn, MockPaymentGateway};
#[cfg(test)]
pub use payment_methods::MockPaymentMethodRepository;
#[cfg(test)]
pub use payment_repository::{MockMeetingPayments, MockPaymentRepository};
#[cfg(test)]
pub use secret_box::MockSecretBox;
#[cfg(test)]
pub use settlement_gateway::MockSettlementGateway;
#[cfg(test)]
pub use unit_of_work::MockUnitOfWork;
#[cfg(test)]
pub use webhook_delivery::{
    MockWebhookDeliveryStore, MockWebhookFanoutStore, MockWebhookMessageStore, MockWebhookSender,
};
