//! The domain: pure state machines and value types of an order's life after checkout.
//!
//! Nothing here does I/O, knows a database, a broker or an HTTP framework: every state
//! change is a method on an aggregate that either returns the events it produced or a
//! typed error naming the illegal `(state, action)` pair. The application layer is the
//! imperative shell around these functions.

/// Declares a status-like enum with its one contract spelling (`as_str`/`parse`): the single
/// exhaustive place where these enums meet strings on the wire and in the database.
pub mod backoff;

macro_rules! spelled {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The contract spelling (docs/spec.md §3).
            pub fn as_str(&self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// The inverse of [`Self::as_str`]; `None` for anything else.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub mod audit;
pub mod ids;
pub mod ledger;
pub mod merchant;
pub mod money;
pub mod notification;
pub mod order;
pub mod outbox;
pub mod payment;
pub mod payout;
#[cfg(test)]
mod proptests;
pub mod retry;
pub mod settlement;
pub mod text;
pub mod webhook;
pub mod webhook_message;
