//! The payment provider: approve, look up, cancel or refund.

use async_trait::async_trait;

use super::gateway_error::{CancelError, GatewayError};
use super::scenario::Scenario;
use crate::domain::ids::{OrderId, PaymentId};
use crate::domain::ledger::{ProviderTransaction, UnreadableRow};
use crate::domain::money::Money;
use crate::domain::payout::SettlementRow;

/// Ask the provider to take the money.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovePayment {
    pub order_id: OrderId,
    pub customer_id: String,
    /// Sent as `Idempotency-Key`: asking twice never charges twice. Toss also takes it as
    /// its `orderId` (one per payment attempt, 6–64 of `[A-Za-z0-9_-]`).
    pub payment_request_id: String,
    pub amount: Money,
    /// What the customer sees the charge as (Toss's `orderName`).
    pub order_name: String,
    /// What the customer gave to be charged with, for a provider that needs it (Toss);
    /// `None` for the mock and the external protocol, which charge the customer by id.
    pub authorization: Option<PaymentAuthorization>,
    pub scenario: Scenario,
}

/// How the customer authorized a charge at a provider that asks first (docs/spec.md §10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentAuthorization {
    /// The payment widget's `paymentKey`: the customer authorized this one payment.
    Checkout { payment_key: String },
    /// A saved card: its billing key and the customer's key it is bound to.
    SavedCard { billing_key: BillingKey, customer_key: String },
    /// A card keyed in for this payment (the momo dialect's key-in), charged through
    /// [`CardKeyIn`] under the payment's request id. The card is held in memory only by the
    /// run of the request that keyed it, never stored: any later run (a crash, a lost race,
    /// reconciliation) has `None`, and [`PaymentGateway::approve`] then asks the provider
    /// what it holds under the request id and never charges — a charge not found there is
    /// still an unknown outcome (the first call may land late), never a decline.
    KeyIn { card: Option<KeyedCard> },
}

/// A saved card's billing key: as good as the card, so never printed (`Debug` hides it).
#[derive(Clone, PartialEq, Eq)]
pub struct BillingKey(pub String);

impl std::fmt::Debug for BillingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BillingKey(***)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalOutcome {
    Approved {
        provider_transaction_id: String,
    },
    Declined {
        code: String,
        provider_transaction_id: Option<String>,
    },
    /// The call timed out: the provider may or may not have charged. Reconcile, never
    /// compensate or retry blindly.
    Unknown {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupOutcome {
    Approved {
        provider_transaction_id: String,
    },
    Declined {
        provider_transaction_id: Option<String>,
        code: String,
    },
    /// Approved, then cancelled whole. `cancels` lists each cancel where the provider says
    /// (Toss's `cancels[]`); empty where it does not (the mock, the external protocol).
    Cancelled {
        provider_transaction_id: String,
        cancels: Vec<ProviderCancel>,
    },
    /// Approved, then cancelled in part (Toss's `PARTIAL_CANCELED`): `balance` is what can
    /// still be cancelled.
    PartlyCancelled {
        provider_transaction_id: String,
        balance: i64,
        cancels: Vec<ProviderCancel>,
    },
    /// The provider never took this request: it is safe to approve again with the same key.
    NotFound,
}

/// One cancel the provider made of a payment, as its look-up lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderCancel {
    /// The provider's key of the cancel (Toss's `transactionKey`).
    pub transaction_key: String,
    pub amount: i64,
}

/// Cancel (compensation) or refund an approved payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelPayment {
    pub payment_id: PaymentId,
    pub payment_request_id: String,
    pub provider_transaction_id: String,
    /// Sent as `Idempotency-Key`: the intent's key, one per cancel (a provider that scopes
    /// keys by URL, as Toss does, would replay an earlier partial cancel's answer otherwise).
    pub idempotency_key: String,
    /// How much to cancel.
    pub amount: Money,
    /// What can still be cancelled before this one, as we have it; a provider that checks
    /// it (Toss's `refundableAmount`) refuses a cancel when it disagrees.
    pub balance: Money,
    pub reason: String,
    pub scenario: Scenario,
}

/// What a provider said of a cancel it made, where it says more than "done".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CancelReceipt {
    /// The provider's key of this cancel (Toss's `transactionKey`).
    pub transaction_key: Option<String>,
    /// What can still be cancelled after it, by the provider's books.
    pub balance_after: Option<i64>,
}

/// One page of a provider's ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerPage {
    pub transactions: Vec<ProviderTransaction>,
    /// Rows that could not be read (each a finding of its own; the rest of the page stands).
    pub unreadable: Vec<UnreadableRow>,
    /// The cursor of the next page; `None` on the last.
    pub next: Option<String>,
}

/// One page of a provider's settlements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettlementPage {
    pub rows: Vec<SettlementRow>,
    /// Rows that could not be read (each a finding of its own; the rest of the page stands).
    pub unreadable: Vec<UnreadableRow>,
    /// Whether another page may follow (this one was full).
    pub more: bool,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait PaymentGateway: Send + Sync {
    /// Asks the provider to approve; idempotent by `payment_request_id`.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the provider cannot be reached after bounded retries (nothing
    /// was charged, or the same key makes a later attempt safe). A decline is an outcome.
    async fn approve(&self, request: &ApprovePayment) -> Result<ApprovalOutcome, GatewayError>;

    /// Asks the provider what became of a request (reconciliation).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the provider cannot be reached.
    async fn lookup(
        &self,
        payment_request_id: &str,
        scenario: &Scenario,
    ) -> Result<LookupOutcome, GatewayError>;

    /// Cancels or refunds (part of) an approved payment; idempotent by `idempotency_key`.
    ///
    /// # Errors
    /// MUST return `Rejected` when the provider refuses (recorded, not retried); `Unavailable` when it
    /// cannot be reached (retried later).
    async fn cancel(&self, request: &CancelPayment) -> Result<CancelReceipt, CancelError>;
}

/// The provider's own live record of a payment, for support — present only where the
/// provider has one to show (Toss).
#[async_trait]
pub trait ProviderRecords: Send + Sync {
    /// The provider's live record of the payment `provider_transaction_id` (Toss's Payment
    /// object, unchanged); `None` when the provider has none.
    ///
    /// # Errors
    /// `Rejected` when the provider refuses the look-up; `Unavailable` when it cannot be
    /// reached.
    async fn provider_record(
        &self,
        provider_transaction_id: &str,
    ) -> Result<Option<ProviderRecord>, GatewayError>;
}

/// The provider's ledger of a day — present only where the provider keeps one (Toss).
#[async_trait]
pub trait ProviderLedger: Send + Sync {
    /// One page of the provider's ledger of one `day` (in the provider's own zone): the
    /// approvals and cancels it made that day after the cursor `after` (the first page when
    /// `None`), oldest first, with the cursor of the next page if there is one.
    ///
    /// # Errors
    /// `Rejected` when the provider refuses the read; `Unavailable` when it cannot be
    /// reached or its page cannot be read at all (a row that cannot be read is in the page,
    /// as [`LedgerPage::unreadable`]).
    async fn ledger_page(
        &self,
        day: chrono::NaiveDate,
        after: Option<String>,
    ) -> Result<LedgerPage, GatewayError>;

    /// One page (from 1) of the provider's settlements of the transactions it sold on `day`
    /// (docs/spec.md §13): one row per approval and per cancel (negative), with its fee and
    /// payout.
    ///
    /// # Errors
    /// As [`ProviderLedger::ledger_page`].
    async fn settlement_page(
        &self,
        day: chrono::NaiveDate,
        page: u32,
    ) -> Result<SettlementPage, GatewayError>;
}

/// The provider's customers and the cards it saves for them — present only where the
/// provider has both (Toss: the widgets' `customerKey` and billing keys).
#[async_trait]
pub trait ProviderCustomers: Send + Sync {
    /// The customer's key at the provider, for its widgets: stable per customer,
    /// unguessable, never the customer id itself.
    fn customer_key(&self, customer_id: &str) -> String;

    /// Turns the billing-auth widget's one-time `auth_key` into a saved card bound to
    /// `customer_key` (Toss's billing-key issue).
    ///
    /// # Errors
    /// MUST return `Rejected` when the provider refuses the key (spent, another customer's);
    /// `Unavailable` when it cannot be reached or its answer cannot be used.
    async fn issue_billing_key(&self, auth_key: &str, customer_key: &str)
    -> Result<IssuedCard, GatewayError>;
}

/// A card charged by its number (the momo dialect's test payments).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyedCard {
    /// 15 or 16 digits.
    pub number: String,
    /// `MM`.
    pub expiry_month: String,
    /// `YY`.
    pub expiry_year: String,
    /// The holder's birth date `YYMMDD` (or a business number).
    pub identity_number: String,
}

/// A card number is as good as the card: `Debug` shows its last four digits only.
impl std::fmt::Debug for KeyedCard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let last: String = self.number.chars().rev().take(4).collect::<Vec<_>>().into_iter().rev().collect();
        write!(f, "KeyedCard(****{last})")
    }
}

/// Charge a keyed-in card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInCharge {
    /// The provider's `orderId` and the `Idempotency-Key`: the payment request id of the
    /// order the charge will be placed as.
    pub payment_request_id: String,
    pub amount: Money,
    pub order_name: String,
    pub card: KeyedCard,
}

/// Charging a card by its number — present only where the provider has it and allows it
/// (Toss with a test secret key: its key-in API, which the meetup platform used for test
/// payments).
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait CardKeyIn: Send + Sync {
    /// Charges the card; idempotent by `payment_request_id`. A refusal is `Declined` with
    /// the provider's code, nothing charged; an answer that leaves it open is `Unknown`
    /// (ask [`PaymentGateway::lookup`] under the same request id).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the provider cannot be reached after bounded retries
    /// (the same request id makes a later attempt safe).
    async fn key_in(&self, charge: &KeyInCharge) -> Result<ApprovalOutcome, GatewayError>;
}

/// The provider's own record of a payment, for support: what its readers show, read once by
/// the provider's adapter, and the whole object as the provider sent it (shown beside ours).
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderRecord {
    /// The provider's key of the payment (Toss's `paymentKey`).
    pub payment_key: String,
    /// Our payment request id, as the provider keeps it (Toss's `orderId`).
    pub order_id: String,
    pub order_name: Option<String>,
    /// The provider's own word for where the payment stands (Toss: `DONE`, `CANCELED`, …).
    pub status: String,
    /// In minor units of the payment's currency.
    pub total_amount: i64,
    pub method: Option<String>,
    /// As the provider wrote them (Toss: ISO 8601 with its offset).
    pub approved_at: Option<String>,
    pub requested_at: Option<String>,
    pub failure: Option<ProviderFailure>,
    /// The whole object, unchanged.
    pub whole: serde_json::Value,
}

/// Why the provider failed a payment, in its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderFailure {
    pub code: String,
    pub message: Option<String>,
}

/// A card the provider saved for a customer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCard {
    pub billing_key: BillingKey,
    pub card_company: Option<String>,
    /// Masked by the provider.
    pub card_number: Option<String>,
}
