//! Committing a use case's changes, where losing a race is an answer rather than a failure.

use crate::application::AppError;
use crate::application::ports::{Changes, RepoError, UnitOfWork};

/// Commits `changes` in one transaction; `Ok(false)` when a conditional write lost a race
/// (someone changed a row first: nothing was written, the caller decides what that means).
///
/// # Errors
/// `Unavailable` when the database fails (nothing written).
pub(crate) async fn commit(uow: &dyn UnitOfWork, changes: Changes) -> Result<bool, AppError> {
    match uow.commit(changes).await {
        Ok(()) => Ok(true),
        Err(RepoError::Conflict) => Ok(false),
        Err(err) => Err(err.into()),
    }
}
