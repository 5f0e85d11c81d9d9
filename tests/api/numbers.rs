//! Order and payment numbers (docs/spec.md §3) on both databases: positive, unique,
//! increasing, shown in the API; rows from before the migration numbered in the order they
//! were made, and the sequence goes on after them — never a number handed out twice.

use migrations::{Migrator, MigratorTrait};
use reqwest::StatusCode;
use sea_orm::ConnectionTrait;

use crate::helpers::{Backend, TestApp, TestDb, json, order_body};
use crate::on_both_databases;

on_both_databases!(
    orders_and_payments_are_numbered_in_the_order_they_are_made,
    rows_from_before_are_numbered_and_never_reused,
    rows_from_before_keep_how_they_started
);

async fn orders_and_payments_are_numbered_in_the_order_they_are_made(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else { return };
    let alice = app.token("alice");
    let mut orders = Vec::new();
    for _ in 0..3 {
        orders.push(json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await);
    }
    let numbers: Vec<i64> = orders.iter().map(|o| o["number"].as_i64().unwrap()).collect();
    let payments: Vec<i64> = orders.iter().map(|o| o["payment"]["number"].as_i64().unwrap()).collect();
    for list in [&numbers, &payments] {
        assert!(list[0] > 0, "{list:?}");
        assert!(list.windows(2).all(|w| w[0] < w[1]), "increasing: {list:?}");
    }
    // The same numbers when the order is read back, and in the list.
    let id = orders[1]["id"].as_str().unwrap();
    let detail =
        json(app.get(&format!("/api/orders/{id}"), &alice).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(detail["number"], numbers[1]);
    assert_eq!(detail["payment"]["number"], payments[1]);
    let listed = json(app.get("/api/orders", &alice).send().await.unwrap(), StatusCode::OK).await;
    assert!(listed["items"].as_array().unwrap().iter().any(|o| o["number"] == numbers[2]), "{listed}");
    // A number is the store's to keep unique.
    let duplicate = format!("UPDATE orders SET number = {} WHERE number = {}", numbers[0], numbers[2]);
    assert!(app.db.execute_unprepared(&duplicate).await.is_err(), "two orders with one number");
}

async fn rows_from_before_are_numbered_and_never_reused(backend: Backend) {
    let Some(test_db) = TestDb::create(backend).await else { return };
    let db = orchestrator::adapters::persistence::connect(&test_db.url, 4).await.unwrap();
    // The schema as it was before numbers, with two orders made one after the other.
    let before = Migrator::migrations()
        .iter()
        .position(|m| m.name() == "m20261204_000018_numbers")
        .expect("the numbers migration is listed") as u32;
    Migrator::up(&db, Some(before)).await.unwrap();
    for (id, at) in [
        ("0000000a-0000-4000-8000-000000000001", "2026-12-01 10:00:01"),
        ("0000000a-0000-4000-8000-000000000002", "2026-12-01 10:00:00"),
    ] {
        let uuid = if db.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            format!("'{id}'")
        } else {
            format!("x'{}'", id.replace('-', ""))
        };
        db.execute_unprepared(&format!(
            "INSERT INTO orders (id, customer_id, source, currency, total_amount, status, created_at, updated_at, version, saga_resumes) \
             VALUES ({uuid}, 'alice', 'API', 'KRW', 1000, 'COMPLETED', '{at}+00:00', '{at}+00:00', 1, 0)"
        ))
        .await
        .unwrap();
    }
    Migrator::up(&db, None).await.unwrap();
    let numbered: Vec<(String, i64)> = {
        let rows = db
            .query_all_raw(sea_orm::Statement::from_string(
                db.get_database_backend(),
                "SELECT customer_id, number FROM orders ORDER BY created_at",
            ))
            .await
            .unwrap();
        rows.iter()
            .map(|r| (r.try_get("", "customer_id").unwrap(), r.try_get("", "number").unwrap()))
            .collect()
    };
    assert_eq!(numbered.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [1, 2], "in the order they were made");
    let _ = db.close().await;
    // The service goes on after them.
    let app = TestApp::spawn_on_database(test_db, &[], None).await;
    let placed =
        json(app.place_order(&app.token("bob"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(placed["number"], 3, "{placed}");
}

/// Rows made before orders kept how they started (migration 24) are given what their source
/// meant then: a `COMMERCE` order held, an `API` order waiting for its payment waiting for
/// checkout, any other running at once; a `MOMO` attempt keyed in, any other not. Steps
/// written before their facts (migration 25) are given what their text said.
async fn rows_from_before_keep_how_they_started(backend: Backend) {
    let Some(test_db) = TestDb::create(backend).await else { return };
    let db = orchestrator::adapters::persistence::connect(&test_db.url, 4).await.unwrap();
    let before = Migrator::migrations()
        .iter()
        .position(|m| m.name() == "m20261208_000024_order_start")
        .expect("the order start migration is listed") as u32;
    Migrator::up(&db, Some(before)).await.unwrap();
    let postgres = db.get_database_backend() == sea_orm::DatabaseBackend::Postgres;
    let uuid = |n: u32| {
        let id = format!("0000000b-0000-4000-8000-{n:012}");
        if postgres { format!("'{id}'") } else { format!("x'{}'", id.replace('-', "")) }
    };
    let at = "'2026-12-01 10:00:00+00:00'";
    let orders = [
        (1, "COMMERCE", "CREATED", "NULL"),
        (2, "API", "AWAITING_PAYMENT", "NULL"),
        (3, "API", "COMPLETED", "NULL"),
        (4, "MOMO", "COMPLETED", "'12'"),
        (5, "MEETING", "COMPLETED", "'13'"),
    ];
    for (n, source, status, meeting) in orders {
        db.execute_unprepared(&format!(
            "INSERT INTO orders (id, customer_id, source, meeting_id, currency, total_amount, status, created_at, updated_at, version, saga_resumes, number) \
             VALUES ({}, 'alice', '{source}', {meeting}, 'KRW', 1000, '{status}', {at}, {at}, 1, 0, {n})",
            uuid(n)
        ))
        .await
        .unwrap();
    }
    for (n, order) in [(11, 4), (12, 5)] {
        db.execute_unprepared(&format!(
            "INSERT INTO payments (id, order_id, attempt, payment_request_id, amount, currency, status, refunded_amount, reconcile_attempts, created_at, updated_at, version, number) \
             VALUES ({}, {}, 1, 'req-{n}', 1000, 'KRW', 'APPROVED', 0, 0, {at}, {at}, 1, {n})",
            uuid(n),
            uuid(order)
        ))
        .await
        .unwrap();
    }
    for (step, status, detail) in [
        ("PAYMENT", "SUCCESS", "approved"),
        ("NOTIFICATION", "FAILED", "AUTO_RETRY (attempt 1): smtp said no"),
        ("COMPENSATION", "READY", "notification RETRY_SCHEDULED"),
    ] {
        db.execute_unprepared(&format!(
            "INSERT INTO orchestration_steps (order_id, step, status, detail, created_at) \
             VALUES ({}, '{step}', '{status}', '{detail}', {at})",
            uuid(3)
        ))
        .await
        .unwrap();
    }
    Migrator::up(&db, None).await.unwrap();
    let read = |sql: &str| {
        let sql = sql.to_owned();
        let db = &db;
        async move {
            db.query_all_raw(sea_orm::Statement::from_string(db.get_database_backend(), sql)).await.unwrap()
        }
    };
    let starts: Vec<String> = read("SELECT start FROM orders ORDER BY number")
        .await
        .iter()
        .map(|r| r.try_get("", "start").unwrap())
        .collect();
    assert_eq!(starts, ["HELD", "AWAIT_CHECKOUT", "NOW", "NOW", "NOW"]);
    let keyed: Vec<bool> = read("SELECT keyed_in FROM payments ORDER BY number")
        .await
        .iter()
        .map(|r| r.try_get("", "keyed_in").unwrap())
        .collect();
    assert_eq!(keyed, [true, false], "the MOMO attempt keyed in, the MEETING one not");
    let facts: Vec<Option<String>> = read("SELECT fact FROM orchestration_steps ORDER BY id")
        .await
        .iter()
        .map(|r| r.try_get("", "fact").unwrap())
        .collect();
    assert_eq!(
        facts,
        [
            None,
            Some("NOTIFICATION_FAILED AUTO_RETRY".into()),
            Some("AWAITING_NOTIFICATION RETRY_SCHEDULED".into())
        ],
        "the facts the rows' texts said (migration 25)"
    );
    let _ = db.close().await;
}
