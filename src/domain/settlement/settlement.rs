//! The settlement aggregate and its transition functions.

use chrono::{DateTime, Utc};

use super::error::SettlementError;
use super::event::SettlementEvent;
use super::status::{SettlementAction, SettlementStatus};
use crate::domain::ids::{OrderId, PaymentId, SettlementId};
use crate::domain::money::Money;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub id: SettlementId,
    pub order_id: OrderId,
    pub payment_id: PaymentId,
    pub amount: Money,
    pub status: SettlementStatus,
    pub failure_reason: Option<String>,
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
            created_at: now,
            updated_at: now,
            version: 0,
        }
    }

    fn guard(&self, action: SettlementAction) -> Result<(), SettlementError> {
        if self.status == SettlementStatus::Requested {
            Ok(())
        } else {
            Err(SettlementError::InvalidTransition { from: self.status, action })
        }
    }

    pub fn succeed(&mut self, now: DateTime<Utc>) -> Result<Vec<SettlementEvent>, SettlementError> {
        self.guard(SettlementAction::Succeed)?;
        self.status = SettlementStatus::Succeeded;
        self.updated_at = now;
        Ok(vec![])
    }

    pub fn fail(
        &mut self,
        reason: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Result<Vec<SettlementEvent>, SettlementError> {
        self.guard(SettlementAction::Fail)?;
        let reason = reason.into();
        self.failure_reason = Some(reason.clone());
        self.status = SettlementStatus::Failed;
        self.updated_at = now;
        Ok(vec![SettlementEvent::Failed { reason }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SettlementStatus::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn in_status(status: SettlementStatus) -> Settlement {
        let amount = Money::new(5, "EUR".parse().unwrap()).unwrap();
        let mut s = Settlement::request(OrderId::new(), PaymentId::new(), amount, now());
        s.status = status;
        s
    }

    #[test]
    fn transition_table() {
        for (from, succeed, fail) in
            [(Requested, Some(Succeeded), Some(Failed)), (Succeeded, None, None), (Failed, None, None)]
        {
            let mut s = in_status(from);
            match succeed {
                Some(next) => {
                    s.succeed(now()).unwrap();
                    assert_eq!(s.status, next);
                }
                None => assert_eq!(
                    s.succeed(now()),
                    Err(SettlementError::InvalidTransition { from, action: SettlementAction::Succeed })
                ),
            }
            let mut s = in_status(from);
            match fail {
                Some(next) => {
                    let events = s.fail("bank closed", now()).unwrap();
                    assert_eq!(s.status, next);
                    assert_eq!(events[0].event_type(), "settlement.failed");
                }
                None => assert_eq!(
                    s.fail("x", now()),
                    Err(SettlementError::InvalidTransition { from, action: SettlementAction::Fail })
                ),
            }
        }
    }
}
