//! The platforms' Jackson, in one place (docs/dialects.md): how it reads a JSON value into a
//! Java field (`Long`, `String`, `BigDecimal`), for the dialects' requests and the momo
//! contract's messages, and how it writes a `LocalDateTime`.

use chrono::NaiveDateTime;
use serde_json::Value;

/// A value Jackson would refuse for its field (the caller names the field and the answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreadable;

/// A `Long` as Jackson reads one: a JSON integer, or its decimal text (blanks trimmed);
/// `Ok(None)` for `null` or absent.
///
/// # Errors
/// Anything else (a fraction, an object, text that is not an integer, out of range).
pub fn long(value: Option<&Value>) -> Result<Option<i64>, Unreadable> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or(Unreadable),
        Some(Value::String(s)) => s.trim().parse().map(Some).map_err(|_| Unreadable),
        Some(_) => Err(Unreadable),
    }
}

/// A `String` as Jackson reads one: text, or a number or boolean coerced to its text;
/// `Ok(None)` for `null` or absent.
///
/// # Errors
/// An object or an array.
pub fn string(value: Option<&Value>) -> Result<Option<String>, Unreadable> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
        Some(_) => Err(Unreadable),
    }
}

/// A `BigDecimal` as Jackson reads one, as plain decimal text: a JSON number or its text
/// (`12000`, `12.50`, `"12000"`, `1.2e4` → `12000`); `Ok(None)` for `null` or absent.
///
/// # Errors
/// An object, an array, a boolean, or an exponent that is not a finite number.
pub fn decimal(value: Option<&Value>) -> Result<Option<String>, Unreadable> {
    let text = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(_) => return Err(Unreadable),
    };
    if text.contains(['e', 'E']) {
        let f: f64 = text.parse().map_err(|_| Unreadable)?;
        if !f.is_finite() {
            return Err(Unreadable);
        }
        return Ok(Some(format!("{f}")));
    }
    Ok(Some(text))
}

/// A `LocalDateTime` as Jackson's `JavaTimeModule` writes it (ISO-8601 without an offset,
/// seconds always, the fraction only as long as it needs to be): `2026-05-01T10:00:00`,
/// `2026-05-01T10:00:00.25`.
pub fn local_date_time(at: NaiveDateTime) -> String {
    let mut text = at.format("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = at.and_utc().timestamp_subsec_nanos();
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        text.push('.');
        text.push_str(fraction.trim_end_matches('0'));
    }
    text
}
