//! The one SeaORM value behind the order-side ports.

use std::sync::Arc;

use sea_orm::DatabaseConnection;
use tokio::sync::Notify;

use crate::domain::outbox::lanes::DEFAULT_LANES;

/// Orders, payments, notifications and the audit trail over SeaORM: one value implementing
/// their read ports (`orders.rs`, `payments.rs`, `notifications.rs`, `audit.rs`) and the
/// [`UnitOfWork`](crate::application::ports::UnitOfWork) (`unit_of_work.rs`). It wakes the in-process relay after a
/// commit that appended outbox events, and on PostgreSQL `NOTIFY`s other processes.
#[derive(Clone)]
pub struct SeaOrmStore {
    pub(super) db: DatabaseConnection,
    pub(super) relay_wake: Arc<Notify>,
    /// `outbox.lanes`: each event is stored with its aggregate's lane.
    pub(super) lanes: u16,
}

impl SeaOrmStore {
    pub fn new(db: DatabaseConnection, relay_wake: Arc<Notify>) -> Self {
        SeaOrmStore { db, relay_wake, lanes: DEFAULT_LANES }
    }

    /// Stores events in `lanes` lanes (`outbox.lanes`; 16 unless set).
    pub fn with_lanes(mut self, lanes: u16) -> Self {
        self.lanes = lanes;
        self
    }
}
