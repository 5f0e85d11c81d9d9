//! Read use cases: an order's detail and the order list, with who-may-see-what applied.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::application::audit::entity;
use crate::application::envelopes::ORDER_AGGREGATE;
use crate::application::ports::{
    AuditRecord, OrderFilter, OrderRecord, OrderRepository, OutboxOperations, OutboxRecord, StepRecord,
};
use crate::application::{Actor, AppError};
use crate::domain::ids::{MerchantId, OrderId, PaymentId, StoreId};
use crate::domain::order::{Order, OrderSource, OrderStatus};

/// Largest page a client may ask for.
pub const MAX_PAGE: u32 = 100;
pub const DEFAULT_PAGE: u32 = 20;

/// A page of orders, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderPage {
    pub items: Vec<Order>,
    /// Pass as `cursor` to get the next page; `None` on the last page.
    pub next_cursor: Option<OrderId>,
}

/// What a caller asks the list for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOrders {
    /// Only this merchant's (the operator's choice; anyone else lists its own merchant's).
    pub merchant_id: Option<MerchantId>,
    pub store_id: Option<StoreId>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub status: Option<OrderStatus>,
    pub customer_id: Option<String>,
    /// Only the order numbered so.
    pub number: Option<i64>,
    /// Only orders that came through this API.
    pub source: Option<OrderSource>,
    pub limit: Option<u32>,
    pub cursor: Option<OrderId>,
}

/// An order's whole story: its saga steps, its events with their delivery state, and
/// its audit trail, each oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderFlow {
    /// The order's payment, if it has one.
    pub payment_id: Option<PaymentId>,
    pub steps: Vec<StepRecord>,
    pub events: Vec<OutboxRecord>,
    pub audit: Vec<AuditRecord>,
}

pub struct OrderQueries {
    orders: Arc<dyn OrderRepository>,
    outbox: Arc<dyn OutboxOperations>,
}

impl OrderQueries {
    pub fn new(orders: Arc<dyn OrderRepository>, outbox: Arc<dyn OutboxOperations>) -> Self {
        OrderQueries { orders, outbox }
    }

    /// Orders per status, for metrics.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn count_by_status(&self) -> Result<Vec<(OrderStatus, i64)>, AppError> {
        Ok(self.orders.count_by_status().await?)
    }

    /// The order's steps, events and audit rows.
    ///
    /// # Errors
    /// `NotFound` as for [`Self::get_order`].
    pub async fn flow(&self, actor: &Actor, id: OrderId) -> Result<OrderFlow, AppError> {
        let record = self.get_order(actor, id).await?;
        let key = id.to_string();
        let events = self.outbox.for_aggregate(ORDER_AGGREGATE, &key).await?;
        let audit = self.orders.audit_for(entity::ORDER, &key).await?;
        Ok(OrderFlow { payment_id: record.payment.map(|p| p.id), steps: record.steps, events, audit })
    }

    /// One order with its saga state.
    ///
    /// # Errors
    /// `NotFound` when it does not exist or belongs to another customer (the two are
    /// indistinguishable on purpose).
    pub async fn get_order(&self, actor: &Actor, id: OrderId) -> Result<OrderRecord, AppError> {
        match self.orders.get(id).await? {
            Some(record) if actor.may_access(&record.order) => Ok(record),
            _ => Err(AppError::NotFound("order")),
        }
    }

    /// The id of the order numbered `number` (docs/spec.md §3); whether the caller may see
    /// it is for the use case it is handed to.
    ///
    /// # Errors
    /// `NotFound` when there is none; `Unavailable` when the database fails.
    pub async fn id_by_number(&self, number: i64) -> Result<OrderId, AppError> {
        self.orders.find_by_number(number).await?.ok_or(AppError::NotFound("order"))
    }

    /// The outbox events of an order the caller has read, oldest first.
    ///
    /// # Errors
    /// `NotFound` when the caller may not see the order.
    pub async fn events_of(
        &self,
        actor: &Actor,
        record: &OrderRecord,
    ) -> Result<Vec<OutboxRecord>, AppError> {
        if !actor.may_access(&record.order) {
            return Err(AppError::NotFound("order"));
        }
        Ok(self.outbox.for_aggregate(ORDER_AGGREGATE, &record.order.id.to_string()).await?)
    }

    /// The order numbered `number` (docs/spec.md §3), as [`Self::get_order`].
    ///
    /// # Errors
    /// `NotFound` when there is none or the caller may not see it.
    pub async fn order_by_number(&self, actor: &Actor, number: i64) -> Result<OrderRecord, AppError> {
        let id = self.id_by_number(number).await?;
        self.get_order(actor, id).await
    }

    /// Orders newest first; a customer sees only their own, an admin everyone's.
    ///
    /// # Errors
    /// `Validation` for a limit outside 1..=100; `Unavailable` when the database fails.
    pub async fn list_orders(&self, actor: &Actor, query: ListOrders) -> Result<OrderPage, AppError> {
        let limit = query.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(AppError::validation("limit", format!("must be between 1 and {MAX_PAGE}")));
        }
        let customer_id = if actor.sees_every_order() {
            query.customer_id
        } else {
            match query.customer_id {
                Some(other) if other != actor.subject => {
                    return Ok(OrderPage { items: Vec::new(), next_cursor: None });
                }
                _ => Some(actor.subject.clone()),
            }
        };
        let merchant_id = if actor.is_admin { query.merchant_id } else { Some(actor.home_merchant()) };
        let filter = OrderFilter {
            merchant_id,
            store_id: query.store_id,
            from: query.from,
            to: query.to,
            status: query.status,
            customer_id,
            number: query.number,
            source: query.source,
            before: query.cursor,
            limit: limit + 1,
        };
        let mut items = self.orders.list(&filter).await?;
        let next_cursor = if items.len() > limit as usize {
            items.truncate(limit as usize);
            items.last().map(|o| o.id)
        } else {
            None
        };
        Ok(OrderPage { items, next_cursor })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::ports::{MockOrderRepository, MockOutboxOperations};

    #[tokio::test]
    async fn a_customer_listing_another_customers_orders_gets_nothing_and_no_query() {
        let mut repo = MockOrderRepository::new();
        repo.expect_list().never();
        let queries = OrderQueries::new(Arc::new(repo), Arc::new(MockOutboxOperations::new()));
        let page = queries
            .list_orders(
                &Actor::customer("alice"),
                ListOrders { customer_id: Some("bob".into()), ..Default::default() },
            )
            .await
            .unwrap();
        assert!(page.items.is_empty());
    }

    #[tokio::test]
    async fn a_customer_list_is_always_filtered_to_themselves() {
        let mut repo = MockOrderRepository::new();
        repo.expect_list()
            .withf(|f| f.customer_id.as_deref() == Some("alice") && f.limit == 21)
            .returning(|_| Ok(Vec::new()));
        let queries = OrderQueries::new(Arc::new(repo), Arc::new(MockOutboxOperations::new()));
        queries.list_orders(&Actor::customer("alice"), ListOrders::default()).await.unwrap();
    }

    #[tokio::test]
    async fn limits_out_of_range_are_refused() {
        let queries =
            OrderQueries::new(Arc::new(MockOrderRepository::new()), Arc::new(MockOutboxOperations::new()));
        for limit in [0, 101] {
            let err = queries
                .list_orders(&Actor::admin("root"), ListOrders { limit: Some(limit), ..Default::default() })
                .await
                .unwrap_err();
            assert!(matches!(err, AppError::Validation { ref field, .. } if field == "limit"));
        }
    }
}
