//! Sealing what the service keeps secret at rest (a merchant's channel settings): an AEAD
//! under `secrets.key`, each sealed value naming the key that sealed it so a rotation can
//! find what is still under the previous one.

/// A value sealed at rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The sealing key's id (not the key: a digest of it).
    pub key_id: String,
    /// Nonce and ciphertext, base64.
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("secrets.key is not set")]
    NoKey,
    #[error("sealed under key {0}, which is neither secrets.key nor secrets.previous_key")]
    UnknownKey(String),
    #[error("a sealed value does not open (altered, or sealed under another key)")]
    Broken,
}

#[cfg_attr(test, mockall::automock)]
pub trait SecretBox: Send + Sync {
    /// `plain`, sealed under the current key with a fresh nonce.
    ///
    /// # Errors
    /// `NoKey` without a current key.
    fn seal(&self, plain: &[u8]) -> Result<Sealed, SealError>;

    /// What `sealed` holds, opened with the key that sealed it (current or previous).
    ///
    /// # Errors
    /// `UnknownKey` when neither key is that one; `Broken` when it does not authenticate.
    fn open(&self, sealed: &Sealed) -> Result<Vec<u8>, SealError>;

    /// The id of the key new values are sealed under.
    fn current_key(&self) -> Option<String>;
}
