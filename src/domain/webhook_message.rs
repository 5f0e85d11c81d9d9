//! One event's delivery to one endpoint (docs/spec.md §16): its state and what each attempt
//! makes of it. A message is `PENDING` until an attempt delivers it (`DELIVERED`) or the
//! schedule is spent (`FAILED`); a resend or a recover is one more attempt outside the
//! schedule (`manual`), whatever the message's state. Pure: the caller draws the jitter and
//! measures time.

use chrono::{DateTime, Utc};

use crate::domain::ids::{EventId, WebhookEndpointId};
use crate::domain::webhook::{Answer, MessageStatus, Next, Schedule};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("an attempt needs a PENDING message; this one is {0}")]
    NotPending(MessageStatus),
}

/// What an attempt made of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempted {
    Delivered,
    /// Tried again at this instant.
    RetryAt(DateTime<Utc>),
    /// The schedule is spent: `FAILED`, and `webhook.message.exhausted` is due.
    Exhausted,
    /// A manual attempt failed: `FAILED` again, nothing announced.
    Failed,
    /// `410 Gone`: `FAILED`, and the endpoint is to be turned off.
    Gone,
}

/// One event's delivery to one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub endpoint_id: WebhookEndpointId,
    pub event_id: EventId,
    pub event_type: String,
    pub status: MessageStatus,
    /// Attempts made so far.
    pub attempts: u32,
    /// The next attempt is one asked for by hand, outside the schedule.
    pub manual: bool,
    /// When the next attempt is due (`PENDING` only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl Message {
    /// A message due at once.
    pub fn new(
        endpoint_id: WebhookEndpointId,
        event_id: EventId,
        event_type: &str,
        now: DateTime<Utc>,
    ) -> Self {
        Message {
            endpoint_id,
            event_id,
            event_type: event_type.to_owned(),
            status: MessageStatus::Pending,
            attempts: 0,
            manual: false,
            next_attempt_at: Some(now),
            created_at: now,
        }
    }

    /// An attempt at `now` was answered `answer`: the message moves on the `schedule`
    /// (`jitter` in `[-1, 1]`), or — a manual attempt — is delivered or failed at once.
    ///
    /// # Errors
    /// `NotPending` unless the message is `PENDING`.
    pub fn attempted(
        &mut self,
        answer: Answer,
        schedule: &Schedule,
        jitter: f64,
        now: DateTime<Utc>,
    ) -> Result<Attempted, MessageError> {
        if self.status != MessageStatus::Pending {
            return Err(MessageError::NotPending(self.status));
        }
        self.attempts = self.attempts.saturating_add(1);
        let outcome = match (schedule.next(self.attempts, answer, jitter), self.manual) {
            (Next::Delivered, _) => Attempted::Delivered,
            (Next::Gone, _) => Attempted::Gone,
            (_, true) => Attempted::Failed,
            (Next::Exhausted, false) => Attempted::Exhausted,
            (Next::RetryIn(delay), false) => {
                let delay = chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
                Attempted::RetryAt(now.checked_add_signed(delay).unwrap_or(DateTime::<Utc>::MAX_UTC))
            }
        };
        self.status = match outcome {
            Attempted::Delivered => MessageStatus::Delivered,
            Attempted::RetryAt(_) => MessageStatus::Pending,
            Attempted::Exhausted | Attempted::Failed | Attempted::Gone => MessageStatus::Failed,
        };
        self.next_attempt_at = match outcome {
            Attempted::RetryAt(at) => Some(at),
            _ => None,
        };
        self.manual = false;
        Ok(outcome)
    }

    /// One more attempt, by hand, due at `now` (a resend or a recover), whatever the state:
    /// a delivered message is sent again under its id, a failed one tried once more, a
    /// pending one tried now instead of later.
    pub fn resend(&mut self, now: DateTime<Utc>) {
        self.status = MessageStatus::Pending;
        self.manual = true;
        self.next_attempt_at = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn schedule() -> Schedule {
        Schedule(vec![Duration::from_secs(5), Duration::from_secs(300)])
    }

    fn message() -> Message {
        Message::new(WebhookEndpointId::new(), EventId::new(), "order.completed", at(0))
    }

    const FAIL: Answer = Answer::Failure { retry_after: None };

    #[test]
    fn a_message_is_retried_on_the_schedule_then_exhausted() {
        let mut m = message();
        assert_eq!(m.next_attempt_at, Some(at(0)), "due at once");
        assert_eq!(m.attempted(FAIL, &schedule(), 0.0, at(1)), Ok(Attempted::RetryAt(at(6))));
        assert_eq!((m.status, m.attempts), (MessageStatus::Pending, 1));
        assert_eq!(m.attempted(FAIL, &schedule(), 0.0, at(6)), Ok(Attempted::RetryAt(at(306))));
        assert_eq!(m.attempted(FAIL, &schedule(), 0.0, at(306)), Ok(Attempted::Exhausted));
        assert_eq!((m.status, m.next_attempt_at), (MessageStatus::Failed, None));
        assert_eq!(
            m.attempted(Answer::Success, &schedule(), 0.0, at(400)),
            Err(MessageError::NotPending(MessageStatus::Failed)),
            "a failed message takes no attempt until resent"
        );
    }

    #[test]
    fn success_delivers_and_gone_fails_at_once() {
        let mut m = message();
        assert_eq!(m.attempted(Answer::Success, &schedule(), 0.0, at(1)), Ok(Attempted::Delivered));
        assert_eq!((m.status, m.next_attempt_at), (MessageStatus::Delivered, None));
        let mut m = message();
        assert_eq!(m.attempted(Answer::Gone, &schedule(), 0.0, at(1)), Ok(Attempted::Gone));
        assert_eq!(m.status, MessageStatus::Failed);
    }

    #[test]
    fn a_resend_is_one_attempt_outside_the_schedule() {
        let mut m = message();
        for t in [1, 6, 306] {
            m.attempted(FAIL, &schedule(), 0.0, at(t)).unwrap();
        }
        m.resend(at(1000));
        assert_eq!((m.status, m.manual, m.next_attempt_at), (MessageStatus::Pending, true, Some(at(1000))));
        assert_eq!(
            m.attempted(FAIL, &schedule(), 0.0, at(1000)),
            Ok(Attempted::Failed),
            "no exhaustion twice"
        );
        assert!(!m.manual);
        m.resend(at(2000));
        assert_eq!(m.attempted(Answer::Success, &schedule(), 0.0, at(2000)), Ok(Attempted::Delivered));
        assert_eq!(m.attempts, 5);
        m.resend(at(3000));
        assert_eq!(m.status, MessageStatus::Pending, "a delivered message may be sent again");
    }
}
