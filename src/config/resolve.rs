//! The value readers every section's resolver shares: durations, addresses, names, lists
//! given as a list or as comma-separated text, and the redaction of what a source quoted.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, invalid};
use crate::adapters::Secret;
use crate::application::input::parse_duration;

pub(super) fn duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    parse_duration(text).map_err(|e| invalid(key, e))
}

/// A duration that must be greater than zero.
pub(super) fn positive(key: &str, text: &str) -> Result<Duration, ConfigError> {
    let value = duration(key, text)?;
    if value.is_zero() {
        return Err(invalid(key, "must be greater than zero"));
    }
    Ok(value)
}

pub(super) fn address(key: &str, text: &str) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|_| invalid(key, "expected HOST:PORT, e.g. 127.0.0.1:8080"))
}

/// An exchange or queue name.
pub(super) fn name(key: &str, value: String) -> Result<String, ConfigError> {
    if value.is_empty() || value.len() > 255 {
        return Err(invalid(key, "must be 1 to 255 characters"));
    }
    Ok(value)
}

pub(super) fn redact(message: &str) -> String {
    // The config crate quotes offending values in backticks or quotes; URLs may carry
    // passwords. Drop any `user:password@` part of a URL-looking token.
    message
        .split(' ')
        .map(|word| match (word.find("://"), word.find('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}://***{}", &word[..scheme], &word[at..])
            }
            _ => word.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A list of settings: a list in a file, comma-separated text in the environment.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawList<T> {
    List(Vec<T>),
    Text(T),
}

/// An item of a [`RawList`]: read from, and made of, text.
pub(super) trait ListItem: Sized {
    fn text(&self) -> &str;
    fn of(text: &str) -> Self;
}

impl ListItem for String {
    fn text(&self) -> &str {
        self
    }

    fn of(text: &str) -> Self {
        text.to_owned()
    }
}

impl ListItem for Secret {
    fn text(&self) -> &str {
        self.expose()
    }

    fn of(text: &str) -> Self {
        Secret::new(text)
    }
}

impl<T: ListItem> RawList<T> {
    pub(super) fn into_list(self) -> Vec<T> {
        match self {
            RawList::List(list) => list,
            RawList::Text(text) => {
                text.text().split(',').map(str::trim).filter(|t| !t.is_empty()).map(T::of).collect()
            }
        }
    }
}
