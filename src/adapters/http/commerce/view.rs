//! Our orders as the commerce backend's clients read them: its enum names, its step
//! sequence and `detail` texts, its `LocalDateTime`s and amounts (docs/dialects.md maps
//! each of our states to its names).

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::adapters::messaging::contract::{Encoded, commerce};
use crate::application::ports::{OrderRecord, OutboxRecord, StepRecord};
use crate::domain::money::Money;
use crate::domain::notification::{FailurePolicy, NotificationStatus};
use crate::domain::order::{OrderStatus, SagaStep, StepFact, StepStatus};
use crate::domain::payment::PaymentStatus;
use crate::domain::settlement::SettlementStatus;

/// A time as the platform's Jackson writes a `LocalDateTime`: ISO-8601 without an offset,
/// seconds always, the fraction only as long as it needs to be (`2026-05-01T10:00:00`,
/// `2026-05-01T10:00:00.25`). Our times are UTC wall time (docs/dialects.md).
pub fn local(at: DateTime<Utc>) -> String {
    crate::adapters::jackson::local_date_time(at.naive_utc())
}

/// An amount in the currency's major unit, as a JSON number (`12000` won, `12.5` dollars).
pub fn major(amount: Money) -> serde_json::Value {
    serde_json::from_str::<serde_json::Number>(&amount.major_text())
        .map_or_else(|_| amount.minor().into(), serde_json::Value::Number)
}

/// Its `OrderStatus` for ours: a payment under way is its `PAYMENT_PENDING`, an approved
/// one its `PAID`.
pub fn order_status(record: &OrderRecord) -> &'static str {
    match record.order.status {
        OrderStatus::Created if record.payment.is_none() => "CREATED",
        OrderStatus::Created | OrderStatus::AwaitingPayment | OrderStatus::PendingConfirmation => {
            "PAYMENT_PENDING"
        }
        OrderStatus::PaymentApproved => "PAID",
        OrderStatus::SettlementRequested => "SETTLEMENT_REQUESTED",
        OrderStatus::Completed => "COMPLETED",
        OrderStatus::Failed => "FAILED",
        OrderStatus::Cancelled => "CANCELLED",
    }
}

/// Its `PaymentStatus` (`READY, APPROVED, FAILED, CANCELLED`) for ours.
pub fn payment_status(status: PaymentStatus) -> &'static str {
    match status {
        PaymentStatus::Requested => "READY",
        // Its word for a payment whose outcome is unknown (docs/dialects.md).
        PaymentStatus::ConfirmationRequired => "CONFIRMATION_REQUIRED",
        PaymentStatus::Approved | PaymentStatus::RefundPending | PaymentStatus::PartiallyRefunded => {
            "APPROVED"
        }
        PaymentStatus::Declined => "FAILED",
        PaymentStatus::Cancelled | PaymentStatus::Refunded => "CANCELLED",
    }
}

/// Its `SettlementStatus` (`READY, REQUESTED, COMPLETED, FAILED`): a settlement the
/// provider took is its `REQUESTED`; one not yet taken, its `READY`.
pub fn settlement_status(status: SettlementStatus) -> &'static str {
    match status {
        SettlementStatus::Requested
        | SettlementStatus::RetryScheduled
        | SettlementStatus::AwaitingOperator => "READY",
        SettlementStatus::Succeeded => "REQUESTED",
        SettlementStatus::Failed => "FAILED",
    }
}

/// Its `NotificationEventStatus`: the same names, ours `PENDING` being its `REQUESTED`.
pub fn notification_status(status: NotificationStatus) -> &'static str {
    match status {
        NotificationStatus::Pending => "REQUESTED",
        other => other.as_str(),
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepView {
    pub step_id: i64,
    pub step_type: &'static str,
    pub status: &'static str,
    pub detail: String,
    pub created_at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutboxView {
    pub outbox_event_id: i64,
    pub topic: String,
    pub event_type: &'static str,
    pub status: &'static str,
    pub payload: String,
    pub retry_count: i32,
    pub next_attempt_at: Option<String>,
    pub created_at: String,
    pub last_attempt_at: Option<String>,
    pub published_at: Option<String>,
    pub dead_lettered_at: Option<String>,
    pub failure_code: Option<&'static str>,
    pub failure_reason: Option<String>,
}

/// Its `OrderFlowResponse`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowView {
    pub order_id: i64,
    pub order_status: &'static str,
    pub steps: Vec<StepView>,
    pub outbox_events: Vec<OutboxView>,
}

/// The platform's steps for our saga's rows, as its `CommerceOrchestrationService` writes
/// them: `ORDER_CREATE` and `PAYMENT READY` first, `COMPLETE` after a first notification
/// that went out, nothing for a notification's later retries or an operator's decision (it
/// audits those). Ids count from 1 within the order; `settlementId` and
/// `notificationEventId` are the order's number (one of each per order here). `mock`: our
/// simulated providers answered, so their failures are worded as the platform's mocks.
pub fn steps(record: &OrderRecord, mock: bool) -> Vec<StepView> {
    let number = record.order.number;
    let payment_number = record.payment.as_ref().map_or(0, |p| p.number);
    let mut out: Vec<(&'static str, &'static str, String, DateTime<Utc>)> = Vec::new();
    let mut notification_failed = false;
    for (i, row) in record.steps.iter().enumerate() {
        let StepRecord { step, status, detail, fact, created_at } = row;
        let at = *created_at;
        let ours = detail.clone().unwrap_or_default();
        if i == 0 {
            out.push(("ORDER_CREATE", "SUCCESS", "Order already created".into(), at));
        }
        let first_payment = *step == SagaStep::Payment && !out.iter().any(|s| s.0 == "PAYMENT");
        if first_payment {
            out.push(("PAYMENT", "READY", "Payment requested".into(), at));
        }
        let plain = |status: &StepStatus| match status {
            StepStatus::Success | StepStatus::Skipped => "SUCCESS",
            StepStatus::Failed => "FAILED",
            StepStatus::Ready => "READY",
        };
        match (step, status) {
            (SagaStep::Payment, StepStatus::Success) => {
                out.push(("PAYMENT", "SUCCESS", format!("Payment approved: paymentId={payment_number}"), at));
            }
            // Its mock provider's refusal, as its `PaymentService` records the exception.
            (SagaStep::Payment, StepStatus::Failed) if mock => {
                out.push(("PAYMENT", "FAILED", "Simulated payment failure".into(), at));
            }
            // An unknown outcome: its step is `PAYMENT FAILED` (the order, ours, waits for
            // reconciliation rather than failing: docs/dialects.md).
            (SagaStep::Payment, StepStatus::Ready) => out.push(("PAYMENT", "FAILED", ours, at)),
            (SagaStep::Payment, s) => out.push(("PAYMENT", plain(s), ours, at)),
            (SagaStep::Settlement, StepStatus::Success) => {
                out.push((
                    "SETTLEMENT",
                    "SUCCESS",
                    format!("Settlement requested: settlementId={number}"),
                    at,
                ));
            }
            (SagaStep::Settlement, StepStatus::Failed) if mock => out.push((
                "SETTLEMENT",
                "FAILED",
                format!("정산 요청 mock 실패가 발생했습니다. settlementId={number}"),
                at,
            )),
            (SagaStep::Settlement, s) => out.push(("SETTLEMENT", plain(s), ours, at)),
            (SagaStep::Compensation, StepStatus::Success) => out.push((
                "COMPENSATION",
                "SUCCESS",
                format!("Payment cancelled after settlement failure: paymentId={payment_number}"),
                at,
            )),
            (SagaStep::Compensation, StepStatus::Ready) => {
                let text = match fact {
                    Some(StepFact::AwaitingNotification(NotificationStatus::RetryScheduled)) => format!(
                        "Notification retry scheduled; payment and settlement are kept as-is, nextAttemptAt={}",
                        record
                            .notification
                            .as_ref()
                            .and_then(|n| n.next_attempt_at)
                            .map_or_else(|| "null".to_owned(), local)
                    ),
                    Some(StepFact::AwaitingNotification(NotificationStatus::ManualInterventionRequired)) => {
                        "Notification requires manual intervention; payment and settlement are kept as-is"
                            .into()
                    }
                    _ => "Notification recovery pending; payment and settlement are kept as-is".into(),
                };
                out.push(("COMPENSATION", "READY", text, at));
            }
            (SagaStep::Compensation, s) => out.push(("COMPENSATION", plain(s), ours, at)),
            // Its scheduler and operators leave no step: what follows a failed notification
            // is in the audit log.
            (SagaStep::Notification, _) if notification_failed => {}
            (SagaStep::Notification, StepStatus::Failed) => {
                notification_failed = true;
                let kind = match fact {
                    Some(StepFact::NotificationFailed(FailurePolicy::AutoRetry)) => "retry",
                    _ => "manual intervention",
                };
                out.push((
                    "NOTIFICATION",
                    "FAILED",
                    format!("알림 요청 {kind} 대상 실패가 발생했습니다. notificationEventId={number}"),
                    at,
                ));
            }
            (SagaStep::Notification, StepStatus::Ready) => out.push(("NOTIFICATION", "READY", ours, at)),
            (SagaStep::Notification, StepStatus::Success | StepStatus::Skipped) => {
                out.push((
                    "NOTIFICATION",
                    "SUCCESS",
                    format!("Notification requested: notificationEventId={number}"),
                    at,
                ));
                if record.order.status == OrderStatus::Completed {
                    out.push(("COMPLETE", "SUCCESS", "Happy path orchestration completed".into(), at));
                }
            }
        }
    }
    out.into_iter()
        .zip(1..)
        .map(|((step_type, status, detail, at), id)| StepView {
            step_id: id,
            step_type,
            status,
            detail,
            created_at: local(at),
        })
        .collect()
}

/// The platform's outbox rows of an order: each of our events as the §12 `commerce`
/// contract sends it (a completed order: `SETTLEMENT_REQUESTED` then
/// `NOTIFICATION_REQUESTED`, both carrying our outbox row's id); events that contract
/// sends natively are not the platform's and are left out.
pub fn outbox(events: &[OutboxRecord]) -> Vec<OutboxView> {
    let mut out = Vec::new();
    for record in events {
        let Ok(Encoded::Messages(messages)) = commerce::encode(record) else { continue };
        for message in messages {
            let topic = message.destination.unwrap_or_default();
            let event_type = if topic == commerce::SETTLEMENT_TOPIC {
                "SETTLEMENT_REQUESTED"
            } else {
                "NOTIFICATION_REQUESTED"
            };
            out.push(OutboxView {
                outbox_event_id: record.id,
                topic,
                event_type,
                status: record.status.as_str(),
                payload: String::from_utf8_lossy(&message.body).into_owned(),
                retry_count: record.retry_count,
                next_attempt_at: record.next_attempt_at.map(local),
                created_at: local(record.created_at),
                last_attempt_at: record.last_attempt_at.map(local),
                published_at: record.published_at.map(local),
                dead_lettered_at: record.dead_lettered_at.map(local),
                failure_code: record.failure_code.map(|c| c.as_str()),
                failure_reason: record.failure_reason.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn times_are_written_as_its_local_date_times() {
        let at = Utc.with_ymd_and_hms(2026, 5, 1, 10, 0, 0).unwrap();
        assert_eq!(local(at), "2026-05-01T10:00:00");
        assert_eq!(local(at + chrono::Duration::milliseconds(250)), "2026-05-01T10:00:00.25");
        assert_eq!(local(at + chrono::Duration::microseconds(123_456)), "2026-05-01T10:00:00.123456");
    }

    #[test]
    fn amounts_are_major_units() {
        let money = |minor, code: &str| Money::new(minor, code.parse().unwrap()).unwrap();
        assert_eq!(major(money(12000, "KRW")).to_string(), "12000");
        assert_eq!(major(money(1250, "USD")).to_string(), "12.5");
        assert_eq!(major(money(1200, "USD")).to_string(), "12");
        assert_eq!(major(money(5, "USD")).to_string(), "0.05");
        assert_eq!(major(money(1234, "KWD")).to_string(), "1.234");
    }
}
