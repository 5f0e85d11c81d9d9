//! The one error every storage port returns.

/// Why a repository call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepoError {
    #[error("not found")]
    NotFound,
    /// A conditional update matched nothing (someone else changed the row first) or a
    /// unique key was taken. Nothing was written.
    #[error("conflict: the row changed concurrently or the key exists")]
    Conflict,
    /// The database could not be reached or failed; retrying may succeed.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A stored value could not be mapped back to the domain (a bug or manual edit).
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

impl RepoError {
    pub fn is_transient(&self) -> bool {
        matches!(self, RepoError::Unavailable(_))
    }
}
