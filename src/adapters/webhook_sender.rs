//! Merchants' webhooks over HTTP (docs/spec.md §16): a signed `POST` as the Standard
//! Webhooks specification has it (the signer is §13's, `providers::webhook::signature`),
//! sent only to an address deliveries may reach. The host is resolved by our own resolver at
//! every attempt and reqwest connects only to the addresses it let through, so a name that
//! resolved to a public address at creation and to 127.0.0.1 now (DNS rebinding) is refused
//! now; a URL naming an address is checked before any connection. No proxy, no redirect.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::adapters::providers::{WebhookSecret, signature};
use crate::application::ports::{PostAnswer, PostError, RefusedHost, WebhookPost, WebhookSender};

/// The most of an answer kept.
const KEPT: usize = 4096;

/// Resolves a host to its addresses (the system's resolver; the tests' scripted one).
pub trait Lookup: Send + Sync {
    fn lookup(&self, host: String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>;
}

/// The operating system's resolver.
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// Whether deliveries may never reach `ip`: loopback, private, link-local (the cloud
/// metadata address 169.254.169.254 among them), unspecified, shared (100.64/10), multicast,
/// broadcast; an IPv6 address mapping or embedding an IPv4 one as that one.
pub fn forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return forbidden_v4(v4);
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local (fd00:ec2::254, the metadata's)
                || (first & 0xffc0) == 0xfe80 // link-local
                || (first == 0x64 && v6.segments()[1] == 0xff9b) // NAT64 of any IPv4
                || v6.segments()[..6] == [0; 6] // IPv4-compatible
        }
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
}

/// The resolver's refusal, found again in reqwest's error chain.
#[derive(Debug)]
struct RefusedAddress(String);

impl std::fmt::Display for RefusedAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} resolves only to addresses webhooks may not reach", self.0)
    }
}

impl std::error::Error for RefusedAddress {}

/// reqwest's resolver: ours, letting through only the addresses deliveries may reach.
struct Guarded {
    lookup: Arc<dyn Lookup>,
    allow_private: bool,
}

impl Guarded {
    async fn allowed(&self, host: &str) -> Result<Vec<IpAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let all = self.lookup.lookup(host.to_owned()).await?;
        let allowed: Vec<IpAddr> =
            all.iter().copied().filter(|ip| self.allow_private || !forbidden(*ip)).collect();
        if allowed.is_empty() {
            return Err(Box::new(RefusedAddress(host.to_owned())));
        }
        Ok(allowed)
    }
}

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = Guarded { lookup: self.lookup.clone(), allow_private: self.allow_private };
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let allowed = guard.allowed(&host).await?;
            let addrs: Addrs = Box::new(allowed.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

pub struct HttpWebhookSender {
    client: reqwest::Client,
    lookup: Arc<dyn Lookup>,
    allow_private: bool,
}

/// The host of `url` as an address, when it is one.
fn literal_ip(url: &reqwest::Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().ok()
}

impl HttpWebhookSender {
    /// A sender resolving with `lookup`; `allow_private` (`webhooks.allow_private_networks`)
    /// lets it reach any address.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(
        timeout: Duration,
        allow_private: bool,
        lookup: Arc<dyn Lookup>,
    ) -> Result<Self, reqwest::Error> {
        let resolver = Arc::new(Guarded { lookup: lookup.clone(), allow_private });
        let client = crate::adapters::http_client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(resolver)
            .user_agent(concat!("orchestrator-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(HttpWebhookSender { client, lookup, allow_private })
    }

    fn refused(&self, ip: IpAddr) -> bool {
        !self.allow_private && forbidden(ip)
    }

    async fn send(&self, post: &WebhookPost, url: reqwest::Url) -> Result<reqwest::Response, PostError> {
        let secrets: Vec<WebhookSecret> =
            post.secrets.iter().filter_map(|s| WebhookSecret::parse(s).ok()).collect();
        let signed = signature(&secrets, &post.id, post.timestamp, post.body.as_bytes());
        self.client
            .post(url)
            .header("webhook-id", &post.id)
            .header("webhook-timestamp", post.timestamp.to_string())
            .header("webhook-signature", signed)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(post.body.clone())
            .send()
            .await
            .map_err(|e| classify(&e))
    }
}

/// What kind of failure `err` is: our resolver's refusal, a timeout, or no connection.
fn classify(err: &reqwest::Error) -> PostError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.is::<RefusedAddress>() {
            return PostError::RefusedAddress;
        }
        source = e.source();
    }
    if err.is_timeout() { PostError::Timeout } else { PostError::Connect }
}

/// At most [`KEPT`] bytes of the answer's body, read no further.
async fn first_bytes(mut response: reqwest::Response) -> Result<String, PostError> {
    let mut kept = Vec::new();
    while kept.len() < KEPT {
        match response.chunk().await {
            Ok(Some(chunk)) => kept.extend_from_slice(&chunk[..chunk.len().min(KEPT - kept.len())]),
            Ok(None) => break,
            Err(e) => return Err(classify(&e)),
        }
    }
    Ok(String::from_utf8_lossy(&kept).into_owned())
}

#[async_trait]
impl WebhookSender for HttpWebhookSender {
    async fn post(&self, post: &WebhookPost) -> PostAnswer {
        let started = Instant::now();
        let answer =
            |status, retry_after, body| PostAnswer { status, retry_after, body, duration: started.elapsed() };
        let Ok(url) = reqwest::Url::parse(&post.url) else {
            return answer(Err(PostError::Connect), None, "the endpoint's URL does not parse".into());
        };
        if literal_ip(&url).is_some_and(|ip| self.refused(ip)) {
            return answer(Err(PostError::RefusedAddress), None, String::new());
        }
        let response = match self.send(post, url).await {
            Ok(r) => r,
            Err(e) => return answer(Err(e), None, String::new()),
        };
        let status = response.status().as_u16();
        let wait = retry_after(response.headers());
        match first_bytes(response).await {
            Ok(body) => answer(Ok(status), wait, body),
            // The status came; the body did not finish in time: the status stands.
            Err(_) => answer(Ok(status), wait, String::new()),
        }
    }

    async fn check_host(&self, url: &str) -> Result<(), RefusedHost> {
        let url = reqwest::Url::parse(url).map_err(|e| RefusedHost(format!("does not parse: {e}")))?;
        if let Some(ip) = literal_ip(&url) {
            return if self.refused(ip) {
                Err(RefusedHost(format!("{ip} is an address webhooks may not reach")))
            } else {
                Ok(())
            };
        }
        let Some(host) = url.host_str() else { return Err(RefusedHost("names no host".into())) };
        match self.lookup.lookup(host.to_owned()).await {
            // Not resolvable yet: every delivery checks again.
            Err(_) => Ok(()),
            Ok(all) if !all.is_empty() && all.iter().all(|ip| self.refused(*ip)) => {
                Err(RefusedHost(format!("{host} resolves only to addresses webhooks may not reach")))
            }
            Ok(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_loopback_link_local_and_metadata_addresses_are_forbidden() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "::127.0.0.1",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(forbidden(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:2800:220:1::", "172.32.0.1", "100.128.0.1"] {
            assert!(!forbidden(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::RETRY_AFTER, "315360000".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(315_360_000)));
        headers.insert(reqwest::header::RETRY_AFTER, "Fri, 31 Dec 2100 23:59:59 GMT".parse().unwrap());
        assert!(retry_after(&headers).is_some_and(|d| d > Duration::from_secs(3600 * 24 * 365)));
        headers.insert(reqwest::header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }
}
