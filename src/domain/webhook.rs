//! Webhook subscriptions (docs/spec.md §16): a merchant's endpoints, which events each
//! takes, and the rules of delivery — what an answer means, when the next attempt is, when a
//! message is given up and when an endpoint is turned off. Pure: the caller measures time,
//! draws the jitter and makes the calls.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::ids::{MerchantId, WebhookEndpointId};
use crate::domain::text;

spelled!(
    /// Why an endpoint no longer receives: its receiver said `410 Gone`, or it kept failing
    /// with no success for `webhooks.disable_after`.
    DisabledReason {
        Gone => "GONE",
        Failing => "FAILING",
    }
);

spelled!(
    /// Where one message stands for one endpoint.
    MessageStatus {
        Pending => "PENDING",
        Delivered => "DELIVERED",
        Failed => "FAILED",
    }
);

/// The events an endpoint may ask for: the native events of docs/spec.md §6, and the two
/// this service sends about delivery itself.
pub const EVENT_TYPES: &[&str] = &[
    "order.completed",
    "order.failed",
    "order.cancelled",
    "payment.approved",
    "payment.declined",
    "payment.cancelled",
    "payment.failed",
    "payment.refunded",
    "payment.refund_failed",
    "settlement.failed",
    "notification.failed",
    "webhook.message.exhausted",
    "webhook.endpoint.disabled",
];

/// Whether `event_type` is one an endpoint may ask for.
pub fn known_event_type(event_type: &str) -> bool {
    EVENT_TYPES.contains(&event_type)
}

/// The longest endpoint URL and description.
pub const MAX_URL: usize = 2000;
pub const MAX_DESCRIPTION: usize = 500;
/// The most event types an endpoint names.
pub const MAX_EVENT_TYPES: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

fn invalid(field: &str, message: impl Into<String>) -> WebhookError {
    WebhookError::Invalid { field: field.to_owned(), message: message.into() }
}

/// Which events an endpoint takes: named types, or every one (`["*"]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventFilter {
    All,
    Only(Vec<String>),
}

impl EventFilter {
    /// The filter `types` ask for; `known` says which names are events of ours.
    ///
    /// # Errors
    /// `Invalid` naming `eventTypes`: empty, too many, `*` beside names, or a name that is
    /// no event of ours.
    pub fn parse(types: &[String], known: impl Fn(&str) -> bool) -> Result<EventFilter, WebhookError> {
        match types {
            [] => Err(invalid("eventTypes", "name at least one event type, or [\"*\"] for every one")),
            [all] if all == "*" => Ok(EventFilter::All),
            types if types.len() > MAX_EVENT_TYPES => {
                Err(invalid("eventTypes", format!("at most {MAX_EVENT_TYPES} event types")))
            }
            types => {
                let mut names: Vec<String> = Vec::with_capacity(types.len());
                for t in types {
                    if t == "*" {
                        return Err(invalid("eventTypes", "\"*\" stands alone"));
                    }
                    if !known(t) {
                        return Err(invalid("eventTypes", format!("{t:?} is not an event of ours")));
                    }
                    if !names.contains(t) {
                        names.push(t.clone());
                    }
                }
                Ok(EventFilter::Only(names))
            }
        }
    }

    pub fn matches(&self, event_type: &str) -> bool {
        match self {
            EventFilter::All => true,
            EventFilter::Only(names) => names.iter().any(|n| n == event_type),
        }
    }

    /// As the API writes it.
    pub fn names(&self) -> Vec<String> {
        match self {
            EventFilter::All => vec!["*".to_owned()],
            EventFilter::Only(names) => names.clone(),
        }
    }
}

/// Checks an endpoint's URL as written: `https://` (or `http://` when `allow_http`), a host,
/// no credentials in it, not over [`MAX_URL`]. Where the host resolves is for the caller.
///
/// # Errors
/// `Invalid` naming `url`.
pub fn check_url(url: &str, allow_http: bool) -> Result<(), WebhookError> {
    text::check("url", url, MAX_URL).map_err(|e| invalid("url", e.to_string()))?;
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid("url", "must be an https:// URL"))?;
    match scheme.to_ascii_lowercase().as_str() {
        "https" => {}
        "http" if allow_http => {}
        "http" => return Err(invalid("url", "must be https:// (http:// only with webhooks.allow_http)")),
        _ => return Err(invalid("url", "must be an https:// URL")),
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || authority.starts_with(':') {
        return Err(invalid("url", "must name a host"));
    }
    if authority.contains('@') {
        return Err(invalid("url", "must not carry credentials"));
    }
    Ok(())
}

/// A merchant's endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub id: WebhookEndpointId,
    pub merchant_id: MerchantId,
    pub url: String,
    pub description: String,
    pub filter: EventFilter,
    pub disabled: Option<DisabledReason>,
    pub created_at: DateTime<Utc>,
    /// Its last delivered message.
    pub last_success_at: Option<DateTime<Utc>>,
    /// When its current run of failures began (none while it succeeds).
    pub failing_since: Option<DateTime<Utc>>,
}

impl Endpoint {
    pub fn is_enabled(&self) -> bool {
        self.disabled.is_none()
    }

    /// Whether it takes `event_type` of `merchant`: only its merchant's, only what it asked
    /// for, only while enabled.
    pub fn takes(&self, merchant: MerchantId, event_type: &str) -> bool {
        self.is_enabled() && self.merchant_id == merchant && self.filter.matches(event_type)
    }

    /// A delivery to it succeeded at `at`.
    pub fn record_success(&mut self, at: DateTime<Utc>) {
        self.last_success_at = Some(at);
        self.failing_since = None;
    }

    /// A delivery to it failed at `at`; `Some` when that turns it off — at once for `410`,
    /// else once it has failed for `disable_after` with no success.
    pub fn record_failure(
        &mut self,
        at: DateTime<Utc>,
        gone: bool,
        disable_after: Duration,
    ) -> Option<DisabledReason> {
        if self.disabled.is_some() {
            return None;
        }
        let since = *self.failing_since.get_or_insert(at);
        let reason = if gone {
            Some(DisabledReason::Gone)
        } else {
            let span = chrono::Duration::from_std(disable_after).unwrap_or(chrono::Duration::MAX);
            (at - since >= span).then_some(DisabledReason::Failing)
        };
        self.disabled = reason;
        reason
    }

    /// Back on (an operator's act): its failures forgotten.
    pub fn enable(&mut self) {
        self.disabled = None;
        self.failing_since = None;
    }
}

/// What an attempt's answer was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A 2xx.
    Success,
    /// `410 Gone`: the receiver wants no more.
    Gone,
    /// Any other status, a timeout, a refused connection; `Retry-After` when it gave one.
    Failure { retry_after: Option<Duration> },
}

impl Answer {
    /// The answer to an HTTP status.
    pub fn of_status(status: u16, retry_after: Option<Duration>) -> Answer {
        match status {
            200..=299 => Answer::Success,
            410 => Answer::Gone,
            _ => Answer::Failure { retry_after },
        }
    }
}

/// What follows an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Delivered,
    /// Try again after this long.
    RetryIn(Duration),
    /// The schedule is spent: the message is `FAILED` for this endpoint.
    Exhausted,
    /// The receiver said `410`: the message is `FAILED` and the endpoint turned off.
    Gone,
}

/// The attempts' schedule (`webhooks.schedule`): the delay before each retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule(pub Vec<Duration>);

impl Schedule {
    /// After the `attempts`-th attempt (1 for the first) answered `answer`: what next.
    /// `jitter` in `[-1, 1]` moves a delay by up to a tenth either way. A `Retry-After` is
    /// honoured when it asks for longer than the schedule, but never beyond the schedule's
    /// following step (a receiver cannot park a message for years).
    pub fn next(&self, attempts: u32, answer: Answer, jitter: f64) -> Next {
        let retry_after = match answer {
            Answer::Success => return Next::Delivered,
            Answer::Gone => return Next::Gone,
            Answer::Failure { retry_after } => retry_after,
        };
        let Some(step) = self.0.get(attempts.saturating_sub(1) as usize).copied() else {
            return Next::Exhausted;
        };
        let ceiling = self.0.get(attempts as usize).copied().unwrap_or(step).max(step);
        let jittered = step.mul_f64((1.0 + jitter.clamp(-1.0, 1.0) / 10.0).max(0.0));
        let delay = match retry_after {
            Some(asked) if asked > jittered => asked.min(ceiling),
            _ => jittered,
        };
        Next::RetryIn(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn schedule() -> Schedule {
        Schedule([5, 300, 1800, 7200, 18000, 36000, 36000].map(secs).to_vec())
    }

    #[test]
    fn the_schedule_retries_then_gives_up() {
        let s = schedule();
        let fail = Answer::Failure { retry_after: None };
        for (attempts, expected) in
            [(1, 5), (2, 300), (3, 1800), (4, 7200), (5, 18000), (6, 36000), (7, 36000)]
        {
            assert_eq!(
                s.next(attempts, fail, 0.0),
                Next::RetryIn(secs(expected)),
                "after attempt {attempts}"
            );
        }
        assert_eq!(s.next(8, fail, 0.0), Next::Exhausted, "eight attempts in all");
        assert_eq!(s.next(3, Answer::Success, 0.0), Next::Delivered);
        assert_eq!(s.next(1, Answer::Gone, 0.0), Next::Gone);
    }

    #[test]
    fn jitter_moves_a_delay_by_a_tenth_at_most() {
        let s = schedule();
        let fail = Answer::Failure { retry_after: None };
        assert_eq!(s.next(2, fail, 1.0), Next::RetryIn(secs(330)));
        assert_eq!(s.next(2, fail, -1.0), Next::RetryIn(secs(270)));
        assert_eq!(s.next(2, fail, 7.0), Next::RetryIn(secs(330)), "clamped");
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_next_step_only() {
        let s = schedule();
        let asked = |d| Answer::Failure { retry_after: Some(d) };
        assert_eq!(s.next(1, asked(secs(60)), 0.0), Next::RetryIn(secs(60)), "longer than 5 s: honoured");
        assert_eq!(s.next(1, asked(secs(1)), 0.0), Next::RetryIn(secs(5)), "shorter: the schedule");
        let ten_years = secs(10 * 365 * 24 * 3600);
        assert_eq!(s.next(1, asked(ten_years), 0.0), Next::RetryIn(secs(300)), "capped at the next step");
        assert_eq!(s.next(7, asked(ten_years), 0.0), Next::RetryIn(secs(36000)), "the last step caps itself");
    }

    #[test]
    fn answers_are_read_by_status() {
        assert_eq!(Answer::of_status(204, None), Answer::Success);
        assert_eq!(Answer::of_status(410, None), Answer::Gone);
        assert_eq!(
            Answer::of_status(301, None),
            Answer::Failure { retry_after: None },
            "no redirect followed"
        );
        assert_eq!(Answer::of_status(503, Some(secs(9))), Answer::Failure { retry_after: Some(secs(9)) });
    }

    #[test]
    fn filters_take_what_they_name() {
        let known = |t: &str| t.starts_with("order.") || t.starts_with("payment.");
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(EventFilter::parse(&names(&["*"]), known), Ok(EventFilter::All));
        let only = EventFilter::parse(&names(&["order.completed", "order.completed"]), known).unwrap();
        assert_eq!(only, EventFilter::Only(names(&["order.completed"])));
        assert!(only.matches("order.completed") && !only.matches("order.failed"));
        for bad in [&[][..], &["*", "order.completed"][..], &["shipment.sent"][..]] {
            assert!(EventFilter::parse(&names(bad), known).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn urls_are_https_with_a_host_and_no_credentials() {
        assert!(check_url("https://erp.example/hooks?x=1", false).is_ok());
        assert!(check_url("http://erp.example/hooks", true).is_ok());
        for (url, allow) in [
            ("http://erp.example/hooks", false),
            ("ftp://erp.example", true),
            ("https://", false),
            ("https:///path", false),
            ("https://user:pw@erp.example/", false),
            ("erp.example/hooks", false),
        ] {
            assert!(check_url(url, allow).is_err(), "{url}");
        }
    }

    fn endpoint() -> Endpoint {
        Endpoint {
            id: WebhookEndpointId::new(),
            merchant_id: MerchantId::new(),
            url: "https://erp.example/hooks".into(),
            description: String::new(),
            filter: EventFilter::All,
            disabled: None,
            created_at: DateTime::from_timestamp(0, 0).unwrap(),
            last_success_at: None,
            failing_since: None,
        }
    }

    #[test]
    fn an_endpoint_is_turned_off_by_gone_or_by_failing_long_enough() {
        let at = |h: i64| DateTime::from_timestamp(h * 3600, 0).unwrap();
        let five_days = secs(5 * 24 * 3600);
        let mut e = endpoint();
        assert_eq!(e.record_failure(at(1), false, five_days), None);
        assert_eq!(e.record_failure(at(100), false, five_days), None, "99 h of failures");
        assert_eq!(e.record_failure(at(121), false, five_days), Some(DisabledReason::Failing));
        assert!(!e.takes(e.merchant_id, "order.completed"));
        e.enable();
        assert_eq!(e.record_failure(at(122), false, five_days), None, "its failures forgotten");
        e.record_success(at(123));
        assert_eq!(e.failing_since, None);
        assert_eq!(e.record_failure(at(124), true, five_days), Some(DisabledReason::Gone));
        assert_eq!(e.record_failure(at(125), true, five_days), None, "disabled once");
        let e = endpoint();
        assert!(e.takes(e.merchant_id, "order.completed"));
        assert!(!e.takes(MerchantId::new(), "order.completed"), "never another merchant's events");
    }
}
