//! The input rules for text (docs/spec.md §5), in one place for every source: HTTP bodies, query
//! parameters, headers used as data, AMQP messages, token claims and provider answers.
//!
//! Text may not carry control characters (U+0000–U+001F, U+007F) and may not exceed its
//! documented length (in characters). A breach is refused before anything is stored, the
//! same way on SQLite (which would store it) and PostgreSQL (which refuses NUL bytes and
//! over-long `varchar`s with an error that used to surface as `503`).

/// Documented lengths, in characters.
pub mod limits {
    /// Customer, meeting and user ids, a token's `sub`.
    pub const ID: usize = 64;
    pub const SKU: usize = 64;
    /// An operator's or customer's free-text reason.
    pub const REASON: usize = 1000;
    /// A refund's reason: it is sent to the provider, and Toss takes a `cancelReason` of at
    /// most 200 characters (reference: cancel).
    pub const REFUND_REASON: usize = 200;
    /// An outbox event type in a filter (`order.completed`).
    pub const EVENT_TYPE: usize = 128;
    /// The provider's transaction id (the `providerTransactionId` column): Toss's
    /// `paymentKey` is documented as up to 200 characters.
    pub const PROVIDER_TRANSACTION_ID: usize = 200;
    /// A provider's decline or error code.
    pub const PROVIDER_CODE: usize = 64;
    /// A provider's message, kept in a step's detail.
    pub const PROVIDER_MESSAGE: usize = 500;
    /// An inbound message's `eventId`.
    pub const EVENT_ID: usize = 128;
    /// `Idempotency-Key`.
    pub const IDEMPOTENCY_KEY: usize = 255;
    /// `X-Correlation-Id`.
    pub const CORRELATION_ID: usize = 128;
}

/// Whether `value` is a payment provider's key as one can be trusted in a URL path or a
/// request: non-empty, at most `max` bytes, only `[A-Za-z0-9_=.-]` (the characters Toss's
/// `paymentKey`, `orderId`, `authKey` and `billingKey` use).
pub fn is_provider_key(value: &str, max: usize) -> bool {
    !value.is_empty()
        && value.len() <= max
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=.".contains(&b))
}

/// Whether `c` is one of the control characters docs/spec.md §5 refuses.
pub fn is_refused_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}')
}

/// `value` made to fit a field of `max` characters, for text we keep but do not own (a
/// provider's error, a correlation id from another system): control characters become
/// `?`, and it is cut after `max` characters.
pub fn excerpt(value: &str, max: usize) -> String {
    value.chars().map(|c| if is_refused_control(c) { '?' } else { c }).take(max).collect()
}

/// Why a text was refused; `field` names it as the client sent it (a JSON path, a header,
/// a claim).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("{field}: must not contain control characters")]
    ControlCharacter { field: String },
    #[error("{field}: must be at most {max} characters")]
    TooLong { field: String, max: usize },
}

impl TextError {
    /// The field the error is about.
    pub fn field(&self) -> &str {
        match self {
            TextError::ControlCharacter { field } | TextError::TooLong { field, .. } => field,
        }
    }

    /// The message without the field name.
    pub fn message(&self) -> String {
        match self {
            TextError::ControlCharacter { .. } => "must not contain control characters".into(),
            TextError::TooLong { max, .. } => format!("must be at most {max} characters"),
        }
    }
}

/// Checks the control characters only (the length is the field's own business).
///
/// # Errors
/// [`TextError::ControlCharacter`] naming `field`.
pub fn check_clean(field: &str, value: &str) -> Result<(), TextError> {
    if value.chars().any(is_refused_control) {
        return Err(TextError::ControlCharacter { field: field.to_owned() });
    }
    Ok(())
}

/// Checks `value` against both rules.
///
/// # Errors
/// [`TextError`] naming `field`: a control character, or more than `max` characters.
pub fn check(field: &str, value: &str, max: usize) -> Result<(), TextError> {
    check_clean(field, value)?;
    if value.chars().count() > max {
        return Err(TextError::TooLong { field: field.to_owned(), max });
    }
    Ok(())
}

/// Whether `value` is an e-mail address we send to (docs/spec.md §13, `customerEmail`): at
/// most 254 characters, one `@` between a non-empty local part (at most 64) and a domain of
/// dot-separated labels of letters, digits and `-`; no spaces, quotes, brackets or control
/// characters — what an SMTP server takes in `RCPT TO` without quoting, and nothing that
/// could end a header line.
pub fn is_email(value: &str) -> bool {
    let Some((local, domain)) = value.split_once('@') else { return false };
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..")
        && local.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~.".contains(&b));
    let labels: Vec<&str> = domain.split('.').collect();
    let domain_ok = labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    value.len() <= 254 && local_ok && domain_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_email_address_is_what_smtp_takes_unquoted() {
        for ok in ["alice@example.com", "a.b+tag@mail.example.co.kr", "x@a-b.io"] {
            assert!(is_email(ok), "{ok}");
        }
        for bad in [
            "",
            "alice",
            "@example.com",
            "alice@",
            "alice@localhost",
            "a b@example.com",
            "a@@example.com",
            "alice@example..com",
            ".alice@example.com",
            "alice@-example.com",
            "\"a\"@example.com",
            "alice@example.com\r\nBcc: x@y.z",
            "<alice@example.com>",
            "앨리스@example.com",
        ] {
            assert!(!is_email(bad), "{bad:?}");
        }
        assert!(!is_email(&format!("{}@example.com", "a".repeat(65))));
    }

    #[test]
    fn an_excerpt_fits_and_is_clean() {
        assert_eq!(excerpt("a\u{0}b\nc", 10), "a?b?c");
        assert_eq!(excerpt("가나다라", 2), "가나");
        assert!(check("x", &excerpt(&"é\u{7f}".repeat(300), 128), 128).is_ok());
    }

    #[test]
    fn control_characters_are_refused_everywhere_in_the_text() {
        for bad in ["a\u{0}b", "\u{1f}", "x\u{7f}", "line\nbreak", "tab\there", "\r"] {
            assert_eq!(
                check("reason", bad, 100),
                Err(TextError::ControlCharacter { field: "reason".into() }),
                "{bad:?}"
            );
        }
        // U+0080..U+009F are not in docs/spec.md §5's set, and ordinary Unicode is fine.
        for good in ["", "plain", "\u{85}", "한국어 사유", "emoji 🎟"] {
            assert_eq!(check("reason", good, 100), Ok(()), "{good:?}");
        }
    }

    #[test]
    fn length_counts_characters_not_bytes() {
        assert_eq!(check("sku", &"가".repeat(64), limits::SKU), Ok(()));
        assert_eq!(
            check("sku", &"a".repeat(65), limits::SKU),
            Err(TextError::TooLong { field: "sku".into(), max: 64 })
        );
    }
}
