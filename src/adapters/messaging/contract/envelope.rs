//! The native envelope as the outbox stores it (docs/messages.md), read back by contracts
//! that send it otherwise.

use serde::Deserialize;
use serde_json::Value;

/// The fields of a stored envelope a contract may need.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    pub event_id: String,
    pub event_type: String,
    pub aggregate_id: String,
    #[serde(default)]
    pub correlation_id: Option<String>,
    pub occurred_at: String,
    pub payload: Value,
}

impl Envelope {
    /// Reads a stored envelope.
    ///
    /// # Errors
    /// What is wrong with it (a row written by hand, or by another version).
    pub fn read(stored: &str) -> Result<Envelope, String> {
        serde_json::from_str(stored).map_err(|e| format!("the stored envelope cannot be read: {e}"))
    }
}
