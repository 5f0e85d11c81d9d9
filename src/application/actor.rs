//! Who is asking: the authenticated caller as the use cases see it.

use crate::application::error::AppError;
use crate::domain::ids::{ApiKeyId, MerchantId};
use crate::domain::merchant::{KeyRole, default_merchant_id};
use crate::domain::order::Order;

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
    /// The merchant it acts in (docs/spec.md §15): its token's `merchant` claim, its dialect's
    /// configured merchant, or the merchant whose path it was let in under; `None` is the
    /// `DEFAULT` merchant. The operator role reaches past it, to every merchant.
    pub merchant: Option<MerchantId>,
    /// The merchant API key it presented, if that is how it came in.
    pub key: Option<KeyGrant>,
    /// The merchant whose path it was let in under (`Merchants::authorize`), and whether as
    /// one of its operators (an `OPERATOR` member or key: refunds, notification and
    /// settlement repairs).
    pub under: Option<MerchantPath>,
}

/// A caller let in under a merchant's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MerchantPath {
    pub merchant: MerchantId,
    pub operator: bool,
}

/// What a merchant API key lets its bearer do: act for its merchant in its role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGrant {
    pub key_id: ApiKeyId,
    pub merchant_id: MerchantId,
    pub role: KeyRole,
}

impl Actor {
    pub fn customer(subject: impl Into<String>) -> Self {
        Actor {
            subject: subject.into(),
            is_admin: false,
            access: Access::Own,
            email: None,
            merchant: None,
            key: None,
            under: None,
        }
    }

    pub fn admin(subject: impl Into<String>) -> Self {
        Actor {
            subject: subject.into(),
            is_admin: true,
            access: Access::Own,
            email: None,
            merchant: None,
            key: None,
            under: None,
        }
    }

    /// A caller that may see and act on any order, without the operator role.
    pub fn any_order(subject: impl Into<String>) -> Self {
        Actor {
            subject: subject.into(),
            is_admin: false,
            access: Access::AnyOrder,
            email: None,
            merchant: None,
            key: None,
            under: None,
        }
    }

    /// This caller, with the address its token gives.
    pub fn with_email(mut self, email: Option<String>) -> Self {
        self.email = email;
        self
    }

    /// A component of this service acting on its own behalf (worker, consumer).
    pub fn system(component: &str) -> Self {
        Actor {
            subject: format!("system:{component}"),
            is_admin: true,
            access: Access::Own,
            email: None,
            merchant: None,
            key: None,
            under: None,
        }
    }

    /// The same caller, acting in `merchant`.
    pub fn in_merchant(mut self, merchant: Option<MerchantId>) -> Self {
        self.merchant = merchant;
        self
    }

    /// Whose idempotency keys are this caller's: its subject, within the merchant it acts
    /// in when it names one — a person in two merchants has two scopes.
    pub fn scope(&self) -> String {
        match self.merchant {
            None => self.subject.clone(),
            Some(merchant) => format!("{merchant}/{}", self.subject),
        }
    }

    /// The merchant it acts in: the one it names, else `DEFAULT`.
    pub fn home_merchant(&self) -> MerchantId {
        self.merchant.unwrap_or_else(default_merchant_id)
    }

    /// Whether this caller may place an order for `customer_id` (in its merchant).
    pub fn may_act_for(&self, customer_id: &str) -> bool {
        self.sees_every_order() || self.subject == customer_id
    }

    /// Whether this caller may see or act on `order`: the operator any (of the merchant it
    /// acts in, when it names one: under a merchant's path, another's order is not there);
    /// anyone else only an order of its merchant that is its own, or any of its merchant's
    /// with any-order access.
    pub fn may_access(&self, order: &Order) -> bool {
        if self.is_admin {
            return self.merchant.is_none_or(|m| m == order.merchant_id);
        }
        order.merchant_id == self.home_merchant() && self.may_act_for(&order.customer_id)
    }

    /// Whose repairs (notifications, settlements) this caller may list: `None`, every
    /// merchant's (the operator); `Some`, the merchant it acts in.
    ///
    /// # Errors
    /// `Forbidden` unless it is the operator or was let in under a merchant's path.
    pub fn repairs_in(&self) -> Result<Option<MerchantId>, AppError> {
        if self.is_admin {
            return Ok(self.merchant);
        }
        match self.under {
            Some(path) => Ok(Some(path.merchant)),
            None => self.require_admin().map(|()| None),
        }
    }

    /// Whether this caller may repair `order` (a notification, a settlement).
    ///
    /// # Errors
    /// `NotFound` naming `what` for an order it may not see (another merchant's under a
    /// merchant's path); `Forbidden` unless it is the operator or operates the order's
    /// merchant.
    pub fn may_repair(&self, order: &Order, what: &'static str) -> Result<(), AppError> {
        if !self.is_admin && self.under.is_none() {
            return self.require_admin();
        }
        if !self.may_access(order) {
            return Err(AppError::NotFound(what));
        }
        let operates = self.under.is_some_and(|p| p.operator && p.merchant == order.merchant_id);
        if self.is_admin || operates {
            Ok(())
        } else {
            Err(AppError::Forbidden {
                code: "FORBIDDEN",
                message: "an operator of the merchant may repair it".into(),
            })
        }
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
            assert!(actor.may_act_for(&actor.subject.clone()), "{actor:?}: its own");
            assert_eq!(actor.may_act_for("8"), other, "{actor:?}");
            assert_eq!(actor.sees_every_order(), every, "{actor:?}");
            assert_eq!(actor.require_admin().is_ok(), operator, "{actor:?}");
        }
    }

    #[test]
    fn an_order_of_another_merchant_is_seen_only_by_the_operator() {
        use crate::domain::order::{NewOrder, NewOrderItem, OrderSource};
        let other = MerchantId::new();
        let order = |merchant: MerchantId| {
            let input = NewOrder {
                customer_id: "7".into(),
                source: OrderSource::Api,
                meeting_id: None,
                currency: "KRW".into(),
                items: vec![NewOrderItem { sku: "A".into(), quantity: 1, unit_price: 100 }],
            };
            Order::place(crate::domain::ids::OrderId::new(), input, chrono::Utc::now())
                .unwrap()
                .owned_by(merchant, None)
        };
        let (home, away) = (order(default_merchant_id()), order(other));
        // (caller, its own order in DEFAULT, the same customer's order in another merchant)
        for (actor, at_home, abroad) in [
            (Actor::customer("7"), true, false),
            (Actor::customer("7").in_merchant(Some(other)), false, true),
            (Actor::any_order("commerce:alice"), true, false),
            (Actor::customer("8"), false, false),
            (Actor::admin("ops"), true, true),
            (Actor::admin("ops").in_merchant(Some(other)), false, true),
        ] {
            assert_eq!(actor.may_access(&home), at_home, "{actor:?}");
            assert_eq!(actor.may_access(&away), abroad, "{actor:?}");
        }
    }
}
