//! docs/spec.md §5's text rules ([`crate::domain::text`]) applied to whole JSON documents: every
//! string value and every object key of an HTTP body, an AMQP message or a provider's
//! answer is checked for control characters before anything is decoded into a command, so
//! no free-text field can slip past a per-field check that was forgotten. Lengths stay each
//! field's own rule (the domain and the use cases check them).

use std::time::Duration;

use serde_json::Value;

use crate::application::AppError;
use crate::domain::text::{self, TextError};

/// The first key of a JSON document given twice in one object, by its path (`currency`,
/// `items[0].quantity`), or `None` (also for text that is not JSON: its parse names that).
/// A parsed `Value` keeps the last of two equal keys, so the raw text is read for this:
/// `{"amount":15000,"amount":1}` must be refused, never charged 1.
pub fn duplicate_key(bytes: &[u8]) -> Option<String> {
    use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use std::cell::RefCell;

    struct Walk<'a> {
        path: String,
        found: &'a RefCell<Option<String>>,
    }

    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                let path = if self.path.is_empty() { key.clone() } else { format!("{}.{key}", self.path) };
                if !seen.insert(key) && self.found.borrow().is_none() {
                    *self.found.borrow_mut() = Some(path.clone());
                }
                map.next_value_seed(Walk { path, found: self.found })?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while seq
                .next_element_seed(Walk { path: format!("{}[{i}]", self.path), found: self.found })?
                .is_some()
            {
                i += 1;
            }
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_none<E>(self) -> Result<(), E> {
            Ok(())
        }
    }

    let found = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let walked = Walk { path: String::new(), found: &found }.deserialize(&mut de);
    walked.ok().and_then(|()| found.into_inner())
}

/// The first string in `value` with a refused control character, named by its path
/// (`reason`, `items[0].sku`; `body` for a bare string).
///
/// # Errors
/// [`TextError::ControlCharacter`] naming the path.
pub fn check_json_text(value: &Value) -> Result<(), TextError> {
    fn walk(value: &Value, path: &mut String) -> Result<(), TextError> {
        match value {
            Value::String(s) => text::check_clean(if path.is_empty() { "body" } else { path }, s),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    walk(item, path)?;
                    path.truncate(len);
                }
                Ok(())
            }
            Value::Object(map) => {
                for (key, item) in map {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                    text::check_clean(path, key)?;
                    walk(item, path)?;
                    path.truncate(len);
                }
                Ok(())
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
        }
    }
    walk(value, &mut String::new())
}

impl From<TextError> for AppError {
    fn from(err: TextError) -> Self {
        AppError::Validation { field: err.field().to_owned(), message: err.message() }
    }
}

/// Checks an optional free-text field (an operator's reason, a filter) against both rules.
///
/// # Errors
/// `Validation` naming `field`.
pub fn check_optional(field: &str, value: Option<&str>, max: usize) -> Result<(), AppError> {
    match value {
        Some(v) => Ok(text::check(field, v, max)?),
        None => Ok(()),
    }
}

/// Parses a duration as operators write it: `250ms`, `10s`, `5m`, `1h`, `30d` (settings and
/// query parameters alike).
///
/// # Errors
/// A message saying what a duration looks like.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 =
        digits.parse().map_err(|_| format!("`{text}` is not a duration like 250ms, 10s, 5m, 1h or 30d"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => None,
    }
    .ok_or_else(|| format!("`{text}` is not a duration like 250ms, 10s, 5m, 1h or 30d"))?;
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_key_given_twice_is_found_by_its_path() {
        assert_eq!(duplicate_key(br#"{"a":1,"b":{"c":1},"d":[{"e":1}]}"#), None);
        assert_eq!(duplicate_key(br#"{"a":1,"a":2}"#).as_deref(), Some("a"));
        assert_eq!(duplicate_key(br#"{"b":{"c":1,"c":1}}"#).as_deref(), Some("b.c"));
        assert_eq!(duplicate_key(br#"{"d":[{"e":1},{"e":1,"e":2}]}"#).as_deref(), Some("d[1].e"));
        assert_eq!(duplicate_key(br#"[{"x":"y","x":1}]"#).as_deref(), Some("[0].x"));
        assert_eq!(duplicate_key(b"not json"), None);
    }

    #[test]
    fn names_the_path_of_the_first_dirty_string() {
        let ok = json!({"currency": "KRW", "items": [{"sku": "A", "quantity": 1}], "note": null});
        assert_eq!(check_json_text(&ok), Ok(()));
        let sku = json!({"currency": "KRW", "items": [{"sku": "A"}, {"sku": "B\u{0}"}]});
        assert_eq!(check_json_text(&sku).unwrap_err().field(), "items[1].sku");
        let reason = json!({"reason": "bad\u{0}reason"});
        assert_eq!(check_json_text(&reason).unwrap_err().field(), "reason");
        assert_eq!(check_json_text(&json!("a\u{7f}")).unwrap_err().field(), "body");
        let key = json!({"we\u{1}ird": 1});
        assert!(matches!(check_json_text(&key), Err(TextError::ControlCharacter { .. })));
    }
}
