//! The unit of work: every write of a [`Changes`] set in one transaction, each update
//! conditional on the version loaded; wakes the relay after a commit with events.

use async_trait::async_trait;
use sea_orm::ActiveValue::Set;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, EntityTrait, QueryFilter,
    QueryTrait, RuntimeErr, Statement, TransactionTrait,
};

use super::audit::audit_inserts;
use super::entities::{
    inbox, notification_events, orchestration_steps, order_items, orders, outbox_events, payments, refunds,
    settlements,
};
use super::listener::OUTBOX_CHANNEL;
use super::mapping::*;
use super::store::SeaOrmStore;
use super::{is_postgres, repo_err};
use crate::application::ports::{Changes, Numbered, OrderRepository, Placed, RepoError, UnitOfWork, Write};
use chrono::{DateTime, Utc};

/// One write of a change set: the statement and whether it is a conditional update (exactly
/// one row, or the whole change set is refused as `Conflict`).
struct PlannedWrite {
    statement: Statement,
    conditional: bool,
}

/// The conditional updates of one aggregate's writes: `WHERE id = ? AND version = ?`.
macro_rules! update_rows {
    ($out:expr, $backend:expr, $writes:expr, $entity:ident, $to_row:path) => {
        for write in &$writes {
            if let Write::Update(row) = write {
                let statement = $entity::Entity::update_many()
                    .set($to_row(row))
                    .filter($entity::Column::Id.eq(row.id.as_uuid()))
                    .filter($entity::Column::Version.eq(row.version))
                    .build($backend);
                $out.push(PlannedWrite { statement, conditional: true });
            }
        }
    };
}

/// The inserts of one aggregate's writes.
macro_rules! insert_rows {
    ($out:expr, $backend:expr, $writes:expr, $entity:ident, $to_row:path) => {
        for write in &$writes {
            if let Write::Insert(row) = write {
                $out.push(PlannedWrite {
                    statement: $entity::Entity::insert($to_row(row)).build($backend),
                    conditional: false,
                });
            }
        }
    };
}

/// Every write of `changes`, in the order they are applied: conditional updates first (a
/// lost race is found before anything is inserted, and on PostgreSQL the row lock they
/// take serialises writers of the same order), then the inserts.
///
/// With `numbered` (PostgreSQL's one statement only), the new order takes its number from
/// [`one_statement`]'s `numbers`.
fn writes(
    changes: &Changes,
    lanes: u16,
    backend: DbBackend,
    numbered: bool,
) -> Result<Vec<PlannedWrite>, RepoError> {
    let mut out = Vec::new();
    for order in &changes.orders {
        let mut update = orders::Entity::update_many().set(order_to_row(order, None));
        if let Some(owner) = &changes.release_saga {
            use sea_orm::sea_query::{Expr, ExprTrait};
            let ours = Expr::col(orders::Column::SagaLockedBy).eq(owner.as_str());
            update = update
                .col_expr(
                    orders::Column::SagaLockedUntil,
                    Expr::case(ours.clone(), Expr::value(Option::<DateTime<Utc>>::None))
                        .finally(Expr::col(orders::Column::SagaLockedUntil))
                        .into(),
                )
                .col_expr(
                    orders::Column::SagaLockedBy,
                    Expr::case(ours, Expr::value(Option::<String>::None))
                        .finally(Expr::col(orders::Column::SagaLockedBy))
                        .into(),
                );
        }
        let statement = update
            .filter(orders::Column::Id.eq(order.id.as_uuid()))
            .filter(orders::Column::Version.eq(order.version))
            .build(backend);
        out.push(PlannedWrite { statement, conditional: true });
    }
    update_rows!(out, backend, changes.payments, payments, payment_to_row);
    update_rows!(out, backend, changes.refunds, refunds, refund_to_row);
    update_rows!(out, backend, changes.settlements, settlements, settlement_to_row);
    update_rows!(out, backend, changes.notifications, notification_events, notification_to_row);

    for (order, context, lease) in &changes.new_orders {
        let mut row = order_to_row(order, Some(context));
        if let Some(lease) = lease {
            row.saga_locked_by = Set(Some(lease.owner.clone()));
            row.saga_locked_until = Set(Some(lease.until));
        }
        if numbered {
            row.number = sea_orm::ActiveValue::NotSet;
        }
        let mut statement = orders::Entity::insert(row).build(backend);
        if numbered {
            statement.sql = numbered_insert(&statement.sql).ok_or_else(|| {
                RepoError::corrupt(format!("not an INSERT … VALUES (…): {}", statement.sql))
            })?;
        }
        out.push(PlannedWrite { statement, conditional: false });
        let items = order_items::Entity::insert_many(items_to_rows(order)).build(backend);
        out.push(PlannedWrite { statement: items, conditional: false });
    }
    insert_rows!(out, backend, changes.payments, payments, payment_to_row);
    insert_rows!(out, backend, changes.refunds, refunds, refund_to_row);
    insert_rows!(out, backend, changes.settlements, settlements, settlement_to_row);
    insert_rows!(out, backend, changes.notifications, notification_events, notification_to_row);
    if !changes.steps.is_empty() {
        let rows = changes.steps.iter().map(|s| step_to_row(s.order_id, &s.record));
        let statement = orchestration_steps::Entity::insert_many(rows).build(backend);
        out.push(PlannedWrite { statement, conditional: false });
    }
    out.extend(
        audit_inserts(&changes.audit, backend)
            .into_iter()
            .map(|statement| PlannedWrite { statement, conditional: false }),
    );
    for entry in &changes.inbox {
        let statement = inbox::Entity::insert(inbox::ActiveModel {
            consumer: Set(entry.consumer.clone()),
            event_id: Set(entry.event_id.clone()),
            processed_at: Set(entry.processed_at),
            order_id: Set(entry.order_id.map(|id| id.as_uuid())),
            digest: Set(entry.digest.clone()),
        })
        .build(backend);
        out.push(PlannedWrite { statement, conditional: false });
    }
    if !changes.outbox.is_empty() {
        let statement =
            outbox_events::Entity::insert_many(changes.outbox.iter().map(|e| outbox_row(e, lanes)))
                .build(backend);
        out.push(PlannedWrite { statement, conditional: false });
    }
    Ok(out)
}

/// `INSERT INTO "orders" (…) VALUES (…)`, as sea-query writes it, with the `number` column
/// added, its value the one [`one_statement`]'s `numbers` took.
fn numbered_insert(sql: &str) -> Option<String> {
    let (head, tail) = sql.split_once(") VALUES (")?;
    let values = tail.strip_suffix(')')?;
    Some(format!(r#"{head}, "number") VALUES ({values}, (SELECT order_number FROM numbers))"#))
}

/// The writes one statement at a time inside `txn`.
async fn apply(txn: &DatabaseTransaction, writes: Vec<PlannedWrite>) -> Result<(), RepoError> {
    for write in writes {
        let result = txn.execute_raw(write.statement).await.map_err(repo_err)?;
        if write.conditional && result.rows_affected() != 1 {
            return Err(RepoError::Conflict);
        }
    }
    Ok(())
}

/// PostgreSQL's bound on one statement's parameters, with room to spare.
const MAX_PARAMETERS: usize = 30_000;

/// SQLSTATE `division_by_zero`: in [`one_statement`], a conditional update that matched no row.
const LOST_RACE: &str = "22012";

/// On PostgreSQL, the whole change set as one statement, which is its own transaction: one
/// round trip where the statement-by-statement path takes one per write plus `BEGIN` and
/// `COMMIT` (issue 46: the round trips, not the commits, were most of an order's CPU).
/// Each write is a data-modifying CTE — all of them run, in one snapshot, whatever the
/// final `SELECT` reads — and each conditional update returns its rows, which the final
/// `SELECT` divides by: a lost race (no row) is `division_by_zero`, which aborts the
/// statement and every write in it. `NOTIFY` is the same `SELECT`'s `pg_notify`, delivered
/// when (and if) the statement commits. `None` when the writes carry too many parameters
/// for one statement.
///
/// With `numbers` (`Some(payment)`), a first CTE `numbers` takes the next order number (and
/// with `payment` the next payment number) from their sequences, once (a CTE of volatile
/// functions is evaluated once), and the `SELECT` answers them first, as `order_number` and
/// `payment_number`.
fn one_statement(
    writes: Vec<PlannedWrite>,
    notify: Option<String>,
    numbers: Option<bool>,
) -> Option<Statement> {
    let parameters: usize = writes.iter().map(|w| w.statement.values.as_ref().map_or(0, |v| v.0.len())).sum();
    if parameters + 2 > MAX_PARAMETERS {
        return None;
    }
    let mut ctes = Vec::with_capacity(writes.len() + 1);
    let mut checks = Vec::new();
    if let Some(payment) = numbers {
        let payment_number = if payment { ", nextval('payment_numbers') AS payment_number" } else { "" };
        ctes.push(format!("numbers AS (SELECT nextval('order_numbers') AS order_number{payment_number})"));
        checks.push("(SELECT order_number FROM numbers) AS order_number".to_owned());
        if payment {
            checks.push("(SELECT payment_number FROM numbers) AS payment_number".to_owned());
        }
    }
    let mut values: Vec<sea_orm::Value> = Vec::with_capacity(parameters + 2);
    for (i, write) in writes.into_iter().enumerate() {
        let sql = renumbered(&write.statement.sql, values.len());
        if write.conditional {
            ctes.push(format!("w{i} AS ({sql} RETURNING 1)"));
            checks.push(format!("1 / (SELECT count(*)::int FROM w{i})"));
        } else {
            ctes.push(format!("w{i} AS ({sql})"));
        }
        values.extend(write.statement.values.map(|v| v.0).unwrap_or_default());
    }
    if let Some(payload) = notify {
        values.push(OUTBOX_CHANNEL.into());
        values.push(payload.into());
        checks.push(format!("pg_notify(${}, ${})::text", values.len() - 1, values.len()));
    }
    if checks.is_empty() {
        checks.push("1".to_owned());
    }
    let mut sql = String::new();
    if !ctes.is_empty() {
        sql.push_str("WITH ");
        sql.push_str(&ctes.join(", "));
        sql.push(' ');
    }
    sql.push_str("SELECT ");
    sql.push_str(&checks.join(", "));
    Some(Statement::from_sql_and_values(DbBackend::Postgres, sql, values))
}

/// `sql` (PostgreSQL, `$n` placeholders) with every placeholder moved up by `offset`;
/// quoted identifiers and string literals are left as they are.
fn renumbered(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '"' | '\'') => quote = Some(c),
            (None, '$') if chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    digits.push(d);
                    chars.next();
                }
                // Digits only, so the parse cannot fail; a placeholder past usize is not SQL.
                let n: usize = digits.parse().unwrap_or(0);
                out.push('$');
                out.push_str(&(n + offset).to_string());
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// Whether `err` is [`one_statement`]'s lost race.
fn lost_race(err: &DbErr) -> bool {
    use std::ops::Deref;
    if let DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)) = err
        && let sea_orm::sqlx::Error::Database(db) = e.deref()
    {
        return db.code().as_deref() == Some(LOST_RACE);
    }
    false
}

impl SeaOrmStore {
    /// The lanes of `changes`' events as `NOTIFY`'s payload (only the workers holding them
    /// wake), on PostgreSQL when there are events.
    fn notify_payload(&self, changes: &Changes) -> Option<String> {
        if changes.outbox.is_empty() || !is_postgres(&self.db) {
            return None;
        }
        let mut lanes: Vec<i16> = changes
            .outbox
            .iter()
            .map(|e| crate::domain::outbox::lanes::lane_of(&e.aggregate_type, &e.aggregate_id, self.lanes))
            .collect();
        lanes.sort_unstable();
        lanes.dedup();
        // Digits and commas only.
        Some(lanes.iter().map(i16::to_string).collect::<Vec<_>>().join(","))
    }

    /// `changes` as one statement on PostgreSQL ([`one_statement`]): `Ok(None)` elsewhere or
    /// when they do not fit one; the row the statement answered otherwise.
    async fn commit_as_one(
        &self,
        changes: &Changes,
        numbers: Option<bool>,
    ) -> Result<Option<sea_orm::QueryResult>, RepoError> {
        if !is_postgres(&self.db) {
            return Ok(None);
        }
        let writes = writes(changes, self.lanes, DbBackend::Postgres, numbers.is_some())?;
        let Some(statement) = one_statement(writes, self.notify_payload(changes), numbers) else {
            return Ok(None);
        };
        match self.db.query_one_raw(statement).await {
            Ok(row) => {
                if !changes.outbox.is_empty() {
                    self.relay_wake.notify_one();
                }
                row.map(Some).ok_or_else(|| RepoError::corrupt("the change set's statement answered no row"))
            }
            Err(err) if lost_race(&err) => Err(RepoError::Conflict),
            Err(err) => Err(repo_err(err)),
        }
    }

    /// `changes` statement by statement in one transaction.
    async fn commit_in_steps(&self, changes: &Changes) -> Result<(), RepoError> {
        let writes = writes(changes, self.lanes, self.db.get_database_backend(), false)?;
        let payload = self.notify_payload(changes);
        let txn = self.db.begin().await.map_err(repo_err)?;
        if let Err(err) = apply(&txn, writes).await {
            // Dropping the transaction rolls back; say so explicitly to free the connection now.
            let _ = txn.rollback().await;
            return Err(err);
        }
        if let Some(payload) = payload {
            // Delivered to listeners only when (and if) the transaction commits.
            txn.execute_unprepared(&format!("NOTIFY {OUTBOX_CHANNEL}, '{payload}'"))
                .await
                .map_err(repo_err)?;
        }
        txn.commit().await.map_err(repo_err)?;
        if !changes.outbox.is_empty() {
            self.relay_wake.notify_one();
        }
        Ok(())
    }
}

#[async_trait]
impl UnitOfWork for SeaOrmStore {
    async fn commit(&self, changes: Changes) -> Result<(), RepoError> {
        if changes.is_empty() {
            return Ok(());
        }
        if self.commit_as_one(&changes, None).await?.is_some() {
            return Ok(());
        }
        self.commit_in_steps(&changes).await
    }

    async fn commit_placing(&self, mut changes: Changes, payment: bool) -> Result<Placed, RepoError> {
        if changes.new_orders.len() != 1 {
            return Err(RepoError::corrupt("a placement commits exactly one new order"));
        }
        if let Some(row) = self.commit_as_one(&changes, Some(payment)).await? {
            let order_number: i64 = row.try_get("", "order_number").map_err(repo_err)?;
            let payment_number = if payment {
                Some(row.try_get::<i64>("", "payment_number").map_err(repo_err)?)
            } else {
                None
            };
            return Ok(Placed { order_number, payment_number });
        }
        // SQLite (or a placement too big for one statement): the numbers first.
        let kinds: &[Numbered] =
            if payment { &[Numbered::Order, Numbered::Payment] } else { &[Numbered::Order] };
        let numbers = self.next_numbers(kinds).await?;
        let order_number =
            *numbers.first().ok_or_else(|| RepoError::corrupt("no order number handed out"))?;
        changes.new_orders[0].0.number = order_number;
        self.commit_in_steps(&changes).await?;
        Ok(Placed { order_number, payment_number: numbers.get(1).copied() })
    }
}

#[cfg(test)]
mod tests {
    use super::{numbered_insert, renumbered};

    #[test]
    fn a_numbered_insert_takes_its_number_from_the_numbers_cte() {
        assert_eq!(
            numbered_insert(r#"INSERT INTO "orders" ("id", "status") VALUES ($1, $2)"#).as_deref(),
            Some(
                r#"INSERT INTO "orders" ("id", "status", "number") VALUES ($1, $2, (SELECT order_number FROM numbers))"#
            )
        );
        assert_eq!(numbered_insert(r#"INSERT INTO "orders" DEFAULT VALUES"#), None);
    }

    #[test]
    fn placeholders_move_up_and_quoted_text_stays() {
        let sql = r#"UPDATE "t$1" SET "a" = $1, "b" = '$2 it''s' WHERE "id" = $2 AND "v" = $10"#;
        assert_eq!(
            renumbered(sql, 15),
            r#"UPDATE "t$1" SET "a" = $16, "b" = '$2 it''s' WHERE "id" = $17 AND "v" = $25"#
        );
        assert_eq!(renumbered("SELECT $1", 0), "SELECT $1");
        assert_eq!(renumbered("SELECT $ 1, $x", 3), "SELECT $ 1, $x");
    }
}
