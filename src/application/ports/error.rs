//! The one error every storage port returns, and the cause it carries.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// Why something failed underneath, kept whole: its `source()` chain is what the edge logs
/// (`application::error::Chain`). Shared, so that errors holding it stay `Clone`.
#[derive(Clone)]
pub struct Cause(Arc<dyn Error + Send + Sync + 'static>);

/// A cause that is only a message (no underlying error value).
#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Message {}

/// What was being done, over the error that stopped it.
#[derive(Debug)]
struct Context {
    text: String,
    source: Box<dyn Error + Send + Sync + 'static>,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Error for Context {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

impl Cause {
    /// `err`, kept with its chain, under what was being done (`payment provider's ledger`).
    pub fn context(text: impl Into<String>, err: impl Error + Send + Sync + 'static) -> Self {
        Cause(Arc::new(Context { text: text.into(), source: Box::new(err) }))
    }

    /// Keeps `err` with its chain.
    pub fn new(err: impl Error + Send + Sync + 'static) -> Self {
        Cause(Arc::new(err))
    }

    /// A cause told in words, where no error value exists.
    pub fn msg(text: impl Into<String>) -> Self {
        Cause(Arc::new(Message(text.into())))
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl Error for Cause {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

/// Two causes are equal when they read the same (tests compare errors by what they say).
impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

/// Why a repository call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepoError {
    /// A conditional update matched nothing (someone else changed the row first) or a
    /// unique key was taken. Nothing was written.
    #[error("conflict: the row changed concurrently or the key exists")]
    Conflict,
    /// The database could not be reached or failed; retrying may succeed. Nothing of the
    /// call was written unless its doc says otherwise.
    #[error("database unavailable")]
    Unavailable(#[source] Cause),
    /// A stored value could not be mapped back to the domain (a bug or manual edit); the
    /// cause names the column and the value.
    #[error("corrupt row")]
    Corrupt(#[source] Cause),
}

impl RepoError {
    pub fn is_transient(&self) -> bool {
        matches!(self, RepoError::Unavailable(_))
    }

    /// `Unavailable` for a cause told in words.
    pub fn unavailable(text: impl Into<String>) -> Self {
        RepoError::Unavailable(Cause::msg(text))
    }

    /// `Corrupt` for a cause told in words.
    pub fn corrupt(text: impl Into<String>) -> Self {
        RepoError::Corrupt(Cause::msg(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_cause_in_context_keeps_the_chain_under_it() {
        let cause = Cause::context("payment provider", Outer(std::io::Error::other("reset")));
        let err = RepoError::Unavailable(cause);
        let mut chain = vec![err.to_string()];
        let mut next = err.source();
        while let Some(e) = next {
            chain.push(e.to_string());
            next = e.source();
        }
        assert_eq!(chain, ["database unavailable", "payment provider", "outer", "reset"]);
    }

    #[test]
    fn a_cause_keeps_its_chain() {
        let err = RepoError::Unavailable(Cause::new(Outer(std::io::Error::other("socket closed"))));
        let mut chain = vec![err.to_string()];
        let mut next = err.source();
        while let Some(e) = next {
            chain.push(e.to_string());
            next = e.source();
        }
        assert_eq!(chain, ["database unavailable", "outer", "socket closed"]);
    }
}
