//! Order statuses, failure stages, sources and the actions that move between statuses.
//!
//! `as_str`/`parse` here are the one place where these enums meet their wire and database
//! spelling; adapters call them instead of writing strings of their own.

spelled!(
    /// Where an order stands (docs/spec.md §3).
    OrderStatus {
        Created => "CREATED",
        PaymentApproved => "PAYMENT_APPROVED",
        SettlementRequested => "SETTLEMENT_REQUESTED",
        Completed => "COMPLETED",
        Failed => "FAILED",
        Cancelled => "CANCELLED",
        PendingConfirmation => "PENDING_CONFIRMATION",
        AwaitingPayment => "AWAITING_PAYMENT",
    }
);

spelled!(
    /// The saga stage at which an order failed.
    FailureStage {
        Payment => "PAYMENT",
        Settlement => "SETTLEMENT",
        Notification => "NOTIFICATION",
    }
);

spelled!(
    /// Why an order failed (`failureReason`): a stable code. The provider's own words go
    /// into the step's detail and the audit row.
    FailureReason {
        PaymentDeclined => "PAYMENT_DECLINED",
        ProviderUnavailable => "PROVIDER_UNAVAILABLE",
        SettlementFailed => "SETTLEMENT_FAILED",
        NotificationFailed => "NOTIFICATION_FAILED",
        PaymentWindowExpired => "PAYMENT_WINDOW_EXPIRED",
        HoldExpired => "HOLD_EXPIRED",
    }
);

spelled!(
    /// How the order reached us. `COMMERCE`: made through the commerce dialect
    /// (docs/dialects.md), held in `CREATED` until its client asks for the saga. `MOMO`: a
    /// member's meeting fee keyed in through the momo dialect (`POST /payments/test/keyin`),
    /// charged by the order's first run; a meeting order like `MEETING` otherwise.
    OrderSource {
        Api => "API",
        Meeting => "MEETING",
        Commerce => "COMMERCE",
        Momo => "MOMO",
    }
);

spelled!(
    /// How an order starts, as the door it came through asks (a fact of the command, set by
    /// the adapter; docs/architecture.md): `NOW` — its saga runs at once; `HELD` — kept in
    /// `CREATED`, no saga, until its client asks for it (the commerce dialect); `AWAIT_CHECKOUT`
    /// — `AWAITING_PAYMENT` until the customer authorizes the charge in the provider's widget.
    OrderStart {
        Now => "NOW",
        Held => "HELD",
        AwaitCheckout => "AWAIT_CHECKOUT",
    }
);

spelled!(
    /// The actions an order accepts; an illegal one names itself in the error.
    OrderAction {
        AwaitPayment => "AWAIT_PAYMENT",
        ApprovePayment => "APPROVE_PAYMENT",
        AwaitConfirmation => "AWAIT_CONFIRMATION",
        RequestSettlement => "REQUEST_SETTLEMENT",
        Complete => "COMPLETE",
        FailPayment => "FAIL_PAYMENT",
        FailSettlement => "FAIL_SETTLEMENT",
        FailNotification => "FAIL_NOTIFICATION",
        Compensate => "COMPENSATE",
        Refund => "REFUND",
    }
);

impl OrderSource {
    /// A member's payment for a meeting: one per (meeting, member) while live, answered to
    /// the meeting service under the momo contract (docs/spec.md §7, §12).
    pub fn is_meeting(&self) -> bool {
        matches!(self, OrderSource::Meeting | OrderSource::Momo)
    }

    /// A registration the meeting service sent: paid with the member's saved card
    /// (docs/spec.md §10); a key-in (`MOMO`) brings its own card.
    pub fn pays_with_saved_card(&self) -> bool {
        matches!(self, OrderSource::Meeting)
    }
}

impl OrderStart {
    /// The start asked for, where the provider asks for the customer's checkout
    /// (`checkout`) or not: only then is `AWAIT_CHECKOUT` waited for; else the order runs now.
    pub fn given(self, checkout: bool) -> OrderStart {
        match self {
            OrderStart::AwaitCheckout if !checkout => OrderStart::Now,
            start => start,
        }
    }
}

impl OrderStatus {
    /// No saga step will move the order on by itself (only an operator or a refund can).
    pub fn is_terminal(&self) -> bool {
        matches!(self, OrderStatus::Completed | OrderStatus::Cancelled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_each_source_means_to_the_core() {
        // (source, a meeting's registration, paid with the member's saved card)
        let table = [
            (OrderSource::Api, false, false),
            (OrderSource::Meeting, true, true),
            (OrderSource::Commerce, false, false),
            (OrderSource::Momo, true, false),
        ];
        assert_eq!(table.len(), OrderSource::ALL.len(), "every source is in the table");
        for (source, meeting, saved_card) in table {
            assert_eq!(source.is_meeting(), meeting, "{source}");
            assert_eq!(source.pays_with_saved_card(), saved_card, "{source}");
        }
    }
}
