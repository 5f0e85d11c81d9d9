//! Commerce order orchestration: what happens after an order is placed — payment,
//! settlement, notification — as explicit state machines, a resumable saga with
//! compensation, and a transactional outbox relayed to RabbitMQ.
//!
//! # Layout
//!
//! The layers point inward only: `domain` imports nothing of ours, `application` imports
//! `domain`, `adapters` implement `application`'s ports, and only [`startup`] and `src/bin`
//! see everything (docs/architecture.md).
//!
//! - [`domain`] — the aggregates and their transition functions: `order` (and its saga
//!   steps), `payment`, `settlement`, `notification`, `outbox` (delivery states, backoff,
//!   lanes), plus `money`, `text` (input rules) and `audit` actions. Pure: no I/O, no async.
//! - [`application`] — the use cases and the ports they need:
//!   - `ports/` — one trait per capability, each method's contract stated
//!     (`order_repository`, `unit_of_work`, `outbox_store`, `event_publisher`,
//!     `payment_gateway`, `clock`, …).
//!   - `orchestration/` — the saga: `steps` (what runs next), one pure decision per step
//!     (`payment`, `settlement`, `compensation`, `notify`), `service` (the `Orchestrator`
//!     that calls providers and commits), `lease`, `confirmation`.
//!   - `recovery` — background repair: unknown payment outcomes looked up (and provider
//!     callbacks), compensations retried, stalled sagas resumed, pending refunds finished.
//!   - `outbox/` — the relay (lanes, fast and slow paths), operator actions, retention.
//!   - `inbound/` — messages from the meeting service.
//!   - `idempotency`, `queries`, `refunds`, `notification_retry`, `envelopes` (the outbox
//!     event writer shared by every use case), `input` (request checks), `health`, `meter`.
//! - [`adapters`] — the outside world behind the ports: `persistence` (SeaORM on
//!   PostgreSQL and SQLite: `store` and one file per port it implements — `unit_of_work`,
//!   `orders`, `payments`, `notifications`, `audit`, `outbox`, `idempotency`), `http`
//!   (actix-web handlers per resource — `orders`, `payments`, `notifications`,
//!   `outbox_admin`, `ops` — with `auth` and `problem`), `messaging` (the confirming AMQP
//!   publisher and the meeting consumers), `providers` (simulated and external HTTP
//!   payment), `clock`.
//! - [`config`] — layered configuration (built-in defaults, file, environment) resolved
//!   into each part's settings.
//! - [`startup`] — the composition root: builds the services for `serve`, `worker` and the
//!   CLI.
//! - [`telemetry`] — logging and the metrics registry.
//!
//! Binaries: `src/bin/app.rs` (the `app` CLI: `serve`, `worker`, operator commands) and
//! `bench/` (the benchmark harness, a workspace member of its own, one module per scenario).

pub mod adapters;
pub mod application;
pub mod config;
pub mod domain;
pub mod startup;
pub mod telemetry;
