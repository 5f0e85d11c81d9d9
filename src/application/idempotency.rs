//! Idempotency keys (docs/spec.md §5): the same key with the same request replays the first
//! response; with a different request it is refused; while the first runs, it conflicts.
//!
//! Keys are scoped to the caller. A reservation carries the order id it will create, so a
//! retry after a crash (lease expired) resumes that same order instead of charging twice.

use std::future::Future;
use std::sync::Arc;

use chrono::Duration;

use crate::application::audit::{self, entity};
use crate::application::error::Chain;
use crate::application::ports::{
    Changes, Clock, IdempotencyBegin, IdempotencyStore, StoredResponse, UnitOfWork,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;

pub const MAX_KEY_LEN: usize = 255;

/// What a request under an idempotency key came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keyed {
    /// This request ran; its response is stored for replay.
    Ran(StoredResponse),
    /// An earlier request with this key and the same body ran: its response, replayed.
    Replayed(StoredResponse),
}

pub struct IdempotencyService {
    store: Arc<dyn IdempotencyStore>,
    uow: Arc<dyn UnitOfWork>,
    clock: Arc<dyn Clock>,
    /// How long a reservation holds before a retry may take it over.
    lease: Duration,
}

impl IdempotencyService {
    pub fn new(
        store: Arc<dyn IdempotencyStore>,
        uow: Arc<dyn UnitOfWork>,
        clock: Arc<dyn Clock>,
        lease: Duration,
    ) -> Self {
        IdempotencyService { store, uow, clock, lease }
    }

    /// Checks a client-supplied key.
    ///
    /// # Errors
    /// `Validation` on field `Idempotency-Key` when empty, too long or not visible ASCII.
    pub fn validate_key(key: &str) -> Result<(), AppError> {
        if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(AppError::validation(
                "Idempotency-Key",
                format!("must be 1 to {MAX_KEY_LEN} visible ASCII characters"),
            ));
        }
        Ok(())
    }

    /// Runs `request` at most once per (caller, `key`), the whole lifecycle of the key:
    /// reserve it (or replay the stored response, or refuse), run `request` with the order
    /// id the reservation carries (the same id on a retry after a crash, so the retry
    /// resumes that order instead of creating a second one), store its response, and on
    /// failure give the key back — forgotten when the request was refused before anything
    /// was created (`Validation`, `Forbidden`), so a corrected request may use it; kept
    /// otherwise (the order may exist), so a retry resumes it.
    ///
    /// # Errors
    /// `Validation` for a malformed key; `Unprocessable` `IDEMPOTENCY_KEY_REUSED` when the
    /// key was used with another body (`fingerprint`); `Conflict`
    /// `IDEMPOTENCY_KEY_IN_PROGRESS` while a request with this key still runs; whatever
    /// `request` returns; `Unavailable` when the database fails.
    pub async fn run<F, Fut>(
        &self,
        actor: &Actor,
        key: &str,
        fingerprint: &str,
        request: F,
    ) -> Result<Keyed, AppError>
    where
        F: FnOnce(OrderId) -> Fut,
        Fut: Future<Output = Result<StoredResponse, AppError>>,
    {
        let order_id = match self.begin(actor, key, fingerprint).await? {
            IdempotencyBegin::Completed(stored) => return Ok(Keyed::Replayed(stored)),
            IdempotencyBegin::Mismatch => {
                return Err(AppError::Unprocessable {
                    code: "IDEMPOTENCY_KEY_REUSED",
                    message: "this Idempotency-Key was used with a different request".into(),
                });
            }
            IdempotencyBegin::InProgress => {
                return Err(AppError::Conflict {
                    code: "IDEMPOTENCY_KEY_IN_PROGRESS",
                    message: "a request with this Idempotency-Key is still being processed".into(),
                });
            }
            IdempotencyBegin::Started { order_id } => order_id,
        };
        match request(order_id).await {
            Ok(stored) => {
                self.store.complete(&actor.scope(), key, &stored, self.clock.now()).await?;
                Ok(Keyed::Ran(stored))
            }
            Err(err) => {
                let forget = matches!(err, AppError::Validation { .. } | AppError::Forbidden { .. });
                if let Err(release) = self.store.release(&actor.scope(), key, forget).await {
                    tracing::warn!(error = %Chain(&release), "could not release an idempotency key");
                }
                Err(err)
            }
        }
    }

    /// Reserves the key for this request, or says why not.
    ///
    /// # Errors
    /// `Validation` for a malformed key; `Unavailable` when the database fails.
    async fn begin(&self, actor: &Actor, key: &str, fingerprint: &str) -> Result<IdempotencyBegin, AppError> {
        Self::validate_key(key)?;
        let now = self.clock.now();
        let begin =
            self.store.begin(&actor.scope(), key, fingerprint, OrderId::new(), now, now + self.lease).await?;
        let action = match &begin {
            IdempotencyBegin::Completed(_) => Some(AuditAction::Replay),
            IdempotencyBegin::Mismatch => Some(AuditAction::IdempotencyKeyReused),
            _ => None,
        };
        if let Some(action) = action {
            let mut changes = Changes::default();
            changes.audit.push(audit::record(action, entity::IDEMPOTENCY_KEY, key, actor, None, now));
            self.uow.commit(changes).await?;
        }
        Ok(begin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::ports::{MockClock, MockIdempotencyStore, MockUnitOfWork, RepoError};
    use chrono::{DateTime, Utc};

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
    }

    fn service(store: MockIdempotencyStore, commits: usize) -> IdempotencyService {
        let mut uow = MockUnitOfWork::new();
        uow.expect_commit().times(commits).returning(|_| Ok(()));
        let mut clock = MockClock::new();
        clock.expect_now().returning(now);
        IdempotencyService::new(Arc::new(store), Arc::new(uow), Arc::new(clock), Duration::seconds(30))
    }

    fn started(store: &mut MockIdempotencyStore, order_id: OrderId) {
        store
            .expect_begin()
            .times(1)
            .returning(move |_, _, _, _, _, _| Ok(IdempotencyBegin::Started { order_id }));
    }

    fn created() -> StoredResponse {
        StoredResponse { status: 201, body: "{}".into() }
    }

    #[tokio::test]
    async fn a_request_runs_with_the_reserved_order_id_and_its_response_is_stored() {
        let reserved = OrderId::new();
        let mut store = MockIdempotencyStore::new();
        started(&mut store, reserved);
        store.expect_complete().times(1).returning(|_, _, r, _| {
            assert_eq!(r.status, 201);
            Ok(())
        });
        store.expect_release().never();
        let outcome = service(store, 0)
            .run(&Actor::customer("alice"), "k1", "f", |order_id| async move {
                assert_eq!(order_id, reserved, "a retry after a crash resumes the same order");
                Ok(created())
            })
            .await
            .unwrap();
        assert_eq!(outcome, Keyed::Ran(created()));
    }

    #[tokio::test]
    async fn a_refused_request_frees_its_key_and_a_failed_one_keeps_it() {
        for (err, forget) in [
            (AppError::validation("items", "empty"), true),
            (AppError::Forbidden { code: "FORBIDDEN", message: "no".into() }, true),
            (AppError::from(RepoError::unavailable("down")), false),
            (AppError::internal("bug"), false),
        ] {
            let mut store = MockIdempotencyStore::new();
            started(&mut store, OrderId::new());
            store.expect_complete().never();
            store.expect_release().times(1).returning(move |_, _, f| {
                assert_eq!(f, forget, "forget the key exactly when nothing was created");
                Ok(())
            });
            let expected = err.to_string();
            let got = service(store, 0)
                .run(&Actor::customer("alice"), "k1", "f", |_| async move { Err(err) })
                .await
                .unwrap_err();
            assert_eq!(got.to_string(), expected, "the request's own error reaches the caller");
        }
    }

    #[tokio::test]
    async fn a_completed_key_replays_and_a_reused_or_busy_one_refuses_without_running() {
        let cases = [
            (IdempotencyBegin::Completed(created()), Ok(Keyed::Replayed(created())), 1),
            (IdempotencyBegin::Mismatch, Err("IDEMPOTENCY_KEY_REUSED"), 1),
            (IdempotencyBegin::InProgress, Err("IDEMPOTENCY_KEY_IN_PROGRESS"), 0),
        ];
        for (begin, expected, audits) in cases {
            let mut store = MockIdempotencyStore::new();
            store.expect_begin().times(1).returning(move |_, _, _, _, _, _| Ok(begin.clone()));
            store.expect_complete().never();
            store.expect_release().never();
            let got = service(store, audits)
                .run(&Actor::customer("alice"), "k1", "f", |_| async { panic!("must not run") })
                .await;
            match (got, expected) {
                (Ok(keyed), Ok(want)) => assert_eq!(keyed, want),
                (Err(AppError::Unprocessable { code, .. } | AppError::Conflict { code, .. }), Err(want)) => {
                    assert_eq!(code, want)
                }
                (got, want) => panic!("{got:?} where {want:?} was expected"),
            }
        }
    }

    #[tokio::test]
    async fn a_malformed_key_is_refused_before_the_store_is_asked() {
        let mut store = MockIdempotencyStore::new();
        store.expect_begin().never();
        let err = service(store, 0)
            .run(&Actor::customer("alice"), "has space", "f", |_| async { Ok(created()) })
            .await
            .unwrap_err();
        assert!(
            matches!(err, AppError::Validation { ref field, .. } if field == "Idempotency-Key"),
            "{err:?}"
        );
    }
}
