//! One HTTP exchange with a payment provider, as both HTTP providers (external, Toss) see
//! it: answered, never sent (nothing can have happened there), or lost after sending (the
//! provider may have acted). Every call carries `Authorization: Basic base64("{key}:")`.

use reqwest::StatusCode;

use crate::adapters::Secret;

/// What one HTTP exchange amounted to.
pub(super) enum Exchange {
    Answered(StatusCode, Vec<u8>),
    /// Never reached the provider: nothing happened there.
    NotSent(String),
    /// Sent, but no complete answer (timeout, reset): the provider may have acted.
    Lost(String),
}

/// Sends `request` with the key as Basic auth's user and an empty password (the colon is
/// part of what is encoded). Errors name no URL, so no key in a path reaches a log.
pub(super) async fn exchange(request: reqwest::RequestBuilder, secret_key: &Secret) -> Exchange {
    let request = request.basic_auth(secret_key.expose(), Some(""));
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            match response.bytes().await {
                Ok(body) => Exchange::Answered(status, body.to_vec()),
                Err(e) => Exchange::Lost(format!("response body lost: {}", e.without_url())),
            }
        }
        Err(e) if e.is_connect() => Exchange::NotSent(format!("cannot connect: {}", e.without_url())),
        Err(e) if e.is_timeout() => Exchange::Lost("timed out".into()),
        Err(e) => Exchange::Lost(e.without_url().to_string()),
    }
}
