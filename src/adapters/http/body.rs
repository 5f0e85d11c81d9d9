//! JSON request bodies: at most 64 KiB (`413` beyond), `application/json` only (`415`),
//! and every decoding error names the field it is about (`400` for broken JSON, `422` for
//! a missing, unknown or mistyped field).

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest};
use futures_util::StreamExt;
use futures_util::future::LocalBoxFuture;
use serde::de::DeserializeOwned;

use super::problem::ApiError;
use crate::application::input::{JsonError, check_json_text, parse_json};

pub const MAX_BODY: usize = 64 * 1024;

/// docs/spec.md §5: a body must arrive within this long, else `408`. A client that trickles its
/// body cannot hold a worker and a connection for longer.
pub const BODY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Over [`MAX_BODY`].
    TooLarge,
    /// Not all there within [`BODY_DEADLINE`].
    TimedOut,
    /// The connection broke while it came.
    Broken(String),
}

/// Reads the whole payload, at most [`MAX_BODY`] bytes, within [`BODY_DEADLINE`]: the one
/// reader of every listener (the native API's extractors, and each dialect's middleware,
/// which answers in its own envelope).
///
/// # Errors
/// [`BodyError`].
pub async fn read_within(mut payload: Payload) -> Result<Vec<u8>, BodyError> {
    let read = async {
        let mut body = Vec::new();
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|e| BodyError::Broken(e.to_string()))?;
            if body.len() + chunk.len() > MAX_BODY {
                return Err(BodyError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    tokio::time::timeout(BODY_DEADLINE, read).await.unwrap_or(Err(BodyError::TimedOut))
}

/// Reads `req`'s whole body ahead of its handler (a dialect's middleware), so that whatever
/// extractor the handler uses gets it at once; within [`BODY_DEADLINE`] and [`MAX_BODY`].
///
/// # Errors
/// [`BodyError`]: the caller answers it in its envelope.
pub async fn buffer(req: &mut actix_web::dev::ServiceRequest) -> Result<(), BodyError> {
    use actix_web::HttpMessage;
    let body = read_within(req.take_payload()).await?;
    req.set_payload(Payload::from(body));
    Ok(())
}

/// Reads the whole payload, at most [`MAX_BODY`] bytes, within [`BODY_DEADLINE`].
async fn read_body(payload: Payload) -> Result<Vec<u8>, ApiError> {
    read_within(payload).await.map_err(|e| match e {
        BodyError::Broken(why) => {
            ApiError::new(StatusCode::BAD_REQUEST, "MALFORMED_BODY", format!("cannot read body: {why}"))
        }
        BodyError::TooLarge => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
            format!("request body exceeds {MAX_BODY} bytes"),
        ),
        BodyError::TimedOut => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "REQUEST_TIMEOUT",
            format!("the request body did not arrive within {} s", BODY_DEADLINE.as_secs()),
        ),
    })
}

/// A decoded JSON body together with its canonical form (keys sorted, no whitespace),
/// which idempotency fingerprints are taken over.
pub struct JsonBody<T> {
    pub value: T,
    pub canonical: String,
}

impl<T> JsonBody<T> {
    /// `422` naming `body` unless the body was a JSON object: a struct whose fields are all
    /// optional would otherwise read `[null, null]` (serde takes a struct from a sequence).
    ///
    /// # Errors
    /// `422 VALIDATION_FAILED` with `field = body`.
    pub fn require_object(&self) -> Result<(), ApiError> {
        if self.canonical.starts_with('{') {
            Ok(())
        } else {
            Err(ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "body", "must be a JSON object"))
        }
    }
}

fn canonical(value: &serde_json::Value) -> String {
    fn write(value: &serde_json::Value, out: &mut String) {
        match value {
            serde_json::Value::Object(map) => {
                let mut keys: Vec<_> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&map[k], out);
                }
                out.push('}');
            }
            serde_json::Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(v, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Decodes `bytes` into `T`, naming the field of any error.
///
/// # Errors
/// `400 MALFORMED_JSON` for text that is not JSON; `422 VALIDATION_FAILED` with `field`
/// for JSON of the wrong shape.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<JsonBody<T>, ApiError> {
    let raw = parse_json(bytes).map_err(|e| match e {
        JsonError::Malformed(e) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "MALFORMED_JSON",
            format!("request body is not valid JSON: {e}"),
        ),
        // A key given twice is refused, never last-one-wins (issue 27).
        JsonError::DuplicateKey(field) => {
            ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, "is given more than once")
        }
    })?;
    // docs/spec.md §5: no string anywhere in a body may carry a control character.
    check_json_text(&raw)
        .map_err(|e| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, e.field(), e.message()))?;
    let canonical = canonical(&raw);
    let value = serde_path_to_error::deserialize::<_, T>(raw).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        // serde reports a missing field at its parent: name the field itself.
        let field = match message.strip_prefix("missing field `").and_then(|m| m.split('`').next()) {
            Some(missing) if path == "." => missing.to_owned(),
            Some(missing) => format!("{path}.{missing}"),
            None if path == "." => "body".to_owned(),
            None => path,
        };
        ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, message)
    })?;
    Ok(JsonBody { value, canonical })
}

impl<T: DeserializeOwned + 'static> FromRequest for JsonBody<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let content_type = req
            .headers()
            .get(actix_web::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
        let declared_length = req
            .headers()
            .get(actix_web::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let payload = payload.take();
        Box::pin(async move {
            let too_large = || {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "PAYLOAD_TOO_LARGE",
                    format!("request body exceeds {MAX_BODY} bytes"),
                )
            };
            if declared_length.is_some_and(|n| n > MAX_BODY) {
                return Err(too_large());
            }
            match content_type.as_deref() {
                Some("application/json") => {}
                Some(t) if t.starts_with("application/") && t.ends_with("+json") => {}
                _ => {
                    return Err(ApiError::new(
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        "UNSUPPORTED_MEDIA_TYPE",
                        "expected Content-Type: application/json",
                    ));
                }
            }
            decode(&read_body(payload).await?)
        })
    }
}

/// An optional JSON body: absent (no body, no `Content-Type`) or `null` is `None`;
/// present, it must decode like [`JsonBody`].
pub struct MaybeJson<T>(pub Option<T>);

impl<T: DeserializeOwned + 'static> FromRequest for MaybeJson<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let headers = req.headers();
        let empty = headers.get(actix_web::http::header::CONTENT_TYPE).is_none()
            && headers
                .get(actix_web::http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .is_none_or(|v| v.trim() == "0");
        if empty {
            return Box::pin(async { Ok(MaybeJson(None)) });
        }
        // `Option<T>` decodes a `null` body as `None` (docs/spec.md §5: null equals no body).
        let body = JsonBody::<Option<T>>::from_request(req, payload);
        Box::pin(async move { body.await.map(|b| MaybeJson(b.value)) })
    }
}

/// The raw request body (at most 64 KiB), for handlers that must see the exact bytes
/// (signature checks).
pub struct RawBody(pub Vec<u8>);

impl FromRequest for RawBody {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(_req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let payload = payload.take();
        Box::pin(async move { read_body(payload).await.map(RawBody) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        sku: String,
        unit_price: i64,
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        currency: String,
        items: Vec<Item>,
    }

    fn field_of(json: &str) -> (u16, Option<String>) {
        match decode::<Body>(json.as_bytes()) {
            Ok(_) => (200, None),
            Err(e) => (e.status.as_u16(), e.field),
        }
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(field_of("{"), (400, None));
        assert_eq!(field_of(r#"{"items":[]}"#), (422, Some("currency".into())));
        assert_eq!(field_of(r#"{"currency":1,"items":[]}"#), (422, Some("currency".into())));
        assert_eq!(
            field_of(r#"{"currency":"KRW","items":[{"sku":"a","unitPrice":"x"}]}"#),
            (422, Some("items[0].unitPrice".into()))
        );
        assert_eq!(
            field_of(r#"{"currency":"KRW","items":[{"sku":"a","unitPrice":99999999999999999999}]}"#),
            (422, Some("items[0].unitPrice".into()))
        );
        assert_eq!(
            field_of(r#"{"currency":"KRW","items":[{"sku":"a"}]}"#),
            (422, Some("items[0].unitPrice".into()))
        );
        assert_eq!(field_of(r#"{"currency":"KRW","items":[],"extra":1}"#).0, 422);
        assert_eq!(field_of("[]"), (422, Some("body".into())));
        assert_eq!(
            field_of(r#"{"currency":"KRW","items":[{"sku":"a\u0000","unitPrice":1}]}"#),
            (422, Some("items[0].sku".into()))
        );
    }

    #[test]
    fn canonical_form_ignores_key_order_and_whitespace() {
        let a = decode::<serde_json::Value>(br#"{"b": 1, "a": [ {"y":2,"x":1} ]}"#).unwrap();
        let b = decode::<serde_json::Value>(br#"{"a":[{"x":1,"y":2}],"b":1}"#).unwrap();
        assert_eq!(a.canonical, b.canonical);
    }
}
