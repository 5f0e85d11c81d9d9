//! Who is asking: the authenticated caller as the use cases see it.

use crate::application::error::AppError;

/// The caller of a use case. HTTP builds it from a verified token; consumers and workers
/// use [`Actor::system`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The token's `sub`: a customer id, or the name of a system component.
    pub subject: String,
    pub is_admin: bool,
    /// The token's `email` claim, when it is an address we send to: the recipient of the
    /// caller's own orders' e-mail when an order names none (docs/spec.md §13).
    pub email: Option<String>,
}

impl Actor {
    pub fn customer(subject: impl Into<String>) -> Self {
        Actor { subject: subject.into(), is_admin: false, email: None }
    }

    pub fn admin(subject: impl Into<String>) -> Self {
        Actor { subject: subject.into(), is_admin: true, email: None }
    }

    /// This caller, with the address its token gives.
    pub fn with_email(mut self, email: Option<String>) -> Self {
        self.email = email;
        self
    }

    /// A component of this service acting on its own behalf (worker, consumer).
    pub fn system(component: &str) -> Self {
        Actor { subject: format!("system:{component}"), is_admin: true, email: None }
    }

    /// Whether this caller may see or act on the orders of `customer_id`.
    pub fn may_access(&self, customer_id: &str) -> bool {
        self.is_admin || self.subject == customer_id
    }

    /// `Forbidden` unless this caller is an admin (operator use cases).
    ///
    /// # Errors
    /// `Forbidden` for a non-admin.
    pub fn require_admin(&self) -> Result<(), AppError> {
        if self.is_admin {
            Ok(())
        } else {
            Err(AppError::Forbidden { code: "FORBIDDEN", message: "admin role required".into() })
        }
    }
}
