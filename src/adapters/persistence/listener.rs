//! Cross-process relay wake-ups on PostgreSQL: `LISTEN outbox_events`. A commit that
//! appended outbox rows sends `NOTIFY` (delivered only if it commits); every relay
//! process hears it and claims at once instead of waiting for its next poll.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::DatabaseConnection;
use sea_orm::sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The PostgreSQL `NOTIFY` channel a commit with outbox events signals.
pub const OUTBOX_CHANNEL: &str = "outbox_events";

/// Listens until `stop`, waking `wake` on every notification. Reconnects after failures;
/// polling covers any gap.
pub async fn wake_on_notify(db: DatabaseConnection, wake: Arc<Notify>, stop: CancellationToken) {
    let pool = db.get_postgres_connection_pool().clone();
    while !stop.is_cancelled() {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN for outbox wake-ups; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        if let Err(e) = listener.listen(OUTBOX_CHANNEL).await {
            tracing::warn!(error = %e, "LISTEN failed; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                received = listener.recv() => match received {
                    Ok(_) => wake.notify_one(),
                    Err(e) => {
                        tracing::warn!(error = %e, "outbox LISTEN connection lost; reconnecting");
                        break;
                    }
                }
            }
        }
    }
}
