//! Settlement statuses and actions.

spelled!(
    /// Where a settlement stands (docs/spec.md §3).
    SettlementStatus {
        Requested => "REQUESTED",
        Succeeded => "SUCCEEDED",
        Failed => "FAILED",
    }
);

spelled!(
    /// The actions a settlement accepts.
    SettlementAction {
        Succeed => "SUCCEED",
        Fail => "FAIL",
    }
);
