//! Commerce order orchestration: what happens after an order is placed — payment,
//! settlement, notification — as explicit state machines, a resumable saga with
//! compensation, and a transactional outbox relayed to RabbitMQ or Kafka, in our own
//! envelope or a partner's wire contract (CloudEvents, the meetup platform's, the commerce
//! backend's). Money moves through Toss Payments (or a simulated or external provider) and
//! is checked daily against Toss's own ledger and what it pays out.
//!
//! # Layout
//!
//! The layers point inward only: `domain` imports nothing of ours, `application` imports
//! `domain`, `adapters` implement `application`'s ports, and only [`startup`] and `src/bin`
//! see everything (docs/architecture.md has the picture).
//!
//! - [`domain`] — the aggregates and their transition functions: `order` (and its saga
//!   steps), `payment` (with refunds), `settlement`, `notification`, `outbox` (delivery
//!   states, lanes), `ledger` (matching a provider's day against our books), `payout` (its
//!   settlements against our transactions), `merchant` (merchants, their stores and who may
//!   do what, docs/spec.md §15), `webhook` (subscriptions' filters and delivery rules, §16), `webhook_message` (one
//!   event's delivery to one endpoint),
//!   plus `money`,
//!   `text` (input rules), `backoff` (the one doubling backoff), `retry` (the one retry
//!   policy), `ids` and `audit` actions; `proptests` holds the transitions' property tests.
//!   Pure: no I/O, no async.
//! - [`application`] — the use cases and the ports they need:
//!   - `ports/` — one trait per capability, each method's contract stated: storage
//!     (`order_repository` with `SagaRuns`, `payment_repository`, `unit_of_work`, `outbox_store`, `ledger`,
//!     `payment_methods`, …), the broker (`event_publisher`), the providers
//!     (`payment_gateway` with `ProviderRecords`, `ProviderLedger` and `ProviderCustomers`
//!     beside it for the providers that have them, `settlement_gateway`, `notifier`,
//!     `meeting_fees`, `merchant_store`, `webhook_store`, `webhook_delivery`), `secret_box`,
//!     `clock`.
//!   - `orchestration/` — the saga: `steps` (what runs next), one pure decision per step
//!     (`payment`, `settlement`, `compensation`, `notify`), `outcome` (a step's commit and
//!     the next step's intent in it), `orchestrator` (the `Orchestrator`), `service`
//!     (placing an order, starting a run), `run` (one run's steps and its `commit_step`),
//!     `checkout` (Toss's widget), `confirmation`, `settlement_repair`, `lease`.
//!   - `money/` — `refunds/` (full and partial: `decide` is what a provider's answer
//!     means, pure; then `request`, `outcome`, `resolve`, `provider`), `ledger` (the daily
//!     run against the provider's ledger and its settlements, the payouts),
//!     `payment_methods` (saved cards), `provider_view` (the provider's record beside ours).
//!   - background work: `recovery/` (one file per job: `reconciliation`, `callbacks`,
//!     `compensations`, `stalled`), `notification_retry`,
//!     `settlement_retry`.
//!   - `outbox/` — the relay (`relay`, `lanes`, the fast path's `pipeline` and `stages`,
//!     the `slow` path), operator actions, retention.
//!   - `inbound/` — the meeting service's `messages` and their use cases (`meeting`),
//!     whatever contract carries them.
//!   - `merchants/` (docs/spec.md §15: the platform operator's management, `access` — who
//!     may act on a merchant, every "no" one `403`, and a merchant API key read —,
//!     `keys`: made, shown once, checked by hash, `report`: the daily report, and
//!     `channels`: a merchant's own channels, sealed), `webhooks/` (merchants' webhook
//!     endpoints, §16: `endpoints`, the `fanout` from the outbox, the `delivery` workers,
//!     the `messages`' log, replays and upkeep),
//!     `jobs` (the periodic jobs' runner, below), `idempotency`, `queries`, `envelopes`
//!     (the outbox event writer every use case shares), `commit`, `input`, `health`,
//!     `meter`, `audit`, `actor`, `error`.
//! - [`adapters`] — the outside world behind the ports:
//!   - `persistence` — SeaORM on PostgreSQL and SQLite (`unit_of_work`: a change set as
//!     one statement on PostgreSQL; `orders`, `payments`, `settlements`, `notifications`,
//!     `ledger`, `payment_methods`, `merchants`, `merchant_channels`, `webhook_endpoints`, `webhook_fanout` (its cursor over
//!     the outbox), `webhook_messages`, `webhook_records` (attempts written in batches), `audit`, `idempotency`, `outbox/`) on one `store`, rows
//!     in `entities/` read into the domain by `mapping`, PostgreSQL's `NOTIFY` heard by
//!     `listener`, and the meeting service's MariaDB fee table (`meeting_fees`).
//!   - `http` — actix-web handlers per resource (`orders`, `payments`, `settlements`,
//!     `notifications`, `ledger`, `payment_methods`, `webhooks` (Toss's), `outbox_admin`,
//!     `ops`, `console`, `merchants/`: management, `orders`, `repairs`, `webhooks` and `webhook_messages`
//!     under a merchant's path, `dto`),
//!     with `auth/` (settings, keys, JWKS, extractors), `problem`
//!     (RFC 7807), `body`, `dto`, `correlation` (the request's id), and each dialect's
//!     listener with its settings (`commerce/`, `momo/`).
//!   - `messaging` — `publishing` (what both publishers share), `amqp/` (the confirming
//!     publisher and its confirms, the meeting consumers, the momo topology), `kafka/` (the idempotent producer, the consumer group, dead letters),
//!     `contract/` (the wire contracts: `envelope`, `cloudevents`, `momo`, `commerce`, and
//!     `meeting`, which reads the meeting service's messages under each, parsing each body
//!     once), `meeting` (the failure policy), `log_publisher`.
//!   - `providers` — `toss/` (`client`, `answer`: its errors' meanings, `model`: the bodies
//!     sent and the objects read, `gateway`), `external`, `simulated`, `webhook` (Standard
//!     Webhooks for settlement and notification), `email` (SMTP through lettre), `measured`
//!     (every call timed), `routed` (a merchant's own webhooks before the deployment's
//!     channels), `transport` (the HTTP scaffolding both HTTP providers share).
//!   - `jackson` (the platforms' Java readers and writers, in one place), `clock`, `secret`,
//!     `secret_box` (XChaCha20-Poly1305 under `secrets.key`), `webhook_sender` (merchants'
//!     webhooks over HTTP, through a resolver that refuses private addresses),
//!     `http_client` (where every outbound HTTP client is built, on one TLS provider).
//! - [`config`] — layered configuration (built-in defaults, file, environment) resolved
//!   into each part's settings: `raw` (the sources' shape, `DEFAULTS`), `resolve`.
//! - [`startup`] — the composition root: `adapters`, `services`, `settings` and `run` build
//!   and run the services for `serve`, `worker` and the CLI.
//! - [`telemetry`] — logging, traces and the metrics registry.
//!
//! # Where an order's source is read
//!
//! The core never branches on the door an order came through: how it starts
//! (`PlaceOrder::start`, stored as `orders.start`) and whether its payment was keyed in
//! (`Payment::keyed_in`) are facts the adapter sets. The source is read in one place,
//! `impl OrderSource` in `domain/order/status.rs`: `is_meeting` (a registration) and
//! `pays_with_saved_card`. docs/architecture.md has the detail.
//!
//! # Jobs
//!
//! The worker's periodic jobs, each a `PeriodicJob` run by `application::jobs::run` (a panic
//! is a failed round; a job silent past its longest round turns readiness red, naming it):
//! "outbox lease recovery" and "outbox clean-up" (`outbox/housekeeping`);
//! "payment reconciliation", "stalled sagas", "unpaid orders", "held orders",
//! "pending refunds" and "compensation retries" (`recovery/jobs`); "settlement retries", "notification retries",
//! "the provider's ledger" (`money/ledger`, with Toss), "webhook fan-out" and
//! "webhook upkeep" (`webhooks/`). The outbox relay, the webhook deliveries and the
//! meeting-service consumers are loops of their own (docs/architecture.md, "Who runs what").
//!
//! Binaries: `src/bin/app.rs` (the `app` CLI: `serve`, `worker`, operator commands);
//! workspace members `bench/` (the benchmark harness, one module per scenario),
//! `fake-toss/` (a Toss Payments stand-in for tests and benches) and `migrations/`.

pub mod adapters;
pub mod application;
pub mod config;
pub mod domain;
pub mod startup;
pub mod telemetry;
