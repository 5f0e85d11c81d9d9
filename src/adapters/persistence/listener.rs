//! Cross-process relay wake-ups on PostgreSQL: `LISTEN outbox_events`. A commit that
//! appended outbox rows sends `NOTIFY` with the lanes of its events as the payload
//! (`3,7`; delivered only if it commits); a relay process that holds one of them claims at
//! once instead of waiting for its next poll, the others stay asleep.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::DatabaseConnection;
use sea_orm::sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::application::outbox::LaneInterest;

/// The PostgreSQL `NOTIFY` channel a commit with outbox events signals.
pub const OUTBOX_CHANNEL: &str = "outbox_events";

/// The lanes a notification's payload names; empty when it names none or is not a list of
/// lanes (then it wakes every relay).
pub fn notified_lanes(payload: &str) -> Vec<i16> {
    let lanes: Result<Vec<i16>, _> =
        payload.split(',').filter(|l| !l.is_empty()).map(|l| l.trim().parse::<i16>()).collect();
    lanes.unwrap_or_default()
}

/// Listens until `stop`, waking `wake` on every notification for a lane `interest` holds.
/// Reconnects after failures; polling covers any gap.
pub async fn wake_on_notify(
    db: DatabaseConnection,
    wake: Arc<Notify>,
    interest: Arc<LaneInterest>,
    stop: CancellationToken,
) {
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
                    Ok(notification) => {
                        if interest.wants(&notified_lanes(notification.payload())) {
                            wake.notify_one();
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "outbox LISTEN connection lost; reconnecting");
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::notified_lanes;

    #[test]
    fn payloads_name_lanes_or_nothing() {
        assert_eq!(notified_lanes("3,7"), vec![3, 7]);
        assert_eq!(notified_lanes("12"), vec![12]);
        assert!(notified_lanes("").is_empty());
        assert!(notified_lanes("3,x").is_empty(), "not a list of lanes: wake everyone");
    }
}
