//! The HTTP scaffolding both HTTP payment providers (external, Toss) share: one client per
//! provider ([`ProviderHttp`]: its base URL, its secret key, its bounded doubling retries),
//! and one exchange, seen as answered, never sent (nothing can have happened there), or lost
//! after sending (the provider may have acted). Every call carries
//! `Authorization: Basic base64("{key}:")`.

use std::time::Duration;

use reqwest::{Method, StatusCode};

use super::SetupError;
use crate::adapters::Secret;
use crate::application::ports::Cause;

/// A provider's HTTP client: where it is, the key it is called with, and how often a call
/// that failed for now is made again.
pub(super) struct ProviderHttp {
    client: reqwest::Client,
    base_url: String,
    secret_key: Secret,
    retries: u32,
    retry_backoff: Duration,
}

impl ProviderHttp {
    /// # Errors
    /// The HTTP client cannot be built.
    pub(super) fn new(
        base_url: &str,
        secret_key: Secret,
        connect_timeout: Duration,
        retries: u32,
        retry_backoff: Duration,
    ) -> Result<Self, SetupError> {
        let client = crate::adapters::http_client::builder()
            .connect_timeout(connect_timeout)
            .build()
            .map_err(|e| SetupError(format!("cannot build the provider's HTTP client: {e}")))?;
        let base_url = base_url.trim_end_matches('/').to_owned();
        Ok(ProviderHttp { client, base_url, secret_key, retries, retry_backoff })
    }

    /// A call to `path` (from the base URL), ending after `timeout`.
    pub(super) fn request(&self, method: Method, path: &str, timeout: Duration) -> reqwest::RequestBuilder {
        self.client.request(method, format!("{}{path}", self.base_url)).timeout(timeout)
    }

    /// Sends `request` with the secret key (see [`exchange`]).
    pub(super) async fn exchange(&self, request: reqwest::RequestBuilder) -> Exchange {
        exchange(request, &self.secret_key).await
    }

    /// After a failure that may pass: whether to try again, having slept the doubled
    /// backoff first; `false` once the retries are spent.
    pub(super) async fn again(
        &self,
        attempt: &mut u32,
        call: &str,
        reason: &(dyn std::fmt::Display + Sync),
    ) -> bool {
        if *attempt >= self.retries {
            return false;
        }
        tracing::warn!(%reason, attempt = *attempt, call, "payment provider call failed for now; the same call again");
        let pause = crate::domain::backoff::doubled_pause(self.retry_backoff, *attempt, Duration::MAX);
        *attempt += 1;
        tokio::time::sleep(pause).await;
        true
    }

    pub(super) fn secret_key(&self) -> &Secret {
        &self.secret_key
    }
}

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
        crate::adapters::http_client::install_tls_provider();
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
