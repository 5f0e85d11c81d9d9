//! Adapters: the technology behind each port — SeaORM persistence, the HTTP API, the
//! event publishers, the providers — and nothing the application depends on directly.

pub mod clock;
pub mod http;
pub mod http_client;
pub mod jackson;
pub mod messaging;
pub mod persistence;
pub mod providers;
pub mod secret;
pub mod secret_box;
pub mod webhook_sender;

pub use secret::Secret;

/// Why an adapter cannot be set up: its settings (a key, a URL, a client) or what it must
/// reach when the service starts. Named for the operator then, never at a call; the edges'
/// causes are typed (docs/architecture.md, "Limits").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SetupError(pub String);

impl From<&str> for SetupError {
    fn from(why: &str) -> Self {
        SetupError(why.to_owned())
    }
}

impl From<String> for SetupError {
    fn from(why: String) -> Self {
        SetupError(why)
    }
}
