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
    rows_from_before_are_numbered_and_never_reused
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
