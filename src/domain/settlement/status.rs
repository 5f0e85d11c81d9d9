//! Settlement statuses and actions.

spelled!(
    /// Where a settlement stands (docs/spec.md §3, §13). `REQUESTED`: its intent is
    /// committed, an attempt due or in flight; `RETRY_SCHEDULED`: the settlement service
    /// could not be reached or asked us to wait, tried again at `next_attempt_at` under the
    /// same id; `AWAITING_OPERATOR`: its attempts ran out without an answer, an operator
    /// retries it or marks it settled (never compensated for being unreachable);
    /// `FAILED`: refused, the payment is compensated.
    SettlementStatus {
        Requested => "REQUESTED",
        RetryScheduled => "RETRY_SCHEDULED",
        AwaitingOperator => "AWAITING_OPERATOR",
        Succeeded => "SUCCEEDED",
        Failed => "FAILED",
    }
);

spelled!(
    /// The actions a settlement accepts.
    SettlementAction {
        Succeed => "SUCCEED",
        Fail => "FAIL",
        Defer => "DEFER",
        ClaimRetry => "CLAIM_RETRY",
        OperatorRetry => "OPERATOR_RETRY",
        MarkSettled => "MARK_SETTLED",
    }
);
