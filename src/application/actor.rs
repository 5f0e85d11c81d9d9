//! Who is asking: the authenticated caller as the use cases see it.

use crate::application::error::AppError;

/// Whose orders a caller may see and act on — apart from the operator role, which is not an
/// access to orders but to the operator's use cases (and with them, every order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Its own: the orders whose customer it is.
    Own,
    /// Any order: a platform that authorizes its order paths by sign-in alone (the commerce
    /// dialect's users), never the operator's use cases.
    AnyOrder,
}

/// The caller of a use case. HTTP builds it from a verified token; consumers and workers
/// use [`Actor::system`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The token's `sub`: a customer id, or the name of a system component.
    pub subject: String,
    /// The operator role: the operator's use cases (repairs, the outbox, every order).
    pub is_admin: bool,
    /// Whose orders it may see and act on, apart from the operator role.
    pub access: Access,
    /// The token's `email` claim, when it is an address we send to: the recipient of the
    /// caller's own orders' e-mail when an order names none (docs/spec.md §13).
    pub email: Option<String>,
}

impl Actor {
    pub fn customer(subject: impl Into<String>) -> Self {
        Actor { subject: subject.into(), is_admin: false, access: Access::Own, email: None }
    }

    pub fn admin(subject: impl Into<String>) -> Self {
        Actor { subject: subject.into(), is_admin: true, access: Access::Own, email: None }
    }

    /// A caller that may see and act on any order, without the operator role.
    pub fn any_order(subject: impl Into<String>) -> Self {
        Actor { subject: subject.into(), is_admin: false, access: Access::AnyOrder, email: None }
    }

    /// This caller, with the address its token gives.
    pub fn with_email(mut self, email: Option<String>) -> Self {
        self.email = email;
        self
    }

    /// A component of this service acting on its own behalf (worker, consumer).
    pub fn system(component: &str) -> Self {
        Actor { subject: format!("system:{component}"), is_admin: true, access: Access::Own, email: None }
    }

    /// Whether this caller may see or act on the orders of `customer_id`.
    pub fn may_access(&self, customer_id: &str) -> bool {
        self.sees_every_order() || self.subject == customer_id
    }

    /// Whether this caller sees every customer's orders: the operator, or any-order access.
    pub fn sees_every_order(&self) -> bool {
        self.is_admin || self.access == Access::AnyOrder
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_to_orders_is_not_the_operator_role() {
        // (caller, sees another customer's order, sees every order, operator use cases)
        for (actor, other, every, operator) in [
            (Actor::customer("7"), false, false, false),
            (Actor::any_order("commerce:alice"), true, true, false),
            (Actor::admin("ops"), true, true, true),
            (Actor::system("worker"), true, true, true),
        ] {
            assert!(actor.may_access(&actor.subject.clone()), "{actor:?}: its own");
            assert_eq!(actor.may_access("8"), other, "{actor:?}");
            assert_eq!(actor.sees_every_order(), every, "{actor:?}");
            assert_eq!(actor.require_admin().is_ok(), operator, "{actor:?}");
        }
    }
}
