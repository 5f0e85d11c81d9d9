//! docs/spec.md §5's text rules ([`crate::domain::text`]) applied to whole JSON documents: every
//! string value and every object key of an HTTP body, an AMQP message or a provider's
//! answer is checked for control characters before anything is decoded into a command, so
//! no free-text field can slip past a per-field check that was forgotten. Lengths stay each
//! field's own rule (the domain and the use cases check them).

use std::time::Duration;

use serde_json::Value;

use crate::application::AppError;
use crate::domain::text::{self, TextError};

/// Why a JSON document was not taken.
#[derive(Debug)]
pub enum JsonError {
    /// Not JSON (serde_json's own words).
    Malformed(serde_json::Error),
    /// A key given twice in one object, by its path (`currency`, `items[0].quantity`).
    DuplicateKey(String),
}

/// One value being parsed at `path`, and the first key found twice so far.
struct Walk<'a> {
    path: String,
    found: &'a std::cell::RefCell<Option<String>>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Walk<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Walk<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() { key.clone() } else { format!("{}.{key}", self.path) };
            let value = map.next_value_seed(Walk { path: path.clone(), found: self.found })?;
            if object.contains_key(&key) {
                self.found.borrow_mut().get_or_insert(path);
            } else {
                object.insert(key, value);
            }
        }
        Ok(Value::Object(object))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq
            .next_element_seed(Walk { path: format!("{}[{}]", self.path, items.len()), found: self.found })?
        {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// Parses a JSON document, refusing one with a key given twice in an object: a parsed
/// `Value` would keep the last of two equal keys (`{"amount":15000,"amount":1}` charged 1),
/// so the one parse that builds the value also watches for them.
///
/// # Errors
/// [`JsonError::Malformed`] for text that is not JSON (trailing characters included);
/// [`JsonError::DuplicateKey`] naming the first key given twice.
pub fn parse_json(bytes: &[u8]) -> Result<Value, JsonError> {
    use serde::de::DeserializeSeed;
    let found = std::cell::RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value =
        Walk { path: String::new(), found: &found }.deserialize(&mut de).map_err(JsonError::Malformed)?;
    de.end().map_err(JsonError::Malformed)?;
    match found.into_inner() {
        Some(path) => Err(JsonError::DuplicateKey(path)),
        None => Ok(value),
    }
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
        let dup = |text: &[u8]| match parse_json(text) {
            Err(JsonError::DuplicateKey(path)) => Some(path),
            _ => None,
        };
        let fine = br#"{"a":1,"b":{"c":1.5},"d":[{"e":"x"},null,true]}"#;
        assert_eq!(parse_json(fine).unwrap(), serde_json::from_slice::<Value>(fine).unwrap());
        assert_eq!(dup(br#"{"a":1,"a":2}"#).as_deref(), Some("a"));
        assert_eq!(dup(br#"{"b":{"c":1,"c":1}}"#).as_deref(), Some("b.c"));
        assert_eq!(dup(br#"{"d":[{"e":1},{"e":1,"e":2}]}"#).as_deref(), Some("d[1].e"));
        assert_eq!(dup(br#"[{"x":"y","x":1}]"#).as_deref(), Some("[0].x"));
        assert!(matches!(parse_json(b"not json"), Err(JsonError::Malformed(_))));
        assert!(matches!(parse_json(b"{} trailing"), Err(JsonError::Malformed(_))));
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
