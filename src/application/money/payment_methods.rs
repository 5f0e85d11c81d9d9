//! Saved cards (docs/spec.md §10): a customer registers a card in the provider's billing-auth
//! widget, whose one-time `authKey` the client hands over; the provider turns it into a
//! billing key for the customer's key, which is stored and later charges the customer's
//! meeting registrations. The billing key is a secret: it is never returned, logged, put in
//! an event or an audit row.

use std::sync::Arc;

use crate::application::audit::{self, entity};
use crate::application::ports::Cause;
use crate::application::ports::{Clock, GatewayError, PaymentMethodRepository, ProviderCustomers, SavedCard};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::text;

/// What a customer sees of their saved card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentMethodView {
    /// The key the billing-auth widget needs (the same before and after a card is saved).
    pub customer_key: String,
    pub card: Option<CardView>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardView {
    pub company: Option<String>,
    /// Masked by the provider.
    pub number: Option<String>,
}

pub struct PaymentMethods {
    cards: Arc<dyn PaymentMethodRepository>,
    /// `None` for a provider that keeps no saved cards (mock, external).
    provider: Option<Arc<dyn ProviderCustomers>>,
    clock: Arc<dyn Clock>,
}

fn no_saved_cards() -> AppError {
    AppError::Conflict {
        code: "NOT_SUPPORTED",
        message: "this payment provider keeps no saved cards (payment.provider = toss does)".into(),
    }
}

/// `authKey`: one-time, from the widget's redirect; Toss's keys are `[A-Za-z0-9_-]`.
fn check_auth_key(key: &str) -> Result<(), AppError> {
    text::check("authKey", key, 300).map_err(|e| AppError::validation(e.field(), e.message()))?;
    if text::is_provider_key(key, 300) {
        Ok(())
    } else {
        Err(AppError::validation("authKey", "must be 1-300 of [A-Za-z0-9_-=.]"))
    }
}

fn view(customer_key: String, card: Option<&SavedCard>) -> PaymentMethodView {
    PaymentMethodView {
        customer_key,
        card: card.map(|c| CardView { company: c.card_company.clone(), number: c.card_number.clone() }),
    }
}

impl PaymentMethods {
    pub fn new(
        cards: Arc<dyn PaymentMethodRepository>,
        provider: Option<Arc<dyn ProviderCustomers>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        PaymentMethods { cards, provider, clock }
    }

    /// The provider's customers, or `NOT_SUPPORTED` for a provider that keeps no saved cards.
    fn provider(&self) -> Result<&Arc<dyn ProviderCustomers>, AppError> {
        self.provider.as_ref().ok_or_else(no_saved_cards)
    }

    fn customer_key(&self, actor: &Actor) -> Result<String, AppError> {
        Ok(self.provider()?.customer_key(&actor.subject))
    }

    /// The caller's key at the provider and saved card.
    ///
    /// # Errors
    /// `Conflict` `NOT_SUPPORTED` for a provider without saved cards; `Unavailable`.
    pub async fn view(&self, actor: &Actor) -> Result<PaymentMethodView, AppError> {
        let customer_key = self.customer_key(actor)?;
        let card = self.cards.saved_card(&actor.subject).await?;
        Ok(view(customer_key, card.as_ref()))
    }

    /// Saves the card the caller registered in the billing-auth widget (replacing theirs).
    ///
    /// # Errors
    /// `Validation` for a bad `authKey`; `Unprocessable` with the provider's code when it
    /// refuses the key (spent, another customer's); `Conflict` `NOT_SUPPORTED`;
    /// `Unavailable` when the provider or the database cannot be used (nothing saved).
    pub async fn register(&self, actor: &Actor, auth_key: &str) -> Result<PaymentMethodView, AppError> {
        check_auth_key(auth_key)?;
        let provider = self.provider()?;
        let customer_key = provider.customer_key(&actor.subject);
        let issued = match provider.issue_billing_key(auth_key, &customer_key).await {
            Ok(issued) => issued,
            Err(GatewayError::Rejected { code, message }) => {
                return Err(AppError::Unprocessable {
                    code: "CARD_REFUSED",
                    message: format!("the payment provider refused the card: {code}: {message}"),
                });
            }
            Err(e @ GatewayError::Unavailable(_)) => {
                return Err(AppError::Unavailable(Cause::context("payment provider", e)));
            }
        };
        let now = self.clock.now();
        let card = SavedCard {
            customer_id: actor.subject.clone(),
            customer_key: customer_key.clone(),
            billing_key: issued.billing_key,
            card_company: issued.card_company,
            card_number: issued.card_number,
            created_at: now,
        };
        let shown = card.card_number.clone().unwrap_or_else(|| "a card".into());
        let audit = audit::record(
            AuditAction::PaymentMethodSaved,
            entity::CUSTOMER,
            &actor.subject,
            actor,
            Some(format!("saved {shown}")),
            now,
        );
        self.cards.save_card(&card, &audit).await?;
        Ok(view(customer_key, Some(&card)))
    }

    /// Forgets the caller's saved card (their registrations are then refused
    /// `NO_PAYMENT_METHOD` until they save another).
    ///
    /// # Errors
    /// `NotFound` when there is none; `Conflict` `NOT_SUPPORTED`; `Unavailable`.
    pub async fn forget(&self, actor: &Actor) -> Result<(), AppError> {
        self.provider()?;
        let audit = audit::record(
            AuditAction::PaymentMethodForgotten,
            entity::CUSTOMER,
            &actor.subject,
            actor,
            None,
            self.clock.now(),
        );
        if !self.cards.forget_card(&actor.subject, &audit).await? {
            return Err(AppError::NotFound("payment method"));
        }
        Ok(())
    }
}
