//! The native envelope as the outbox stores it (docs/messages.md), read back by contracts
//! that send it otherwise. Borrowed from the stored text: the payload is kept as the exact
//! JSON it was stored as (no parse, no re-serialisation: the relay's hot path).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The fields of a stored envelope a contract may need.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope<'a> {
    #[serde(borrow)]
    pub event_id: Cow<'a, str>,
    #[serde(borrow)]
    pub event_type: Cow<'a, str>,
    #[serde(borrow)]
    pub aggregate_id: Cow<'a, str>,
    #[serde(default, borrow)]
    pub correlation_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub occurred_at: Cow<'a, str>,
    /// The payload, as stored.
    #[serde(borrow)]
    pub payload: &'a RawValue,
}

impl<'a> Envelope<'a> {
    /// Reads a stored envelope.
    ///
    /// # Errors
    /// What is wrong with it (a row written by hand, or by another version).
    pub fn read(stored: &'a str) -> Result<Envelope<'a>, String> {
        serde_json::from_str(stored).map_err(|e| format!("the stored envelope cannot be read: {e}"))
    }
}
