//! Signed webhooks (docs/spec.md §13), as the Standard Webhooks specification
//! (standardwebhooks.com) defines them: a `POST` of a JSON body with `webhook-id` (the
//! receiver's idempotency key: the same on every retry), `webhook-timestamp` (Unix seconds)
//! and `webhook-signature`, `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>` for
//! each configured secret, space-separated (several during a rotation). Secrets are
//! `whsec_<base64>` and never logged, put in an error or sent. Redirects are not followed.
//!
//! Answers: 2xx delivered; 408, 429 (its `Retry-After` kept), 5xx, a timeout or a refused
//! connection are transient (the same call again later, same id); any other status is a
//! refusal.

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use sha2::Sha256;

use super::SetupError;
use crate::adapters::Secret;
use crate::application::error::Chain;
use crate::application::ports::{
    GatewayError, NotificationRequest, Notifier, NotifyFailure, SettlementGateway, SettlementOutcome,
    SettlementRequest,
};
use crate::domain::notification::FailurePolicy;

/// One signing key, decoded from `whsec_<base64>`.
#[derive(Clone)]
pub struct WebhookSecret(Vec<u8>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

impl WebhookSecret {
    /// Reads `whsec_<base64>` (the prefix optional, as the specification's libraries take it).
    ///
    /// # Errors
    /// Not base64, or empty; the message never repeats the secret.
    pub fn parse(text: &str) -> Result<Self, SetupError> {
        let encoded = text.strip_prefix("whsec_").unwrap_or(text);
        let key = STANDARD
            .decode(encoded)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(encoded))
            .map_err(|_| SetupError("a secret is not whsec_ followed by base64".to_owned()))?;
        if key.len() < 16 {
            return Err(SetupError("a secret must be at least 16 bytes (24 to 64 recommended)".into()));
        }
        Ok(WebhookSecret(key))
    }
}

/// The `webhook-signature` header: one `v1,<signature>` per secret, space-separated.
pub fn signature(secrets: &[WebhookSecret], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| {
            // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
            let mut mac = <Hmac<Sha256>>::new_from_slice(&secret.0).expect("HMAC accepts any key length");
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp.to_string().as_bytes());
            mac.update(b".");
            mac.update(body);
            format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where and how one step's webhooks go (`<step>.webhook.*`).
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// A secret: it may carry a token.
    pub url: Secret,
    pub secrets: Vec<WebhookSecret>,
    pub timeout: Duration,
}

/// What a delivery amounted to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Delivered,
    /// Try again later with the same id; the receiver's `Retry-After`, when it gave one.
    Transient {
        reason: String,
        retry_after: Option<Duration>,
    },
    /// The receiver refused it (a 4xx other than 408 and 429).
    Refused {
        reason: String,
    },
}

/// Posts signed webhooks to one URL.
pub struct WebhookClient {
    client: reqwest::Client,
    settings: WebhookSettings,
}

impl WebhookClient {
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(settings: WebhookSettings) -> Result<Self, SetupError> {
        let client = crate::adapters::http_client::builder()
            .connect_timeout(settings.timeout)
            .timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| SetupError(format!("cannot build the webhook client: {e}")))?;
        Ok(WebhookClient { client, settings })
    }

    /// Delivers `body` under `id`, signed with every secret.
    pub async fn deliver(&self, id: &str, body: Vec<u8>) -> Delivery {
        let timestamp = chrono::Utc::now().timestamp();
        let signature = signature(&self.settings.secrets, id, timestamp, &body);
        let sent = self
            .client
            .post(self.settings.url.expose())
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            // Errors without the URL: it may carry a token.
            Err(e) => {
                let what = if e.is_connect() {
                    "cannot connect"
                } else if e.is_timeout() {
                    "timed out"
                } else {
                    "no complete answer"
                };
                return Delivery::Transient {
                    reason: format!("{what}: {}", Chain(&e.without_url())),
                    retry_after: None,
                };
            }
        };
        let status = response.status();
        if status.is_success() {
            return Delivery::Delivered;
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let reason = format!("the receiver answered {}", status.as_u16());
        match status {
            StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => {
                Delivery::Transient { reason, retry_after }
            }
            s if s.is_server_error() => Delivery::Transient { reason, retry_after },
            _ => Delivery::Refused { reason },
        }
    }
}

/// The notification step over a signed webhook (`notification.channel = webhook`): the
/// notification's id is the `webhook-id`, so every attempt of one notification is one
/// message to the receiver.
pub struct WebhookNotifier {
    client: WebhookClient,
}

impl WebhookNotifier {
    pub fn new(client: WebhookClient) -> Self {
        WebhookNotifier { client }
    }
}

#[async_trait]
impl Notifier for WebhookNotifier {
    async fn send(&self, request: &NotificationRequest) -> Result<(), NotifyFailure> {
        let body = serde_json::json!({
            "type": request.event_type,
            "notificationId": request.notification_id.to_string(),
            "orderId": request.order_id.to_string(),
            "orderNumber": request.order_number,
            "customerId": request.customer_id,
            "status": request.order_status,
            "amount": request.amount.minor(),
            "currency": request.amount.currency().as_str(),
            "occurredAt": crate::application::envelopes::timestamp(chrono::Utc::now()),
        });
        match self.client.deliver(&request.notification_id.to_string(), body.to_string().into_bytes()).await {
            Delivery::Delivered => Ok(()),
            Delivery::Transient { reason, retry_after } => {
                Err(NotifyFailure { policy: FailurePolicy::AutoRetry, reason, retry_after })
            }
            Delivery::Refused { reason } => {
                Err(NotifyFailure { policy: FailurePolicy::ManualIntervention, reason, retry_after: None })
            }
        }
    }
}

/// The settlement step over a signed webhook (`settlement.channel = webhook`): the
/// settlement's id is the `webhook-id`. Only a refusal fails the settlement (and compensates);
/// a receiver that cannot be reached is tried again, then waits for an operator.
pub struct WebhookSettlements {
    client: WebhookClient,
}

impl WebhookSettlements {
    pub fn new(client: WebhookClient) -> Self {
        WebhookSettlements { client }
    }
}

#[async_trait]
impl SettlementGateway for WebhookSettlements {
    async fn settle(&self, request: &SettlementRequest) -> Result<SettlementOutcome, GatewayError> {
        let timestamp = crate::application::envelopes::timestamp;
        let body = serde_json::json!({
            "type": "settlement.requested",
            "settlementId": request.settlement_id.to_string(),
            "orderId": request.order_id.to_string(),
            "orderNumber": request.order_number,
            "amount": request.amount.minor(),
            "currency": request.amount.currency().as_str(),
            "paymentKey": request.payment_key,
            "approvedAt": request.approved_at.map(timestamp),
            "occurredAt": timestamp(chrono::Utc::now()),
        });
        Ok(
            match self.client.deliver(&request.settlement_id.to_string(), body.to_string().into_bytes()).await
            {
                Delivery::Delivered => SettlementOutcome::Succeeded,
                Delivery::Transient { reason, retry_after } => {
                    SettlementOutcome::Retry { reason, retry_after }
                }
                Delivery::Refused { reason } => SettlementOutcome::Failed { reason },
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks specification's own example (its libraries' test vector).
    #[test]
    fn the_specifications_example_is_signed_as_it_publishes() {
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signed =
            signature(&[secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, br#"{"test": 2432232314}"#);
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_rotation_signs_with_every_secret_and_a_secret_never_shows() {
        let one = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let two = WebhookSecret::parse("whsec_c2Vjb25kLXNlY3JldC0wMTIzNDU2Nzg5").unwrap();
        let signed = signature(&[one.clone(), two], "msg_1", 1, b"{}");
        let parts: Vec<&str> = signed.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| p.starts_with("v1,")));
        assert_ne!(parts[0], parts[1]);
        assert!(!format!("{one:?}").contains("MfKQ"));
        assert!(WebhookSecret::parse("whsec_!!!").unwrap_err().0.contains("base64"));
        assert!(WebhookSecret::parse("whsec_c2hvcnQ=").is_err(), "too short");
    }
}
