//! [`TossPaymentGateway`]: Toss's answers as the payment port's outcomes, and the
//! capabilities only Toss has here (its records, its ledger, its customers and billing keys).

use async_trait::async_trait;

use super::answer::Meaning;
use super::client::{TossClient, TossError};
use super::model::{KeyIn, TossPayment, TossStatus};
use crate::application::ports::Cause;
use crate::application::ports::{
    ApprovalOutcome, ApprovePayment, BillingKey, CancelError, CancelPayment, CancelReceipt, CardKeyIn,
    GatewayError, IssuedCard, KeyInCharge, LedgerPage, LookupOutcome, PaymentAuthorization, PaymentGateway,
    ProviderCancel, ProviderCustomers, ProviderFailure, ProviderLedger, ProviderRecord, ProviderRecords,
    Scenario, SettlementPage,
};
use crate::domain::ledger::{ProviderTransaction, TransactionKind, UnreadableRow};
use crate::domain::payment::AUTHORIZATION_MISMATCH;
use crate::domain::text;

/// The payment port over [`TossClient`].
pub struct TossPaymentGateway {
    client: TossClient,
}

impl TossPaymentGateway {
    pub fn new(client: TossClient) -> Self {
        TossPaymentGateway { client }
    }

    pub fn client(&self) -> &TossClient {
        &self.client
    }
}

/// An error that leaves the outcome open, as the reason of an unknown outcome. Our own
/// configuration being wrong is said first, so that an operator sees it at once.
/// A Toss failure as the port's `Unavailable`: the error kept whole, a refusal of our own
/// key or request named as such.
fn unavailable(error: TossError) -> GatewayError {
    if error.meaning() == Some(Meaning::OurConfiguration) {
        return GatewayError::unavailable(open_reason(&error));
    }
    GatewayError::Unavailable(Cause::new(error))
}

/// A Toss failure of a read (a record, the ledger, the settlements): its refusal is its
/// answer (`Rejected`: asking again will not help), anything else as [`unavailable`].
fn refused_or_unavailable(error: TossError) -> GatewayError {
    match error {
        TossError::Answered { code, message, meaning: Meaning::Refused, .. } => {
            GatewayError::Rejected { code, message }
        }
        error => unavailable(error),
    }
}

fn open_reason(error: &TossError) -> String {
    match error.meaning() {
        Some(Meaning::OurConfiguration) => {
            format!("TOSS_CONFIGURATION: our request or key was refused ({error})")
        }
        _ => error.to_string(),
    }
}

/// What a Payment object answered to a charge means.
/// Entries asked for per page of `GET /v1/transactions` (Toss's most).
const LEDGER_PAGE: u32 = 5000;

/// Rows asked for per page of `GET /v1/settlements` (Toss's most).
const SETTLEMENT_PAGE: u32 = 5000;

/// Toss's `cancels[]`, as the port lists a provider's cancels.
fn provider_cancels(payment: &TossPayment) -> Vec<ProviderCancel> {
    payment
        .cancels
        .iter()
        .flatten()
        .map(|c| ProviderCancel { transaction_key: c.transaction_key.clone(), amount: c.cancel_amount })
        .collect()
}

/// What Toss's Payment object says of a charge of `amount` under `order_id`.
fn charged(order_id: &str, amount: i64, payment: TossPayment) -> ApprovalOutcome {
    if payment.order_id != order_id {
        return ApprovalOutcome::Unknown { reason: "Toss answered about another orderId".into() };
    }
    match payment.status {
        TossStatus::Done if payment.total_amount == amount => {
            ApprovalOutcome::Approved { provider_transaction_id: payment.payment_key }
        }
        TossStatus::Done => ApprovalOutcome::Unknown {
            reason: format!("Toss approved {} for a charge of {amount}", payment.total_amount),
        },
        TossStatus::Aborted | TossStatus::Expired => ApprovalOutcome::Declined {
            code: payment.failure_code(),
            provider_transaction_id: Some(payment.payment_key),
        },
        other => ApprovalOutcome::Unknown { reason: format!("Toss answered a charge with status {other:?}") },
    }
}

/// Toss charges won only: any other currency is declined before a call.
fn not_won(amount: crate::domain::money::Money) -> Option<ApprovalOutcome> {
    (amount.currency().as_str() != "KRW").then(|| ApprovalOutcome::Declined {
        code: "NOT_SUPPORTED_CURRENCY".into(),
        provider_transaction_id: None,
    })
}

/// A charge's answer as the port's outcome. `checkout`: the charge confirmed a widget's
/// `paymentKey`, whose mismatch is the customer's error.
fn outcome_of(
    order_id: &str,
    amount: i64,
    checkout: bool,
    answer: Result<TossPayment, TossError>,
) -> ApprovalOutcome {
    match answer {
        Ok(payment) => charged(order_id, amount, payment),
        Err(TossError::Answered { code, meaning: Meaning::Refused, .. }) => {
            ApprovalOutcome::Declined { code, provider_transaction_id: None }
        }
        // The checkout's orderId or amount are not what the customer authorized with this
        // key (Toss: 400 INVALID_REQUEST, "결제 요청 정보(orderId, amount)가 결제창과
        // 다릅니다"): a key from another checkout, or another amount authorized in the
        // widget — the customer's error, nothing moved, and the key is not this order's.
        Err(TossError::Answered { status: 400, code, .. }) if code == "INVALID_REQUEST" && checkout => {
            ApprovalOutcome::Declined { code: AUTHORIZATION_MISMATCH.into(), provider_transaction_id: None }
        }
        Err(TossError::Answered { meaning: Meaning::SessionExpired, .. }) => {
            ApprovalOutcome::Declined { code: "PAYMENT_WINDOW_EXPIRED".into(), provider_transaction_id: None }
        }
        // Everything else leaves the outcome open: a look-up by orderId settles it.
        Err(error) => ApprovalOutcome::Unknown { reason: open_reason(&error) },
    }
}

#[async_trait]
impl PaymentGateway for TossPaymentGateway {
    async fn approve(&self, request: &ApprovePayment) -> Result<ApprovalOutcome, GatewayError> {
        if let Some(refused) = not_won(request.amount) {
            return Ok(refused);
        }
        let amount = request.amount.minor();
        let key = &request.payment_request_id;
        let answer = match &request.authorization {
            None => {
                return Ok(ApprovalOutcome::Declined {
                    code: "NO_PAYMENT_METHOD".into(),
                    provider_transaction_id: None,
                });
            }
            Some(PaymentAuthorization::Checkout { payment_key }) => {
                self.client.confirm(payment_key, &request.payment_request_id, amount, key).await
            }
            // A key-in is charged by `CardKeyIn` only, in the run that has the card: here it
            // is what Toss holds under this orderId, never a charge. None held yet is still
            // open (the first call may land late), never a decline (docs/toss.md).
            Some(PaymentAuthorization::KeyIn { .. }) => match self.client.payment_by_order(key).await {
                Err(TossError::Answered { meaning: Meaning::NotFound, .. }) => {
                    return Ok(ApprovalOutcome::Unknown {
                        reason: "the keyed-in charge is not at Toss (yet); its card is not kept, so only a look-up can settle it".into(),
                    });
                }
                answer => answer,
            },
            Some(PaymentAuthorization::SavedCard { billing_key, customer_key }) => {
                self.client
                    .charge_billing(
                        &billing_key.0,
                        customer_key,
                        amount,
                        &request.payment_request_id,
                        &request.order_name,
                        key,
                    )
                    .await
            }
        };
        let checkout = matches!(request.authorization, Some(PaymentAuthorization::Checkout { .. }));
        Ok(outcome_of(&request.payment_request_id, amount, checkout, answer))
    }

    async fn lookup(
        &self,
        payment_request_id: &str,
        _scenario: &Scenario,
    ) -> Result<LookupOutcome, GatewayError> {
        match self.client.payment_by_order(payment_request_id).await {
            Ok(payment) => Ok(match payment.status {
                TossStatus::Done => LookupOutcome::Approved { provider_transaction_id: payment.payment_key },
                TossStatus::Aborted | TossStatus::Expired => LookupOutcome::Declined {
                    code: payment.failure_code(),
                    provider_transaction_id: Some(payment.payment_key),
                },
                TossStatus::Canceled => LookupOutcome::Cancelled {
                    cancels: provider_cancels(&payment),
                    provider_transaction_id: payment.payment_key,
                },
                TossStatus::PartialCanceled => LookupOutcome::PartlyCancelled {
                    cancels: provider_cancels(&payment),
                    provider_transaction_id: payment.payment_key,
                    balance: payment.balance_amount,
                },
                // Not taken (yet): the same charge with the same key cannot charge twice.
                TossStatus::Ready | TossStatus::InProgress | TossStatus::WaitingForDeposit => {
                    LookupOutcome::NotFound
                }
            }),
            Err(TossError::Answered { meaning: Meaning::NotFound, .. }) => Ok(LookupOutcome::NotFound),
            Err(error) => Err(unavailable(error)),
        }
    }

    async fn cancel(&self, request: &CancelPayment) -> Result<CancelReceipt, CancelError> {
        let amount = request.amount.minor();
        let balance = request.balance.minor();
        // `cancelAmount` is left out only for exactly the whole balance: an amount over the
        // balance must reach Toss as it is (and be refused), never become "all of it".
        let partial = (amount != balance).then_some(amount);
        let answer = self
            .client
            .cancel(
                &request.provider_transaction_id,
                &request.reason,
                partial,
                balance,
                &request.idempotency_key,
            )
            .await;
        match answer {
            Ok(payment) => {
                let newest = payment.newest_cancel().ok_or_else(|| {
                    GatewayError::unavailable("Toss answered a cancel with no entry in cancels[]")
                })?;
                Ok(CancelReceipt {
                    transaction_key: Some(newest.transaction_key.clone()),
                    balance_after: Some(payment.balance_amount),
                })
            }
            // Already cancelled answers a key of ours that Toss never carried out (a cancel it
            // made would be replayed under its key): refused, and the refund's caller asks Toss
            // what cancelled it and records that (docs/toss.md).
            Err(TossError::Answered { code, message, meaning: Meaning::AlreadyCancelled, .. }) => {
                Err(CancelError::AlreadyCancelled { code, message })
            }
            Err(TossError::Answered {
                code,
                message,
                meaning: Meaning::NotCancelable | Meaning::NotFound,
                ..
            }) => Err(GatewayError::Rejected { code, message }.into()),
            Err(TossError::Answered { code, message, meaning: Meaning::StaleBalance, .. }) => {
                Err(CancelError::StaleBalance { message: format!("{code}: {message}") })
            }
            // Unknown, temporary to the end, lost, broken or our own
            // configuration: open; the refund's look-up records what Toss has.
            Err(error) => Err(unavailable(error).into()),
        }
    }
}

#[async_trait]
impl ProviderLedger for TossPaymentGateway {
    async fn ledger_page(
        &self,
        day: chrono::NaiveDate,
        after: Option<String>,
    ) -> Result<LedgerPage, GatewayError> {
        // The day as Toss counts it (its zone, docs/toss.md): D 00:00:00 – D 23:59:59.
        let (start, end) = (format!("{day}T00:00:00"), format!("{day}T23:59:59"));
        let rows = self
            .client
            .transactions(&start, &end, after.as_deref(), LEDGER_PAGE)
            .await
            .map_err(refused_or_unavailable)?;
        let full = rows.len() == LEDGER_PAGE as usize;
        let last_key = rows.last().and_then(|row| match row {
            Ok(t) => Some(t.transaction_key.clone()),
            Err(unreadable) => unreadable.transaction_key.clone(),
        });
        let mut page = LedgerPage::default();
        for row in rows {
            let t = match row {
                Ok(t) => t,
                Err(unreadable) => {
                    page.unreadable.push(unreadable);
                    continue;
                }
            };
            let kind = match t.status {
                TossStatus::Done => TransactionKind::Approval,
                TossStatus::Canceled | TossStatus::PartialCanceled => TransactionKind::Cancel,
                // No money moved (a virtual account waiting, an abort): nothing to match.
                _ => continue,
            };
            let status = t.status.as_str();
            let Ok(at) = chrono::DateTime::parse_from_rfc3339(&t.transaction_at) else {
                page.unreadable.push(UnreadableRow {
                    why: format!(
                        "transactionAt: not a date and time: {}",
                        text::excerpt(&t.transaction_at, 64)
                    ),
                    transaction_key: Some(t.transaction_key),
                });
                continue;
            };
            page.transactions.push(ProviderTransaction {
                status: status.into(),
                transaction_key: t.transaction_key,
                payment_key: t.payment_key,
                order_id: t.order_id,
                kind,
                amount: t.amount,
                at: at.with_timezone(&chrono::Utc),
            });
        }
        if full {
            // Toss pages by the last row's key: a full page must end with one we can read.
            page.next = Some(last_key.ok_or_else(|| {
                GatewayError::unavailable("the ledger page's last row has no transactionKey to page on")
            })?);
        }
        Ok(page)
    }

    async fn settlement_page(
        &self,
        day: chrono::NaiveDate,
        page: u32,
    ) -> Result<SettlementPage, GatewayError> {
        let rows =
            self.client.settlements(day, page, SETTLEMENT_PAGE).await.map_err(refused_or_unavailable)?;
        let more = rows.len() == SETTLEMENT_PAGE as usize;
        let (mut read, mut unreadable) = (Vec::with_capacity(rows.len()), Vec::new());
        for row in rows {
            match row {
                Ok(row) => read.push(row),
                Err(why) => unreadable.push(why),
            }
        }
        Ok(SettlementPage { rows: read, unreadable, more })
    }
}

#[async_trait]
impl CardKeyIn for TossPaymentGateway {
    async fn key_in(&self, charge: &KeyInCharge) -> Result<ApprovalOutcome, GatewayError> {
        if let Some(refused) = not_won(charge.amount) {
            return Ok(refused);
        }
        let amount = charge.amount.minor();
        let card = &charge.card;
        let body = KeyIn {
            amount,
            order_id: &charge.payment_request_id,
            order_name: &charge.order_name,
            card_number: &card.number,
            card_expiration_year: &card.expiry_year,
            card_expiration_month: &card.expiry_month,
            card_password: None,
            customer_identity_number: &card.identity_number,
            customer_email: None,
            customer_name: None,
        };
        let answer = self.client.key_in(&body, &charge.payment_request_id).await;
        Ok(outcome_of(&charge.payment_request_id, amount, false, answer))
    }
}

#[async_trait]
impl ProviderRecords for TossPaymentGateway {
    async fn provider_record(
        &self,
        provider_transaction_id: &str,
    ) -> Result<Option<ProviderRecord>, GatewayError> {
        match self.client.payment(provider_transaction_id).await {
            Ok((read, whole)) => Ok(Some(ProviderRecord {
                payment_key: read.payment_key,
                order_id: read.order_id,
                order_name: read.order_name,
                status: read.status.as_str().to_owned(),
                total_amount: read.total_amount,
                method: read.method,
                approved_at: read.approved_at,
                requested_at: read.requested_at,
                failure: read.failure.map(|f| ProviderFailure { code: f.code, message: f.message }),
                whole,
            })),
            Err(TossError::Answered { meaning: Meaning::NotFound, .. }) => Ok(None),
            Err(error) => Err(refused_or_unavailable(error)),
        }
    }
}

#[async_trait]
impl ProviderCustomers for TossPaymentGateway {
    /// A UUID-shaped HMAC-SHA256 of the customer id under the secret key: stable, and
    /// unguessable by anyone without the key (Toss asks for a random key, never an e-mail,
    /// a phone number or an id that counts up). A new secret key (test to live) gives every
    /// customer a new key; saved cards keep the key they were issued with.
    fn customer_key(&self, customer_id: &str) -> String {
        use hmac::{Hmac, Mac};
        let secret = self.client.secret_key().expose().as_bytes();
        // HMAC takes a key of any length (RFC 2104: a long one is hashed first), so this
        // cannot fail.
        #[allow(clippy::expect_used)]
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
        mac.update(b"customerKey:");
        mac.update(customer_id.as_bytes());
        let digest = mac.finalize().into_bytes();
        let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
    }

    async fn issue_billing_key(
        &self,
        auth_key: &str,
        customer_key: &str,
    ) -> Result<IssuedCard, GatewayError> {
        use sha2::Digest;
        // The one-time authKey and the customer name the issue: the same customer asking
        // again gets it replayed; another customer's post of the key is a request of its own,
        // which Toss refuses (issue 43 item 10).
        let mut hasher = sha2::Sha256::new();
        hasher.update(customer_key.as_bytes());
        hasher.update(b":");
        hasher.update(auth_key.as_bytes());
        let digest = hasher.finalize();
        let key: String = format!("issue-{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>());
        match self.client.issue_billing_key(auth_key, customer_key, &key).await {
            Ok(billing) if billing.customer_key != customer_key => {
                // Whatever made Toss answer so, the card is not this customer's.
                Err(GatewayError::Rejected {
                    code: "NOT_MATCHES_CUSTOMER_KEY".into(),
                    message: "the card was issued for another customer".into(),
                })
            }
            Ok(billing) => Ok(IssuedCard {
                billing_key: BillingKey(billing.billing_key),
                card_company: billing.card_company,
                card_number: billing.card_number,
            }),
            Err(TossError::Answered {
                code, message, meaning: Meaning::Refused | Meaning::NotFound, ..
            }) => Err(GatewayError::Rejected { code, message }),
            Err(error) => Err(unavailable(error)),
        }
    }
}
