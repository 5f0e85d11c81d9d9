//! The external payment provider (docs/spec.md §9, modelled on Toss Payments) over HTTPS.
//!
//! Every call carries `Authorization: Basic base64("{secret_key}:")` and the configured
//! timeout. Outcomes map onto the port's contract: a 4xx is a business answer (declined,
//! refused), 5xx and refused connections are transient (retried a bounded number of times
//! with backoff — safe because every mutating call carries an `Idempotency-Key`), and a
//! timeout after the request was sent is an *unknown* outcome for approvals. The secret key
//! is never logged or put into an error.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::json;

use crate::adapters::Secret;
use crate::application::error::Chain;
use crate::application::ports::Cause;
use crate::application::ports::{
    ApprovalOutcome, ApprovePayment, CancelError, CancelPayment, CancelReceipt, GatewayError, LookupOutcome,
    PaymentGateway, Scenario,
};
use crate::domain::text;

use super::transport::{Exchange, ProviderHttp};
use super::{BrokenAnswer, SetupError};

#[derive(Debug, Clone)]
pub struct ExternalProviderSettings {
    pub base_url: String,
    pub secret_key: Secret,
    pub timeout: Duration,
    /// Transient failures retried this many times per call.
    pub retries: u32,
    /// First retry delay; doubled after each.
    pub retry_backoff: Duration,
}

pub struct ExternalPaymentGateway {
    http: ProviderHttp,
    timeout: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApproveResponse {
    provider_transaction_id: String,
    status: String,
    decline_code: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LookupResponse {
    provider_transaction_id: String,
    status: String,
    decline_code: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorResponse {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

impl ExternalPaymentGateway {
    /// # Errors
    /// The HTTP client cannot be built (no TLS provider).
    pub fn new(settings: ExternalProviderSettings) -> Result<Self, SetupError> {
        let http = ProviderHttp::new(
            &settings.base_url,
            settings.secret_key,
            settings.timeout,
            settings.retries,
            settings.retry_backoff,
        )?;
        Ok(ExternalPaymentGateway { http, timeout: settings.timeout })
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, path, self.timeout)
    }

    /// After a transient failure: whether to try again (sleeping the backoff first).
    async fn again(&self, attempt: &mut u32, reason: &Cause) -> bool {
        let reason = Chain(reason).to_string();
        self.http.again(attempt, "external", &reason).await
    }
}

fn business_error(body: &[u8]) -> ErrorResponse {
    serde_json::from_slice(body).unwrap_or_default()
}

/// docs/spec.md §4/§5: a provider answer is input like any other. A transaction id, code or
/// message that is over-long or carries control characters breaks the protocol: the
/// caller treats the answer as an unknown outcome (it cannot be stored as it is), never as
/// a decision. `Err` says which field broke it.
fn protocol_text(field: &str, value: &str, max: usize) -> Result<(), BrokenAnswer> {
    if value.is_empty() && field == "providerTransactionId" {
        return Err(format!("{field}: empty").into());
    }
    text::check(field, value, max).map_err(|e| BrokenAnswer(format!("answer breaks the protocol: {e}")))
}

fn check_transaction(id: &str) -> Result<(), BrokenAnswer> {
    protocol_text("providerTransactionId", id, text::limits::PROVIDER_TRANSACTION_ID)
}

fn check_code(field: &str, code: Option<&str>) -> Result<(), BrokenAnswer> {
    code.map_or(Ok(()), |c| protocol_text(field, c, text::limits::PROVIDER_CODE))
}

fn check_error(e: &ErrorResponse) -> Result<(), BrokenAnswer> {
    check_code("code", Some(&e.code))?;
    protocol_text("message", &e.message, text::limits::PROVIDER_MESSAGE)
}

#[async_trait]
impl PaymentGateway for ExternalPaymentGateway {
    async fn approve(&self, request: &ApprovePayment) -> Result<ApprovalOutcome, GatewayError> {
        let body = json!({
            "paymentRequestId": request.payment_request_id,
            "orderId": request.order_id.to_string(),
            "customerId": request.customer_id,
            "amount": request.amount.minor(),
            "currency": request.amount.currency().as_str(),
        });
        let mut attempt = 0;
        loop {
            let call = self
                .request(Method::POST, "/v1/payments/confirm")
                .header("Idempotency-Key", &request.payment_request_id)
                .json(&body);
            let transient = match self.http.exchange(call).await {
                Exchange::NotSent(reason) => reason,
                Exchange::Lost(reason) => {
                    return Ok(ApprovalOutcome::Unknown { reason: Chain(&reason).to_string() });
                }
                Exchange::Answered(status, _) if status.is_server_error() => {
                    Cause::msg(format!("provider answered {status}"))
                }
                Exchange::Answered(status, body) if status.is_client_error() => {
                    let e = business_error(&body);
                    if let Err(reason) = check_error(&e) {
                        return Ok(ApprovalOutcome::Unknown { reason: reason.to_string() });
                    }
                    let code = if e.code.is_empty() { status.as_u16().to_string() } else { e.code };
                    return Ok(ApprovalOutcome::Declined { code, provider_transaction_id: None });
                }
                Exchange::Answered(status, body) => {
                    let answer = serde_json::from_slice::<ApproveResponse>(&body);
                    let broken = answer.as_ref().ok().and_then(|r| {
                        check_transaction(&r.provider_transaction_id)
                            .and_then(|()| check_code("declineCode", r.decline_code.as_deref()))
                            .err()
                    });
                    if let Some(reason) = broken {
                        return Ok(ApprovalOutcome::Unknown { reason: reason.to_string() });
                    }
                    return Ok(match answer {
                        Ok(r) if r.status == "APPROVED" => {
                            ApprovalOutcome::Approved { provider_transaction_id: r.provider_transaction_id }
                        }
                        Ok(r) if r.status == "DECLINED" => ApprovalOutcome::Declined {
                            code: r.decline_code.unwrap_or_else(|| "DECLINED".into()),
                            provider_transaction_id: Some(r.provider_transaction_id),
                        },
                        // An answer we cannot read is not an answer: reconcile.
                        _ => ApprovalOutcome::Unknown { reason: format!("unreadable {status} answer") },
                    });
                }
            };
            if !self.again(&mut attempt, &transient).await {
                return Err(GatewayError::Unavailable(transient));
            }
        }
    }

    async fn lookup(
        &self,
        payment_request_id: &str,
        _scenario: &Scenario,
    ) -> Result<LookupOutcome, GatewayError> {
        let path = format!("/v1/payments/by-request/{payment_request_id}");
        let mut attempt = 0;
        loop {
            let transient = match self.http.exchange(self.request(Method::GET, &path)).await {
                Exchange::NotSent(reason) | Exchange::Lost(reason) => reason,
                Exchange::Answered(StatusCode::NOT_FOUND, _) => return Ok(LookupOutcome::NotFound),
                Exchange::Answered(status, _) if !status.is_success() => {
                    Cause::msg(format!("provider answered {status}"))
                }
                Exchange::Answered(_, body) => match serde_json::from_slice::<LookupResponse>(&body) {
                    // Asking again at once would get the same answer: one inconclusive look-up.
                    Ok(r)
                        if let Err(broken) = check_transaction(&r.provider_transaction_id)
                            .and_then(|()| check_code("declineCode", r.decline_code.as_deref())) =>
                    {
                        return Err(GatewayError::Unavailable(Cause::new(broken)));
                    }
                    Ok(r) if r.status == "APPROVED" => {
                        return Ok(LookupOutcome::Approved {
                            provider_transaction_id: r.provider_transaction_id,
                        });
                    }
                    Ok(r) if r.status == "DECLINED" => {
                        return Ok(LookupOutcome::Declined {
                            provider_transaction_id: Some(r.provider_transaction_id),
                            code: r.decline_code.unwrap_or_else(|| "DECLINED".into()),
                        });
                    }
                    Ok(r) if r.status == "CANCELLED" => {
                        return Ok(LookupOutcome::Cancelled {
                            provider_transaction_id: r.provider_transaction_id,
                            cancels: Vec::new(),
                        });
                    }
                    _ => Cause::msg("unreadable look-up answer"),
                },
            };
            if !self.again(&mut attempt, &transient).await {
                return Err(GatewayError::Unavailable(transient));
            }
        }
    }

    async fn cancel(&self, request: &CancelPayment) -> Result<CancelReceipt, CancelError> {
        let path = format!("/v1/payments/{}/cancel", request.provider_transaction_id);
        let key = &request.idempotency_key;
        let body = json!({ "reason": request.reason, "amount": request.amount.minor() });
        let mut attempt = 0;
        loop {
            let call = self.request(Method::POST, &path).header("Idempotency-Key", key).json(&body);
            let transient = match self.http.exchange(call).await {
                Exchange::NotSent(reason) | Exchange::Lost(reason) => reason,
                Exchange::Answered(status, _) if status.is_server_error() => {
                    Cause::msg(format!("provider answered {status}"))
                }
                Exchange::Answered(status, body) if status.is_client_error() => {
                    let e = business_error(&body);
                    // A refusal we cannot record is no refusal: the outcome stays open.
                    if let Err(reason) = check_error(&e) {
                        return Err(GatewayError::Unavailable(Cause::new(reason)).into());
                    }
                    let code = if e.code.is_empty() { status.as_u16().to_string() } else { e.code };
                    return Err(GatewayError::Rejected { code, message: e.message }.into());
                }
                Exchange::Answered(_, _) => return Ok(CancelReceipt::default()),
            };
            if !self.again(&mut attempt, &transient).await {
                return Err(GatewayError::Unavailable(transient).into());
            }
        }
    }
}
