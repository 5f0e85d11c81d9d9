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
