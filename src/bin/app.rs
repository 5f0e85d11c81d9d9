//! `app`: the one binary. Verbs: serve, worker, migrate, token, outbox, reconcile, merchant,
//! secrets.
//!
//! Exit codes: 0 ok, 2 usage or configuration error (one line on stderr), 1 runtime failure.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use orchestrator::adapters::persistence;
use orchestrator::application::error::Chain;
use orchestrator::application::input::parse_duration;
use orchestrator::application::{Actor, AppError};
use orchestrator::config::Settings;
use orchestrator::startup::{self, Application, StartupError, Workers};
use sea_orm_migration::MigratorTrait;

/// mimalloc rather than the system's malloc: the relay allocates per row read and per message
/// sent, and glibc's malloc took a fifth of the relay's CPU draining a backlog
/// (docs/decisions.md, "mimalloc").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "app",
    version,
    about = "Commerce order orchestration: saga, transactional outbox, RabbitMQ"
)]
struct Cli {
    /// Configuration file (TOML); also `APP_CONFIG`. Environment `APP__SECTION__KEY` overrides it.
    #[arg(long, global = true, env = "APP_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (and, embedded, run the worker loops in-process).
    Serve,
    /// Run the worker loops: outbox relay, meeting-service consumers, notification retries,
    /// payment reconciliation and pending refunds, saga and lease recovery, clean-up.
    Worker,
    /// Exit 0 when this host's `serve` (or, with `--worker`, its worker) answers
    /// `/health/ready` with 200; for container health checks (no curl needed).
    Health {
        /// Ask the worker on `worker.http.bind` instead of `serve` on `http.bind`.
        #[arg(long)]
        worker: bool,
    },
    /// Manage the database schema.
    Migrate {
        #[arg(value_enum, default_value_t = MigrateAction::Up)]
        action: MigrateAction,
    },
    /// Mint a JWT with the configured signing key and print it alone on stdout.
    Token {
        /// The subject (customer id).
        #[arg(long)]
        sub: String,
        /// A role to grant, e.g. `admin`.
        #[arg(long)]
        role: Vec<String>,
        /// Lifetime, e.g. 15m, 1h, 30d.
        #[arg(long, default_value = "1h", value_parser = parse_duration)]
        ttl: Duration,
    },
    /// Inspect and repair the outbox.
    Outbox {
        #[command(subcommand)]
        command: OutboxCommand,
    },
    /// Reconcile our books with the payment provider's.
    Reconcile {
        #[command(subcommand)]
        command: ReconcileCommand,
    },
    /// Manage merchants, their keys and members (docs/merchants.md); each change audited.
    Merchant {
        #[command(subcommand)]
        command: MerchantCommand,
    },
    /// What is sealed at rest under `secrets.key`.
    Secrets {
        #[command(subcommand)]
        command: SecretsCommand,
    },
}

#[derive(Subcommand)]
enum SecretsCommand {
    /// After `secrets.key` changed (the old one set as `secrets.previous_key`): seal every
    /// merchant's channels still under the old key again under the new one; prints the counts.
    Rotate,
}

#[derive(Subcommand)]
enum MerchantCommand {
    /// Create a merchant; prints it as JSON.
    Create {
        #[arg(long)]
        code: String,
        #[arg(long)]
        name: String,
        /// An IANA zone (its daily report's day); UTC when absent.
        #[arg(long)]
        timezone: Option<String>,
    },
    /// Suspend a merchant: its members and keys refused, no new order.
    Suspend {
        /// Its id or code.
        merchant: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Resume a suspended merchant.
    Resume {
        /// Its id or code.
        merchant: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// A merchant's API keys.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// A merchant's members.
    Member {
        #[command(subcommand)]
        command: MemberCommand,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Make a key; prints it as JSON with the key itself (shown this once).
    Create {
        /// The merchant's id or code.
        merchant: String,
        #[arg(long)]
        name: String,
        /// ORDERS, VIEWER or OPERATOR.
        #[arg(long)]
        role: String,
        /// When it stops letting its bearer in (RFC 3339).
        #[arg(long)]
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// Revoke a key.
    Revoke {
        /// The merchant's id or code.
        merchant: String,
        /// The key's id.
        #[arg(long)]
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand)]
enum MemberCommand {
    /// Give a subject (a token's `sub`) a role in the merchant, or change it.
    Set {
        /// The merchant's id or code.
        merchant: String,
        #[arg(long)]
        subject: String,
        /// VIEWER or OPERATOR.
        #[arg(long)]
        role: String,
    },
    /// Remove a subject's membership.
    Remove {
        /// The merchant's id or code.
        merchant: String,
        #[arg(long)]
        subject: String,
    },
}

#[derive(Subcommand)]
enum ReconcileCommand {
    /// One day of the provider's ledger (Toss's transactions, in its zone) against our
    /// payments and refunds; stores the day's findings (replacing an earlier run's) and
    /// prints them as JSON, as `GET /api/admin/reconciliation/findings` answers.
    Ledger {
        /// The provider's day, YYYY-MM-DD.
        #[arg(long, value_parser = parse_day)]
        date: chrono::NaiveDate,
    },
}

fn parse_day(text: &str) -> Result<chrono::NaiveDate, String> {
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| format!("{text:?} is not YYYY-MM-DD"))
}

#[derive(Clone, Copy, ValueEnum)]
enum MigrateAction {
    /// Apply every pending migration.
    Up,
    /// Revert the last migration.
    Down,
    /// List applied and pending migrations.
    Status,
    /// Drop every table and apply all migrations again (destroys data).
    Fresh,
}

#[derive(Subcommand)]
enum OutboxCommand {
    /// Counts per status, the oldest READY row and claim, dead letters by type (JSON).
    Stats,
    /// Put one dead letter back to READY.
    Replay {
        /// The outbox row id.
        #[arg(long)]
        id: i64,
        /// Why, for the audit log.
        #[arg(long)]
        reason: Option<String>,
    },
    /// After a restore from a logical dump (pg_dump): keep what the old server sent as sent,
    /// send the rest, and let `serve` and `worker` start (docs/operations.md). Run it once,
    /// with no service running; on a database that was not restored it changes nothing.
    Rebase,
}

enum Failure {
    Usage(String),
    Runtime(String),
}

impl From<StartupError> for Failure {
    fn from(e: StartupError) -> Self {
        match e {
            StartupError::Config(m) => Failure::Usage(m),
            runtime @ StartupError::Runtime { .. } => {
                Failure::Runtime(orchestrator::application::error::Chain(&runtime).to_string())
            }
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any HTTP client is built (the identity provider's, the payment provider's, the
    // trace exporter's).
    orchestrator::startup::install_tls_provider();
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("app: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("app: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli.command, settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            eprintln!("app: {m}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(m)) => {
            eprintln!("app: {m}");
            ExitCode::from(1)
        }
    }
}

/// A SQLite file that does not exist is an error naming its path, never created by a
/// verb that only reads (docs/spec.md §2).
fn require_existing_database(settings: &Settings) -> Result<(), Failure> {
    match persistence::sqlite_path(settings.database.url.expose()) {
        Some(path) if !std::path::Path::new(&path).exists() => Err(Failure::Runtime(format!(
            "no database at {path} (run `app migrate` or `app serve` first, or set APP__DATABASE__URL)"
        ))),
        _ => Ok(()),
    }
}

/// The database, reported within `database.connect_timeout` with host and cause.
async fn open(settings: &Settings) -> Result<sea_orm::DatabaseConnection, Failure> {
    persistence::probe(settings.database.url.expose(), settings.database.connect_timeout)
        .await
        .map_err(|e| Failure::Runtime(e.0))?;
    persistence::connect(settings.database.url.expose(), 2)
        .await
        .map_err(|e| Failure::Runtime(format!("cannot open the database: {}", persistence::describe(&e))))
}

/// `GET /health/ready` on this host's `serve` or worker, within 3 s.
async fn health(settings: &Settings, worker: bool) -> Result<(), Failure> {
    let bind = if worker { settings.worker.http_bind } else { settings.http.bind };
    // A wildcard bind is reached on the loopback address.
    let host = if bind.ip().is_unspecified() { "127.0.0.1".to_owned() } else { bind.ip().to_string() };
    let url = format!("http://{host}:{}/health/ready", bind.port());
    startup::install_tls_provider();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .map_err(|e| Failure::Runtime(e.to_string()))?;
    let response = client.get(&url).send().await.map_err(|e| Failure::Runtime(format!("{url}: {e}")))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    println!("{body}");
    if status.is_success() { Ok(()) } else { Err(Failure::Runtime(format!("{url} answered {status}"))) }
}

async fn run(command: Command, settings: Settings) -> Result<(), Failure> {
    // Logs and traces, once, for the verbs that log: `token` and `health` print their answer
    // alone on stdout.
    let _telemetry = (!matches!(command, Command::Token { .. } | Command::Health { .. }))
        .then(|| orchestrator::telemetry::init(settings.log.format, &settings.telemetry));
    match command {
        Command::Health { worker } => health(&settings, worker).await,
        Command::Token { sub, role, ttl } => token(&settings, &sub, &role, ttl),
        // Each verb's future boxed: one state machine holding them all is too deep for the
        // compiler's layout in a release build.
        Command::Serve => Box::pin(serve(settings)).await,
        Command::Worker => Box::pin(worker(settings)).await,
        Command::Migrate { action } => Box::pin(migrate(&settings, action)).await,
        Command::Outbox { command } => Box::pin(outbox(&settings, command)).await,
        Command::Reconcile { command: ReconcileCommand::Ledger { date } } => {
            Box::pin(reconcile_ledger(&settings, date)).await
        }
        Command::Merchant { command } => Box::pin(merchant(&settings, command)).await,
        Command::Secrets { command: SecretsCommand::Rotate } => Box::pin(rotate_secrets(&settings)).await,
    }
}

/// A failure of the repair itself, with its whole chain of causes.
fn runtime(e: impl std::error::Error + 'static) -> Failure {
    Failure::Runtime(Chain(&e).to_string())
}

/// The operator running a repair from the command line, as the audit log names them.
fn operator() -> Actor {
    let operator = std::env::var("USER").unwrap_or_else(|_| "cli".into());
    Actor::admin(format!("cli:{operator}"))
}

fn token(settings: &Settings, sub: &str, role: &[String], ttl: Duration) -> Result<(), Failure> {
    // A token signed with the built-in key would be refused by every production start.
    settings.require_own_keys().map_err(|e| Failure::Usage(e.to_string()))?;
    let keys = orchestrator::adapters::http::auth::JwtKeys::from_settings(&settings.auth)
        .map_err(|e| Failure::Usage(e.to_string()))?;
    if sub.is_empty() || sub.len() > 64 {
        return Err(Failure::Usage("--sub must be 1 to 64 characters".into()));
    }
    let token = keys.mint(sub, role, ttl).map_err(|e| Failure::Runtime(e.to_string()))?;
    println!("{token}");
    Ok(())
}

async fn serve(settings: Settings) -> Result<(), Failure> {
    let host = settings.http.bind.ip();
    let settings_tokens_from_provider = settings.auth.keys.is_empty();
    let app = Application::build(settings).await?;
    let base = format!("http://{host}:{}", app.port());
    tracing::info!(
        port = app.port(),
        url = %base,
        docs = %format!("{base}/docs"),
        health = %format!("{base}/health/ready"),
        token = if settings_tokens_from_provider { "from the identity provider (auth.jwks_url)" } else { "app token --sub alice [--role admin]" },
        "serving HTTP"
    );
    app.run_until_stopped(startup::shutdown_signal()).await.map_err(|e| Failure::Runtime(e.to_string()))
}

async fn worker(settings: Settings) -> Result<(), Failure> {
    settings.require_explicit_production().map_err(|e| Failure::Usage(e.to_string()))?;
    let services = startup::build_services(&settings).await?;
    startup::refuse_restored_history(&services).await?;
    // Health and metrics of the worker itself, on `worker.http.bind`.
    let (ops, address) = startup::ops_server(&services)?;
    tracing::info!(
        health = %format!("http://{address}/health/ready"),
        metrics = %format!("http://{address}/metrics"),
        "worker running: outbox relay, webhook fan-out and deliveries, meeting consumers, notification retries, payment \
         reconciliation and refunds, saga recovery, lease recovery, clean-up"
    );
    let ops_handle = ops.handle();
    tokio::spawn(ops);
    let workers = Workers::spawn(&services);
    startup::shutdown_signal().await;
    tracing::info!("shutting down: finishing publishes in flight");
    workers.shutdown(Duration::from_secs(30)).await;
    ops_handle.stop(true).await;
    Ok(())
}

async fn migrate(settings: &Settings, action: MigrateAction) -> Result<(), Failure> {
    if matches!(action, MigrateAction::Status) {
        require_existing_database(settings)?;
    }
    let db = open(settings).await?;
    let result = match action {
        MigrateAction::Up => {
            let pending = migrations::Migrator::get_pending_migrations(&db)
                .await
                .map_err(|e| Failure::Runtime(persistence::describe(&e)))?
                .len();
            migrations::Migrator::up(&db, None).await.map(|()| {
                let total = migrations::Migrator::migrations().len();
                println!("migrated: {pending} migration(s) applied, {total} in all, the schema is current");
            })
        }
        MigrateAction::Down => migrations::Migrator::down(&db, Some(1)).await,
        MigrateAction::Fresh => migrations::Migrator::fresh(&db).await,
        MigrateAction::Status => {
            let applied = migrations::Migrator::get_applied_migrations(&db)
                .await
                .map_err(|e| Failure::Runtime(e.to_string()))?;
            let pending = migrations::Migrator::get_pending_migrations(&db)
                .await
                .map_err(|e| Failure::Runtime(e.to_string()))?;
            for m in applied {
                println!("applied  {}", m.name());
            }
            for m in pending {
                println!("pending  {}", m.name());
            }
            Ok(())
        }
    };
    result.map_err(|e| Failure::Runtime(format!("migration failed: {}", persistence::describe(&e))))
}

async fn outbox(settings: &Settings, command: OutboxCommand) -> Result<(), Failure> {
    // Read-only (stats) or a repair of rows that must exist: never a new database.
    require_existing_database(settings)?;
    let services = startup::build_services(settings).await?;
    match command {
        OutboxCommand::Stats => {
            let stats = services.outbox_store.stats().await.map_err(runtime)?;
            // The same fields, names and units as `GET /api/admin/outbox/stats`.
            let json = serde_json::to_value(orchestrator::adapters::http::outbox_admin::stats_response(
                &stats,
                chrono::Utc::now(),
            ))
            .map_err(|e| Failure::Runtime(e.to_string()))?;
            println!("{json:#}");
        }
        OutboxCommand::Rebase => {
            let done = services.housekeeping.rebase_restored(&operator()).await.map_err(runtime)?;
            if done.restored {
                println!(
                    "outbox history made this server's own: {} event(s) kept as sent, {} to send",
                    done.kept_sent, done.to_send
                );
            } else {
                println!("outbox history is this server's own: nothing to do");
            }
        }
        OutboxCommand::Replay { id, reason } => {
            services
                .outbox_admin
                .resolve_dead_letter(&operator(), id, false, reason)
                .await
                .map_err(runtime)?;
            println!("outbox event {id}: DEAD_LETTER -> READY");
        }
    }
    Ok(())
}

async fn reconcile_ledger(settings: &Settings, date: chrono::NaiveDate) -> Result<(), Failure> {
    require_existing_database(settings)?;
    let services = startup::build_services(settings).await?;
    let report = services.money.ledger.reconcile_day(&operator(), date).await.map_err(|e| match e {
        AppError::Conflict { message, .. } => Failure::Usage(format!("payment.provider: {message}")),
        other => Failure::Runtime(Chain(&other).to_string()),
    })?;
    let json = serde_json::json!({
        "date": date.format("%Y-%m-%d").to_string(),
        "run": orchestrator::adapters::http::ledger::LedgerRunResponse::from(&report.run),
        "findings": report.findings.iter().map(orchestrator::adapters::http::ledger::FindingResponse::from).collect::<Vec<_>>(),
    });
    println!("{json:#}");
    Ok(())
}

/// A use case's refusal as the CLI reports it: the caller's mistakes are usage errors.
fn refused(e: AppError) -> Failure {
    match e {
        AppError::Validation { .. }
        | AppError::Conflict { .. }
        | AppError::NotFound(_)
        | AppError::Unprocessable { .. } => Failure::Usage(e.to_string()),
        other => Failure::Runtime(Chain(&other).to_string()),
    }
}

fn print_json(value: impl serde::Serialize) -> Result<(), Failure> {
    let json = serde_json::to_value(value).map_err(|e| Failure::Runtime(e.to_string()))?;
    println!("{json:#}");
    Ok(())
}

/// The merchant named by its id or its code.
async fn merchant_named(
    merchants: &orchestrator::application::merchants::Merchants,
    named: &str,
) -> Result<orchestrator::domain::ids::MerchantId, Failure> {
    if let Ok(id) = named.parse() {
        return Ok(id);
    }
    let code = named.trim().to_ascii_uppercase();
    let all = merchants.list(&operator()).await.map_err(refused)?;
    all.iter()
        .find(|m| m.code.as_str() == code)
        .map(|m| m.id)
        .ok_or_else(|| Failure::Usage(format!("no merchant has the id or code {named:?}")))
}

async fn merchant(settings: &Settings, command: MerchantCommand) -> Result<(), Failure> {
    use orchestrator::adapters::http::merchants::dto::{
        ApiKeyResponse, CreatedKeyResponse, MemberResponse, MerchantResponse,
    };
    use orchestrator::application::merchants::{NewKey, NewMerchant};
    use orchestrator::domain::merchant::{KeyRole, MemberRole};
    require_existing_database(settings)?;
    let services = startup::build_services(settings).await?;
    let merchants = &services.merchants;
    let actor = operator();
    match command {
        MerchantCommand::Create { code, name, timezone } => {
            let merchant =
                merchants.create(&actor, NewMerchant { code, name, timezone }).await.map_err(refused)?;
            print_json(MerchantResponse::from(&merchant))
        }
        MerchantCommand::Suspend { merchant, reason } => {
            let id = merchant_named(merchants, &merchant).await?;
            let merchant = merchants.set_suspended(&actor, id, true, reason).await.map_err(refused)?;
            print_json(MerchantResponse::from(&merchant))
        }
        MerchantCommand::Resume { merchant, reason } => {
            let id = merchant_named(merchants, &merchant).await?;
            let merchant = merchants.set_suspended(&actor, id, false, reason).await.map_err(refused)?;
            print_json(MerchantResponse::from(&merchant))
        }
        MerchantCommand::Key { command: KeyCommand::Create { merchant, name, role, expires_at } } => {
            let role = KeyRole::parse(&role.to_ascii_uppercase())
                .ok_or_else(|| Failure::Usage("--role must be ORDERS, VIEWER or OPERATOR".into()))?;
            let id = merchant_named(merchants, &merchant).await?;
            let created =
                merchants.create_key(&actor, id, NewKey { name, role, expires_at }).await.map_err(refused)?;
            print_json(CreatedKeyResponse::from(&created))
        }
        MerchantCommand::Key { command: KeyCommand::Revoke { merchant, id: key, reason } } => {
            let id = merchant_named(merchants, &merchant).await?;
            let key = key.parse().map_err(|_| Failure::Usage(format!("{key:?} is not a key id")))?;
            let key = merchants.revoke_key(&actor, id, key, reason).await.map_err(refused)?;
            print_json(ApiKeyResponse::from(&key))
        }
        MerchantCommand::Member { command: MemberCommand::Set { merchant, subject, role } } => {
            let role = MemberRole::parse(&role.to_ascii_uppercase())
                .ok_or_else(|| Failure::Usage("--role must be VIEWER or OPERATOR".into()))?;
            let id = merchant_named(merchants, &merchant).await?;
            let member = merchants.set_member(&actor, id, &subject, role).await.map_err(refused)?;
            print_json(MemberResponse::from(&member))
        }
        MerchantCommand::Member { command: MemberCommand::Remove { merchant, subject } } => {
            let id = merchant_named(merchants, &merchant).await?;
            merchants.remove_member(&actor, id, &subject).await.map_err(refused)?;
            println!("member {subject} removed");
            Ok(())
        }
    }
}

async fn rotate_secrets(settings: &Settings) -> Result<(), Failure> {
    require_existing_database(settings)?;
    let services = startup::build_services(settings).await?;
    let rotation = services.merchants.rotate_secrets(&operator()).await.map_err(refused)?;
    print_json(
        serde_json::json!({ "resealed": rotation.resealed, "changedMeanwhile": rotation.changed_meanwhile }),
    )
}
