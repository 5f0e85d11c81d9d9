//! What a Toss error means for us: docs/spec.md §10's table as one pure function of (the call,
//! the HTTP status, Toss's `code`). docs/toss.md has the same table with each row's source;
//! the table test below pins every row.
//!
//! Where Toss's pages leave a code out, the stricter reading applies: a 4xx whose code is not
//! a known refusal is *not* taken as a decline (the customer may have been charged, or did
//! nothing wrong), it is an unknown outcome that a look-up settles.

/// The call that was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `POST /v1/payments/confirm` or `POST /v1/billing/{billingKey}`: money may move.
    Charge,
    /// `POST /v1/payments/{paymentKey}/cancel`.
    Cancel,
    /// A `GET` (look-ups, the ledger): nothing moves.
    Read,
    /// `POST /v1/billing/authorizations/issue`: a saved card made from the customer's
    /// `authKey`; nothing moves, and a 4xx is Toss refusing the card or the key.
    Issue,
}

/// What to do with an error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    /// The card or the customer's limits refused: a business outcome (DECLINED with the code).
    Refused,
    /// The checkout session ran out before the confirm (`NOT_FOUND_PAYMENT_SESSION`):
    /// DECLINED `PAYMENT_WINDOW_EXPIRED`.
    SessionExpired,
    /// Temporary at Toss: the same call with the same key after a backoff (bounded).
    Transient,
    /// `409 IDEMPOTENT_REQUEST_PROCESSING`: the first call with this key is still running;
    /// the same key again after a pause.
    InFlight,
    /// Money may or may not have moved: ask Toss (`GET /v1/payments/orders/{orderId}`)
    /// before deciding anything.
    Unknown,
    /// Our own configuration is wrong (key, auth header, a request Toss calls malformed):
    /// never the customer's failure; an operator must act.
    OurConfiguration,
    /// No such payment at Toss.
    NotFound,
    /// The cancel was refused (`NOT_CANCELABLE_*`): the refund is FAILED, recorded.
    NotCancelable,
    /// `ALREADY_CANCELED_PAYMENT`: look up and record what Toss has.
    AlreadyCancelled,
    /// `NOT_MATCHES_REFUNDABLE_AMOUNT`: the `refundableAmount` we sent is not Toss's balance —
    /// a cancel was made outside the service that we have not recorded yet. Nothing moved:
    /// look up, record Toss's cancels, and decide the refund against the new balance.
    StaleBalance,
}

/// Card and limit refusals (reference/error-codes: the confirm and billing tables).
fn is_refusal(code: &str) -> bool {
    const EXACT: &[&str] = &[
        "NOT_AVAILABLE_PAYMENT",
        "INVALID_STOPPED_CARD",
        "INVALID_REJECT_CARD",
        "BELOW_MINIMUM_AMOUNT",
        "NOT_ALLOWED_POINT_USE",
        "INVALID_PASSWORD",
        "FDS_ERROR",
        "NOT_SUPPORTED_INSTALLMENT_PLAN_CARD_OR_MERCHANT",
        "INVALID_UNREGISTERED_SUBMALL",
        "NOT_REGISTERED_BUSINESS",
        "INVALID_ACCOUNT_INFO_RE_REGISTER",
        "NOT_AVAILABLE_BANK",
        "PAY_PROCESS_CANCELED",
        "PAY_PROCESS_ABORTED",
    ];
    const PREFIXES: &[&str] = &["REJECT_", "INVALID_CARD", "EXCEED_", "RESTRICTED_"];
    EXACT.contains(&code) || PREFIXES.iter().any(|p| code.starts_with(p))
}

/// The meaning of an error answer to `call` (docs/spec.md §10, "Answers").
pub fn meaning(call: Call, status: u16, code: &str) -> Meaning {
    if call == Call::Issue {
        return issue_meaning(status, code);
    }
    match code {
        // A cancel's body refused (its reason, its amount): the refund fails, nothing moved.
        "INVALID_REQUEST" if call == Call::Cancel && status == 400 => return Meaning::NotCancelable,
        "UNAUTHORIZED_KEY"
        | "INVALID_API_KEY"
        | "INCORRECT_BASIC_AUTH_FORMAT"
        | "INVALID_REQUEST"
        | "INVALID_AUTHORIZE_AUTH"
        | "FORBIDDEN_REQUEST"
        | "NOT_MATCHES_CUSTOMER_KEY" => {
            return Meaning::OurConfiguration;
        }
        "IDEMPOTENT_REQUEST_PROCESSING" => return Meaning::InFlight,
        "NOT_FOUND_PAYMENT_SESSION" if call == Call::Charge => return Meaning::SessionExpired,
        "NOT_FOUND_PAYMENT" | "NOT_FOUND" => return Meaning::NotFound,
        "ALREADY_PROCESSED_PAYMENT" | "DUPLICATED_ORDER_ID" => return Meaning::Unknown,
        "ALREADY_CANCELED_PAYMENT" => return Meaning::AlreadyCancelled,
        "NOT_MATCHES_REFUNDABLE_AMOUNT" if call == Call::Cancel => return Meaning::StaleBalance,
        "NOT_CANCELABLE_AMOUNT" | "NOT_CANCELABLE_PAYMENT" | "NOT_CANCELABLE_PAYMENT_FOR_DORMANT_USER" => {
            return Meaning::NotCancelable;
        }
        // A cancel that failed inside Toss may still have been made: ask (§10, Refunds).
        "FAILED_REFUND_PROCESS" | "FAILED_PARTIAL_REFUND" | "FAILED_METHOD_HANDLING_CANCEL" => {
            return if call == Call::Cancel { Meaning::Unknown } else { Meaning::Transient };
        }
        _ => {}
    }
    let temporary = code == "PROVIDER_ERROR"
        || code == "UNKNOWN_PAYMENT_ERROR"
        || code == "COMMON_ERROR"
        || (code.starts_with("FAILED_") && code.ends_with("_PROCESSING"))
        || status >= 500;
    if temporary {
        // A 5xx to a cancel may hide a cancel made: the refund skeleton's look-up settles it;
        // to a charge, the same key again is safe (Toss answers the first charge's result).
        return if call == Call::Cancel && status >= 500 { Meaning::Unknown } else { Meaning::Transient };
    }
    if call == Call::Charge && is_refusal(code) {
        return Meaning::Refused;
    }
    if status == 401 {
        return Meaning::OurConfiguration;
    }
    if status == 404 {
        return Meaning::NotFound;
    }
    match call {
        Call::Read => Meaning::Transient,
        // A 400 is Toss refusing the request as it stands (a reason it will not take, an
        // amount it will not cancel): nothing moved, and the same request again would be
        // refused again — a failed refund, never a pending one.
        Call::Cancel if status == 400 => Meaning::NotCancelable,
        Call::Charge | Call::Cancel | Call::Issue => Meaning::Unknown,
    }
}

/// The billing-key issue: our key refused is ours to repair; an in-flight key, a 429 or a
/// temporary failure is tried again; a 404 is an `authKey` Toss does not know (spent,
/// never issued); every other 4xx refuses the customer's card or `authKey` (nothing was
/// issued, nothing moved), and anything else stays open.
fn issue_meaning(status: u16, code: &str) -> Meaning {
    match (status, code) {
        (_, "UNAUTHORIZED_KEY" | "INVALID_API_KEY" | "INCORRECT_BASIC_AUTH_FORMAT") | (401, _) => {
            Meaning::OurConfiguration
        }
        (409, "IDEMPOTENT_REQUEST_PROCESSING") => Meaning::InFlight,
        (409 | 429, _) | (_, "PROVIDER_ERROR" | "COMMON_ERROR" | "UNKNOWN_PAYMENT_ERROR") => {
            Meaning::Transient
        }
        // A spent or unknown authKey: nothing to issue a card from.
        (404, _) => Meaning::NotFound,
        (400..=499, _) => Meaning::Refused,
        _ => Meaning::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_of_docs_spec_section_10() {
        use Call::*;
        use Meaning::*;
        #[rustfmt::skip]
        let rows: &[(Call, u16, &str, Meaning)] = &[
            // Card and limit refusals: DECLINED with Toss's code.
            (Charge, 403, "REJECT_CARD_PAYMENT", Refused),
            (Charge, 403, "REJECT_CARD_COMPANY", Refused),
            (Charge, 400, "INVALID_CARD_EXPIRATION", Refused),
            (Charge, 400, "INVALID_CARD_NUMBER", Refused),
            (Charge, 400, "INVALID_STOPPED_CARD", Refused),
            (Charge, 400, "EXCEED_MAX_DAILY_PAYMENT_COUNT", Refused),
            (Charge, 403, "EXCEED_MAX_ONE_DAY_AMOUNT", Refused),
            (Charge, 400, "NOT_AVAILABLE_PAYMENT", Refused),
            (Charge, 400, "BELOW_MINIMUM_AMOUNT", Refused),
            // The checkout waited too long.
            (Charge, 404, "NOT_FOUND_PAYMENT_SESSION", SessionExpired),
            // Temporary: the same key again.
            (Charge, 400, "PROVIDER_ERROR", Transient),
            (Charge, 500, "FAILED_PAYMENT_INTERNAL_SYSTEM_PROCESSING", Transient),
            (Charge, 500, "FAILED_INTERNAL_SYSTEM_PROCESSING", Transient),
            (Charge, 500, "UNKNOWN_PAYMENT_ERROR", Transient),
            (Charge, 502, "", Transient),
            (Read, 500, "FAILED_INTERNAL_SYSTEM_PROCESSING", Transient),
            (Read, 429, "TOO_MANY_REQUESTS", Transient),
            (Charge, 409, "IDEMPOTENT_REQUEST_PROCESSING", InFlight),
            (Cancel, 409, "IDEMPOTENT_REQUEST_PROCESSING", InFlight),
            // Unknown: look up.
            (Charge, 400, "ALREADY_PROCESSED_PAYMENT", Unknown),
            (Charge, 400, "DUPLICATED_ORDER_ID", Unknown),
            (Charge, 400, "SOMETHING_TOSS_ADDS_LATER", Unknown),
            (Cancel, 500, "FAILED_REFUND_PROCESS", Unknown),
            (Cancel, 500, "FAILED_INTERNAL_SYSTEM_PROCESSING", Unknown),
            (Cancel, 503, "", Unknown),
            // Our configuration: never the customer's failure.
            (Charge, 401, "UNAUTHORIZED_KEY", OurConfiguration),
            (Charge, 400, "INVALID_API_KEY", OurConfiguration),
            (Cancel, 400, "INCORRECT_BASIC_AUTH_FORMAT", OurConfiguration),
            (Read, 401, "UNAUTHORIZED_KEY", OurConfiguration),
            (Charge, 400, "INVALID_REQUEST", OurConfiguration),
            (Charge, 400, "NOT_MATCHES_CUSTOMER_KEY", OurConfiguration),
            (Charge, 401, "", OurConfiguration),
            // Look-ups and cancels.
            (Read, 404, "NOT_FOUND_PAYMENT", NotFound),
            (Cancel, 404, "NOT_FOUND_PAYMENT", NotFound),
            (Read, 404, "NOT_FOUND_PAYMENT_SESSION", NotFound),
            (Cancel, 400, "ALREADY_CANCELED_PAYMENT", AlreadyCancelled),
            (Cancel, 403, "NOT_CANCELABLE_AMOUNT", NotCancelable),
            (Cancel, 403, "NOT_CANCELABLE_PAYMENT", NotCancelable),
            (Cancel, 400, "NOT_MATCHES_REFUNDABLE_AMOUNT", StaleBalance),
            (Cancel, 400, "INVALID_REQUEST_CANCEL_REASON", NotCancelable),
            (Cancel, 400, "SOMETHING_TOSS_ADDS_LATER", NotCancelable),
            (Cancel, 400, "INVALID_REQUEST", NotCancelable),
            // A refusal code on a cancel is no card refusal: unknown.
            (Cancel, 403, "REJECT_CARD_PAYMENT", Unknown),
            // The billing-key issue: a 4xx refuses the card or the authKey.
            (Issue, 400, "INVALID_CARD_NUMBER", Refused),
            (Issue, 400, "INVALID_REQUEST", Refused),
            (Issue, 403, "NOT_MATCHES_CUSTOMER_KEY", Refused),
            (Issue, 404, "NOT_FOUND", NotFound),
            (Issue, 401, "UNAUTHORIZED_KEY", OurConfiguration),
            (Issue, 400, "INVALID_API_KEY", OurConfiguration),
            (Issue, 409, "IDEMPOTENT_REQUEST_PROCESSING", InFlight),
            (Issue, 429, "TOO_MANY_REQUESTS", Transient),
            (Issue, 400, "PROVIDER_ERROR", Transient),
            (Issue, 500, "FAILED_INTERNAL_SYSTEM_PROCESSING", Transient),
            (Issue, 503, "", Transient),
        ];
        for (call, status, code, expected) in rows {
            assert_eq!(meaning(*call, *status, code), *expected, "{call:?} {status} {code}");
        }
    }
}
