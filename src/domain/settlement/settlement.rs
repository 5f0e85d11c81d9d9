//! The settlement aggregate and its transition functions.

use chrono::{DateTime, Duration, Utc};

use super::error::SettlementError;
use super::event::SettlementEvent;
use super::status::{SettlementAction, SettlementStatus};
use crate::domain::ids::{OrderId, PaymentId, SettlementId};
use crate::domain::money::Money;
use crate::domain::retry::{NextAttempt, RetryPolicy};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub id: SettlementId,
    pub order_id: OrderId,
    pub payment_id: PaymentId,
    pub amount: Money,
    pub status: SettlementStatus,
    pub failure_reason: Option<String>,
    /// Attempts whose answer is known (a transient failure counts).
    pub attempts: i32,
    /// When a `RETRY_SCHEDULED` settlement is tried again.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// What the last transient failure was.
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: i64,
}

impl Settlement {
    pub fn request(order_id: OrderId, payment_id: PaymentId, amount: Money, now: DateTime<Utc>) -> Self {
        Settlement {
            id: SettlementId::new(),
            order_id,
            payment_id,
            amount,
            status: SettlementStatus::Requested,
            failure_reason: None,
            attempts: 0,
            next_attempt_at: None,
            last_error: None,
            created_at: now,
            updated_at: now,
            version: 0,
        }
    }

    fn guard(&self, action: SettlementAction, allowed: bool) -> Result<(), SettlementError> {
        if allowed { Ok(()) } else { Err(SettlementError::InvalidTransition { from: self.status, action }) }
    }

    fn move_to(&mut self, status: SettlementStatus, now: DateTime<Utc>) {
        self.status = status;
        self.updated_at = now;
        if status != SettlementStatus::RetryScheduled {
            self.next_attempt_at = None;
        }
    }

    /// The settlement service took it.
    pub fn succeed(&mut self, now: DateTime<Utc>) -> Result<Vec<SettlementEvent>, SettlementError> {
        self.guard(SettlementAction::Succeed, self.status == SettlementStatus::Requested)?;
        self.attempts += 1;
        self.last_error = None;
        self.move_to(SettlementStatus::Succeeded, now);
        Ok(vec![])
    }

    /// The settlement service refused it (an explicit refusal, never an outage): the saga
    /// compensates the payment.
    pub fn fail(
        &mut self,
        reason: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Result<Vec<SettlementEvent>, SettlementError> {
        self.guard(SettlementAction::Fail, self.status == SettlementStatus::Requested)?;
        let reason = reason.into();
        self.attempts += 1;
        self.failure_reason = Some(reason.clone());
        self.move_to(SettlementStatus::Failed, now);
        Ok(vec![SettlementEvent::Failed { reason }])
    }

    /// No answer (unreachable, a timeout, 408/429/5xx): tried again after the backoff — or
    /// after `not_before`, when the service asked for longer — until `retry`'s attempts are
    /// spent; then it waits for an operator. Never a failure: an accounting system being
    /// down must not refund a customer.
    pub fn defer(
        &mut self,
        reason: impl Into<String>,
        retry: &RetryPolicy,
        not_before: Option<Duration>,
        now: DateTime<Utc>,
    ) -> Result<Vec<SettlementEvent>, SettlementError> {
        self.guard(SettlementAction::Defer, self.status == SettlementStatus::Requested)?;
        self.attempts += 1;
        self.last_error = Some(reason.into());
        match retry.after(self.attempts, not_before, now) {
            NextAttempt::Operator => self.move_to(SettlementStatus::AwaitingOperator, now),
            NextAttempt::At(at) => {
                self.move_to(SettlementStatus::RetryScheduled, now);
                self.next_attempt_at = Some(at);
            }
        }
        Ok(vec![])
    }

    /// The retry processor takes a due retry: the next attempt, under the same id.
    pub fn claim_retry(&mut self, now: DateTime<Utc>) -> Result<Vec<SettlementEvent>, SettlementError> {
        let due = self.status == SettlementStatus::RetryScheduled
            && self.next_attempt_at.is_none_or(|at| at <= now);
        self.guard(SettlementAction::ClaimRetry, due)?;
        self.move_to(SettlementStatus::Requested, now);
        Ok(vec![])
    }

    /// An operator asks for another attempt now (one more, whatever were spent).
    pub fn operator_retry(&mut self, now: DateTime<Utc>) -> Result<Vec<SettlementEvent>, SettlementError> {
        self.guard(SettlementAction::OperatorRetry, self.waiting())?;
        self.move_to(SettlementStatus::Requested, now);
        Ok(vec![])
    }

    /// An operator confirms it was settled outside the service (the accounting system has
    /// it): the saga goes on.
    pub fn mark_settled(&mut self, now: DateTime<Utc>) -> Result<Vec<SettlementEvent>, SettlementError> {
        self.guard(SettlementAction::MarkSettled, self.waiting())?;
        self.last_error = None;
        self.move_to(SettlementStatus::Succeeded, now);
        Ok(vec![])
    }

    fn waiting(&self) -> bool {
        matches!(self.status, SettlementStatus::RetryScheduled | SettlementStatus::AwaitingOperator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SettlementStatus::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    const RETRY: RetryPolicy = RetryPolicy::new(3, Duration::seconds(60));

    fn in_status(status: SettlementStatus) -> Settlement {
        let amount = Money::new(5, "EUR".parse().unwrap()).unwrap();
        let mut s = Settlement::request(OrderId::new(), PaymentId::new(), amount, now());
        s.status = status;
        s
    }

    type Action = fn(&mut Settlement) -> Result<Vec<SettlementEvent>, SettlementError>;

    #[test]
    fn transition_table() {
        let actions: [(SettlementAction, Action); 6] = [
            (SettlementAction::Succeed, |s| s.succeed(now())),
            (SettlementAction::Fail, |s| s.fail("refused", now())),
            (SettlementAction::Defer, |s| s.defer("503", &RETRY, None, now())),
            (SettlementAction::ClaimRetry, |s| s.claim_retry(now())),
            (SettlementAction::OperatorRetry, |s| s.operator_retry(now())),
            (SettlementAction::MarkSettled, |s| s.mark_settled(now())),
        ];
        // (from, [next status per action above, None: refused])
        let table: [(SettlementStatus, [Option<SettlementStatus>; 6]); 5] = [
            (Requested, [Some(Succeeded), Some(Failed), Some(RetryScheduled), None, None, None]),
            (RetryScheduled, [None, None, None, Some(Requested), Some(Requested), Some(Succeeded)]),
            (AwaitingOperator, [None, None, None, None, Some(Requested), Some(Succeeded)]),
            (Succeeded, [None; 6]),
            (Failed, [None; 6]),
        ];
        for (from, expected) in table {
            for ((action, run), next) in actions.iter().zip(expected) {
                let mut s = in_status(from);
                match next {
                    Some(next) => {
                        run(&mut s).unwrap_or_else(|e| panic!("{from} {action}: {e}"));
                        assert_eq!(s.status, next, "{from} {action}");
                    }
                    None => assert_eq!(
                        run(&mut s),
                        Err(SettlementError::InvalidTransition { from, action: *action }),
                        "{from} {action}"
                    ),
                }
            }
        }
    }

    /// docs/spec.md §13: an outage is retried with backoff, the same settlement each time,
    /// and then waits for an operator — it never fails (which would compensate).
    #[test]
    fn an_outage_backs_off_then_waits_for_an_operator_and_never_fails() {
        // The service asks for longer than the backoff (90 s > 60 s): honoured.
        let mut asked = in_status(Requested);
        asked.defer("429", &RETRY, Some(Duration::seconds(90)), now()).unwrap();
        assert_eq!(
            asked.next_attempt_at,
            Some(now() + Duration::seconds(90)),
            "the service's Retry-After, when longer"
        );
        // Asked for years: no longer than the schedule's own longest wait (2 min here).
        let mut parked = in_status(Requested);
        parked.defer("503", &RETRY, Some(Duration::days(3650)), now()).unwrap();
        assert_eq!(parked.next_attempt_at, Some(now() + Duration::minutes(2)), "a Retry-After of ten years");
        let mut s = in_status(Requested);
        s.defer("503", &RETRY, None, now()).unwrap();
        assert_eq!((s.status, s.next_attempt_at), (RetryScheduled, Some(now() + Duration::seconds(60))));
        assert!(s.clone().claim_retry(now()).is_err(), "not due yet");
        s.claim_retry(now() + Duration::seconds(60)).unwrap();
        s.defer("429", &RETRY, Some(Duration::hours(2)), now()).unwrap();
        assert_eq!(
            s.next_attempt_at,
            Some(now() + Duration::minutes(2)),
            "the backoff, the cap of any Retry-After"
        );
        s.claim_retry(now() + Duration::minutes(2)).unwrap();
        let events = s.defer("timed out", &RETRY, None, now()).unwrap();
        assert_eq!((s.status, s.attempts, s.next_attempt_at), (AwaitingOperator, 3, None));
        assert!(events.is_empty(), "no settlement.failed: nothing is compensated");
        assert_eq!(s.last_error.as_deref(), Some("timed out"));
        // The operator's retry is one more attempt; a refusal then fails it.
        s.operator_retry(now()).unwrap();
        let events = s.fail("400", now()).unwrap();
        assert_eq!(events[0].event_type(), "settlement.failed");
    }
}
