//! One HTTP exchange with a payment provider, as both HTTP providers (external, Toss) see
//! it: answered, never sent (nothing can have happened there), or lost after sending (the
//! provider may have acted). Every call carries `Authorization: Basic base64("{key}:")`.

use reqwest::StatusCode;

use crate::adapters::Secret;
use crate::application::ports::Cause;

/// What one HTTP exchange amounted to.
pub(super) enum Exchange {
    Answered(StatusCode, Vec<u8>),
    /// Never reached the provider: nothing happened there.
    NotSent(Cause),
    /// Sent, but no complete answer (timeout, reset): the provider may have acted.
    Lost(Cause),
}

/// What happened to a call, and reqwest's error (without its URL) with the chain under it
/// (`connection refused`, `deadline has elapsed`, …).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Failed(&'static str, #[source] reqwest::Error);

/// Sends `request` with the key as Basic auth's user and an empty password (the colon is
/// part of what is encoded). Errors name no URL, so no key in a path reaches a log.
pub(super) async fn exchange(request: reqwest::RequestBuilder, secret_key: &Secret) -> Exchange {
    let request = request.basic_auth(secret_key.expose(), Some(""));
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            match response.bytes().await {
                Ok(body) => Exchange::Answered(status, body.to_vec()),
                Err(e) => Exchange::Lost(Cause::new(Failed("response body lost", e.without_url()))),
            }
        }
        Err(e) if e.is_connect() => Exchange::NotSent(Cause::new(Failed("cannot connect", e.without_url()))),
        Err(e) if e.is_timeout() => Exchange::Lost(Cause::new(Failed("timed out", e.without_url()))),
        Err(e) => Exchange::Lost(Cause::new(Failed("no complete answer", e.without_url()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_keeps_the_operating_systems_reason() {
        crate::startup::install_tls_provider();
        // A port nothing listens on (the listener is dropped at once).
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let client = reqwest::Client::new();
        let request = client.get(format!("http://127.0.0.1:{port}/v1/payments/secret-path"));
        let Exchange::NotSent(cause) = exchange(request, &Secret::new("test_sk_x")).await else {
            panic!("nothing listens there")
        };
        let text = crate::application::error::Chain(&cause).to_string();
        // reqwest's own text is only "error sending request": the reason is in its sources.
        assert!(text.starts_with("cannot connect: "), "{text}");
        assert!(text.to_lowercase().contains("refused"), "the OS's reason reaches the edge: {text}");
        assert!(!text.contains("secret-path") && !text.contains("test_sk_x"), "no URL, no key: {text}");
    }
}
