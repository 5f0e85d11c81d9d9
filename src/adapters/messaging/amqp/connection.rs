//! Opening connections from `amqp://` URLs (`broker.url`, or a cluster's nodes in
//! `broker.urls`). The URLs' credentials never reach a log or an error message.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use amqprs::connection::{Connection, OpenConnectionArguments};

use crate::adapters::SetupError;

/// What went wrong talking to RabbitMQ, with the error underneath. No text of it carries a
/// secret: amqprs's error for a failed connect or a refused login may quote the URL's
/// password, so of that error only its text, redacted, is kept ([`Redacted`]).
#[derive(Debug, thiserror::Error)]
pub enum AmqpError {
    #[error("timed out connecting to {0}")]
    ConnectTimeout(String),
    #[error("cannot connect to {endpoint}")]
    Connect {
        endpoint: String,
        #[source]
        source: Redacted,
    },
    /// No node of a cluster answered: each one's failure.
    #[error("no broker node answered: {}", .0.iter().map(|e| crate::application::error::Chain(e).to_string()).collect::<Vec<_>>().join("; "))]
    NoNode(Vec<AmqpError>),
    /// The broker refused or failed an operation on an open connection.
    #[error("{what}")]
    Broker {
        what: String,
        #[source]
        source: amqprs::error::Error,
    },
    /// The connection or a channel went away.
    #[error("{0}")]
    Lost(&'static str),
    /// A name or value AMQP cannot carry (longer than a short string, say).
    #[error("{0}")]
    Invalid(String),
}

impl AmqpError {
    /// Maps an amqprs error of `what` (`.map_err(AmqpError::broker("declare x"))`).
    pub fn broker(what: impl Into<String>) -> impl FnOnce(amqprs::error::Error) -> AmqpError {
        let what = what.into();
        move |source| AmqpError::Broker { what, source }
    }
}

/// An error's text with a secret taken out; the error itself, which may hold it, is dropped.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Redacted(String);

/// Where and how to connect; parsed once from `broker.url`.
#[derive(Clone)]
pub struct AmqpEndpoint {
    host: String,
    port: u16,
    user: String,
    password: String,
    vhost: String,
}

impl std::fmt::Debug for AmqpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "amqp://***@{}:{}/{}", self.host, self.port, self.vhost)
    }
}

fn percent_decode(text: &str) -> Result<String, SetupError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).ok_or("bad percent-encoding")?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| "bad percent-encoding")?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent-encoding is not UTF-8".into())
}

impl AmqpEndpoint {
    /// Parses `amqp://user:pass@host[:port][/vhost]` (vhost percent-encoded: `%2f` is `/`).
    ///
    /// # Errors
    /// A description of what is wrong, without the URL's secrets.
    pub fn parse(url: &str) -> Result<AmqpEndpoint, SetupError> {
        let rest = url.strip_prefix("amqp://").ok_or("broker.url must start with amqp://")?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let path = path.split('?').next().unwrap_or_default();
        let (credentials, hostport) = match authority.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, authority),
        };
        let (user, password) = match credentials {
            Some(c) => {
                let (u, p) = c.split_once(':').unwrap_or((c, ""));
                (percent_decode(u)?, percent_decode(p)?)
            }
            None => ("guest".to_owned(), "guest".to_owned()),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), p.parse::<u16>().map_err(|_| "broker.url has an invalid port")?),
            None => (hostport.to_owned(), 5672),
        };
        if host.is_empty() {
            return Err("broker.url has no host".into());
        }
        let vhost = if path.is_empty() { "/".to_owned() } else { percent_decode(path)? };
        Ok(AmqpEndpoint { host, port, user, password, vhost })
    }

    pub fn vhost(&self) -> &str {
        &self.vhost
    }

    /// The same broker, another virtual host (tests isolate themselves this way).
    pub fn with_vhost(&self, vhost: &str) -> AmqpEndpoint {
        AmqpEndpoint { vhost: vhost.to_owned(), ..self.clone() }
    }

    pub fn host_port(&self) -> (&str, u16) {
        (&self.host, self.port)
    }

    pub fn credentials(&self) -> (&str, &str) {
        (&self.user, &self.password)
    }
}

/// The nodes of one broker (a RabbitMQ cluster, or a single node), tried in turn.
///
/// A connection goes to the node that served last; when a connection to it is lost, the
/// holder reports it (`lost`) and the next connection starts at the following node, going
/// round the list once before giving up. Callers pace their reconnections (the consumers
/// back off, the relay's failed events wait out their retry backoff). Clones share the
/// cursor, so the connections of one process move together.
#[derive(Clone, Debug)]
pub struct AmqpNodes {
    endpoints: Arc<[AmqpEndpoint]>,
    current: Arc<AtomicUsize>,
    /// Whether the broker has stopped taking messages (see [`AmqpNodes::stalled`]).
    stall: Arc<std::sync::Mutex<Option<String>>>,
}

impl AmqpNodes {
    /// # Errors
    /// No endpoint given.
    pub fn new(endpoints: Vec<AmqpEndpoint>) -> Result<AmqpNodes, SetupError> {
        if endpoints.is_empty() {
            return Err("no broker node given".into());
        }
        Ok(AmqpNodes {
            endpoints: endpoints.into(),
            current: Arc::new(AtomicUsize::new(0)),
            stall: Arc::default(),
        })
    }

    /// Parses each URL (`broker.urls`).
    ///
    /// # Errors
    /// Which URL (by position, never by content) is malformed, and how.
    pub fn parse<'a>(urls: impl IntoIterator<Item = &'a str>) -> Result<AmqpNodes, SetupError> {
        let endpoints = urls
            .into_iter()
            .enumerate()
            .map(|(i, url)| AmqpEndpoint::parse(url).map_err(|e| SetupError(format!("node {}: {e}", i + 1))))
            .collect::<Result<Vec<_>, _>>()?;
        AmqpNodes::new(endpoints)
    }

    pub fn endpoints(&self) -> &[AmqpEndpoint] {
        &self.endpoints
    }

    /// The broker took no message of a whole publish within the confirm timeout, on a
    /// connection it keeps open: it is blocking publishers (a memory or disk alarm:
    /// RabbitMQ stops reading from publishing connections; amqprs does not announce the
    /// `connection.blocked` capability, so the broker never says so itself). Every
    /// connection of the process sees it, and readiness reports it, until a message is
    /// confirmed again.
    pub fn stalled(&self, reason: &str) {
        let mut stall = self.stall.lock().unwrap_or_else(|e| e.into_inner());
        if stall.is_none() {
            tracing::warn!(%reason, "broker: no message confirmed within the timeout; publishers are blocked");
        }
        *stall = Some(reason.to_owned());
    }

    /// A message was confirmed: the broker takes messages again.
    pub fn flowing(&self) {
        let mut stall = self.stall.lock().unwrap_or_else(|e| e.into_inner());
        if stall.take().is_some() {
            tracing::info!("broker: messages are confirmed again; publishers are no longer blocked");
        }
    }

    /// Why the broker is taking no messages, while it is not.
    pub fn stall(&self) -> Option<String> {
        self.stall.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The connection to `endpoint` was lost: the next connection starts at the node after
    /// it (unless another holder has moved on already).
    pub fn lost(&self, endpoint: usize) {
        let next = (endpoint + 1) % self.endpoints.len();
        let _ = self.current.compare_exchange(endpoint, next, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Connects to the first node that answers, starting at the current one; returns the
    /// connection and the node's position (for `lost`).
    ///
    /// # Errors
    /// No node could be reached: every node's failure, without secrets.
    pub async fn connect(&self, name: &str) -> Result<(Connection, usize), AmqpError> {
        let start = self.current.load(Ordering::Acquire) % self.endpoints.len();
        let mut failures = Vec::new();
        for step in 0..self.endpoints.len() {
            let at = (start + step) % self.endpoints.len();
            match connect(&self.endpoints[at], name).await {
                Ok(connection) => {
                    if at != start {
                        self.current.store(at, Ordering::Release);
                        tracing::warn!(endpoint = ?self.endpoints[at], "broker: moved to another node");
                    }
                    return Ok((connection, at));
                }
                Err(e) => failures.push(e),
            }
        }
        Err(if failures.len() == 1 { failures.remove(0) } else { AmqpError::NoNode(failures) })
    }
}

/// Opens a connection named `name` (shown in the RabbitMQ management UI).
///
/// # Errors
/// The broker cannot be reached or refuses the login; the message carries no secret.
pub async fn connect(endpoint: &AmqpEndpoint, name: &str) -> Result<Connection, AmqpError> {
    let mut args =
        OpenConnectionArguments::new(&endpoint.host, endpoint.port, &endpoint.user, &endpoint.password);
    args.virtual_host(&endpoint.vhost).connection_name(name).heartbeat(30);
    let connection = tokio::time::timeout(std::time::Duration::from_secs(10), Connection::open(&args))
        .await
        .map_err(|_| AmqpError::ConnectTimeout(format!("{endpoint:?}")))?
        .map_err(|e| AmqpError::Connect {
            endpoint: format!("{endpoint:?}"),
            source: Redacted(redact(&e.to_string(), &endpoint.password)),
        })?;
    connection
        .register_callback(LoggingConnectionCallback)
        .await
        .map_err(AmqpError::broker("cannot register the connection callback"))?;
    Ok(connection)
}

fn redact(message: &str, secret: &str) -> String {
    if secret.is_empty() { message.to_owned() } else { message.replace(secret, "***") }
}

struct LoggingConnectionCallback;

#[async_trait::async_trait]
impl amqprs::callbacks::ConnectionCallback for LoggingConnectionCallback {
    async fn close(
        &mut self,
        connection: &Connection,
        close: amqprs::Close,
    ) -> Result<(), amqprs::error::Error> {
        tracing::warn!(connection = connection.connection_name(), reason = %close, "broker closed the connection");
        Ok(())
    }

    async fn blocked(&mut self, connection: &Connection, reason: String) {
        tracing::warn!(connection = connection.connection_name(), %reason, "broker blocked the connection");
    }

    async fn unblocked(&mut self, connection: &Connection) {
        tracing::info!(connection = connection.connection_name(), "broker unblocked the connection");
    }

    async fn secret_updated(&mut self, _connection: &Connection) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_percent_encoded_vhosts_and_defaults() {
        let e = AmqpEndpoint::parse("amqp://guest:p%40ss@127.0.0.1:5673/%2f").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.user.as_str(), e.password.as_str(), e.vhost.as_str()),
            ("127.0.0.1", 5673, "guest", "p@ss", "/")
        );
        let e = AmqpEndpoint::parse("amqp://localhost").unwrap();
        assert_eq!((e.port, e.vhost.as_str(), e.user.as_str()), (5672, "/", "guest"));
        let e = AmqpEndpoint::parse("amqp://u:p@h/orders").unwrap();
        assert_eq!(e.vhost, "orders");
        assert!(!format!("{e:?}").contains('p') || !format!("{e:?}").contains(":p@"));
        assert!(AmqpEndpoint::parse("http://h").is_err());
        assert!(AmqpEndpoint::parse("amqp://h:notaport").is_err());
    }

    #[test]
    fn a_stall_is_shared_by_every_clone_until_a_message_is_confirmed() {
        let nodes = AmqpNodes::parse(["amqp://a:1/%2f"]).unwrap();
        let relay = nodes.clone();
        assert_eq!(nodes.stall(), None);
        relay.stalled("no confirm");
        assert_eq!(nodes.stall().as_deref(), Some("no confirm"));
        nodes.flowing();
        assert_eq!(relay.stall(), None);
    }

    #[test]
    fn a_lost_node_sends_the_next_connection_to_the_following_node() {
        let nodes = AmqpNodes::parse(["amqp://a", "amqp://b:5673", "amqp://c"]).unwrap();
        assert_eq!(nodes.endpoints().len(), 3);
        assert_eq!(nodes.current.load(Ordering::Acquire), 0);
        nodes.lost(0);
        assert_eq!(nodes.current.load(Ordering::Acquire), 1);
        // A second holder reporting the same loss late does not skip a node.
        nodes.lost(0);
        assert_eq!(nodes.current.load(Ordering::Acquire), 1);
        nodes.lost(1);
        nodes.lost(2);
        assert_eq!(nodes.current.load(Ordering::Acquire), 0, "round the list");
        let err = AmqpNodes::parse(["amqp://a", "http://b"]).unwrap_err();
        assert!(err.0.starts_with("node 2:"), "{err}");
        assert!(AmqpNodes::parse(Vec::<&str>::new()).is_err());
    }

    #[tokio::test]
    async fn when_no_node_answers_every_node_is_named() {
        // Two ports nothing listens on (the listeners are dropped at once).
        let closed = |_| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let (a, b) = (closed(()), closed(()));
        let nodes = AmqpNodes::parse([
            format!("amqp://u:pw@127.0.0.1:{a}").as_str(),
            &format!("amqp://u:pw@127.0.0.1:{b}"),
        ])
        .unwrap();
        let Err(err) = nodes.connect("test").await else { panic!("nothing listens there") };
        let err = crate::application::error::Chain(&err).to_string();
        assert!(err.contains(&a.to_string()) && err.contains(&b.to_string()), "{err}");
        assert!(!err.contains("pw"), "no secret in {err}");
    }
}
