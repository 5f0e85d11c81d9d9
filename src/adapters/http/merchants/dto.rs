//! What `/api/merchants` reads and answers. A key's secret is in [`CreatedKeyResponse`] only.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::application::merchants::CreatedKey;
use crate::application::merchants::channels::ChannelsView;
use crate::application::merchants::report::DailyReport;
use crate::application::ports::ReportLine;
use crate::domain::merchant::{ApiKey, Membership, Merchant, MerchantChannels, Store, WebhookEndpoint};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateMerchantRequest {
    /// Trimmed and upper-cased; `[A-Z0-9][A-Z0-9_-]*`, at most 50, unique.
    #[schema(example = "ACME", max_length = 50)]
    pub code: String,
    #[schema(max_length = 120)]
    pub name: String,
    /// An IANA zone; `UTC` when absent. The daily report's day.
    #[schema(example = "Asia/Seoul")]
    pub timezone: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MerchantResponse {
    pub id: String,
    pub code: String,
    pub name: String,
    /// `ACTIVE` or `SUSPENDED`.
    pub status: String,
    pub timezone: String,
    pub created_at: DateTime<Utc>,
}

impl From<&Merchant> for MerchantResponse {
    fn from(m: &Merchant) -> Self {
        MerchantResponse {
            id: m.id.to_string(),
            code: m.code.to_string(),
            name: m.name.clone(),
            status: m.status.as_str().to_owned(),
            timezone: m.timezone.clone(),
            created_at: m.created_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateStoreRequest {
    /// As a merchant's code, unique within the merchant.
    #[schema(example = "GANGNAM", max_length = 50)]
    pub code: String,
    #[schema(max_length = 120)]
    pub name: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoreResponse {
    pub id: String,
    pub merchant_id: String,
    pub code: String,
    pub name: String,
    /// `ACTIVE` or `INACTIVE`.
    pub status: String,
    /// The merchant's when the store was registered.
    pub timezone: String,
    pub created_at: DateTime<Utc>,
}

impl From<&Store> for StoreResponse {
    fn from(s: &Store) -> Self {
        StoreResponse {
            id: s.id.to_string(),
            merchant_id: s.merchant_id.to_string(),
            code: s.code.to_string(),
            name: s.name.clone(),
            status: s.status.as_str().to_owned(),
            timezone: s.timezone.clone(),
            created_at: s.created_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetMemberRequest {
    /// `VIEWER` (reads) or `OPERATOR` (also refunds and repairs).
    #[schema(example = "VIEWER")]
    pub role: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberResponse {
    pub merchant_id: String,
    pub subject: String,
    pub role: String,
    pub created_at: DateTime<Utc>,
}

impl From<&Membership> for MemberResponse {
    fn from(m: &Membership) -> Self {
        MemberResponse {
            merchant_id: m.merchant_id.to_string(),
            subject: m.subject.clone(),
            role: m.role.as_str().to_owned(),
            created_at: m.created_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateKeyRequest {
    #[schema(example = "shop server", max_length = 120)]
    pub name: String,
    /// `ORDERS` (places and reads orders), `VIEWER` (reads) or `OPERATOR` (also refunds and
    /// repairs).
    #[schema(example = "ORDERS")]
    pub role: String,
    /// When it stops letting its bearer in; never when absent.
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyResponse {
    pub id: String,
    pub merchant_id: String,
    pub name: String,
    pub role: String,
    /// What follows `mk_` in the key: enough to tell keys apart, nothing to use.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Written at most once a minute.
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<&ApiKey> for ApiKeyResponse {
    fn from(k: &ApiKey) -> Self {
        ApiKeyResponse {
            id: k.id.to_string(),
            merchant_id: k.merchant_id.to_string(),
            name: k.name.clone(),
            role: k.role.as_str().to_owned(),
            prefix: k.prefix.clone(),
            created_at: k.created_at,
            expires_at: k.expires_at,
            last_used_at: k.last_used_at,
            revoked_at: k.revoked_at,
        }
    }
}

/// A key just made: the only answer that holds the key itself.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedKeyResponse {
    #[serde(flatten)]
    pub api_key: ApiKeyResponse,
    /// `mk_<prefix>_<secret>`: send it as `Authorization: Bearer <key>`. Shown this once.
    pub key: String,
}

impl From<&CreatedKey> for CreatedKeyResponse {
    fn from(c: &CreatedKey) -> Self {
        CreatedKeyResponse { api_key: ApiKeyResponse::from(&c.key), key: c.plain.clone() }
    }
}

/// One line of the daily report (minor units).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportLineResponse {
    /// The store; `null` for orders of no store (in `stores`) and in `total`.
    pub store_id: Option<String>,
    pub currency: String,
    pub orders: i64,
    /// What the orders' captured payments took.
    pub gross: i64,
    pub refunds: i64,
    /// `gross - refunds`.
    pub net: i64,
    /// The provider's fees and payouts of those payments, once it has settled them (Toss,
    /// docs/spec.md §13); `null` until then.
    pub fees: Option<i64>,
    pub payouts: Option<i64>,
}

impl From<&ReportLine> for ReportLineResponse {
    fn from(l: &ReportLine) -> Self {
        ReportLineResponse {
            store_id: l.store_id.map(|s| s.to_string()),
            currency: l.currency.clone(),
            orders: l.orders,
            gross: l.gross,
            refunds: l.refunds,
            net: l.gross - l.refunds,
            fees: l.fees,
            payouts: l.payouts,
        }
    }
}

/// `GET /api/merchants/{id}/reports/daily`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DailyReportResponse {
    pub merchant_id: String,
    /// `YYYY-MM-DD`, in the merchant's timezone.
    pub date: String,
    pub timezone: String,
    /// The day's bounds: `[from, to)`.
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub stores: Vec<ReportLineResponse>,
    /// A line per currency, every store together.
    pub total: Vec<ReportLineResponse>,
}

impl From<&DailyReport> for DailyReportResponse {
    fn from(r: &DailyReport) -> Self {
        DailyReportResponse {
            merchant_id: r.merchant.id.to_string(),
            date: r.date.to_string(),
            timezone: r.merchant.timezone.clone(),
            from: r.from,
            to: r.to,
            stores: r.stores.iter().map(ReportLineResponse::from).collect(),
            total: r.total.iter().map(ReportLineResponse::from).collect(),
        }
    }
}

/// A webhook of a merchant's own: its URL and its Standard Webhooks secret.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookEndpointRequest {
    /// `https://…` (it may carry a token: it is kept sealed).
    #[schema(example = "https://hooks.acme.example/settlements", max_length = 2000)]
    pub url: String,
    /// `whsec_<base64>`, 24 bytes or more.
    #[schema(example = "whsec_ZXhhbXBsZS1zZWNyZXQtMDEyMzQ1Njc4OQ==")]
    pub secret: String,
}

impl std::fmt::Debug for WebhookEndpointRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookEndpointRequest(<redacted>)")
    }
}

/// `PUT /api/merchants/{id}/channels`: what is left out goes the deployment's way.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelsRequest {
    pub settlement_webhook: Option<WebhookEndpointRequest>,
    pub notification_webhook: Option<WebhookEndpointRequest>,
}

impl From<ChannelsRequest> for MerchantChannels {
    fn from(r: ChannelsRequest) -> Self {
        let endpoint = |w: WebhookEndpointRequest| WebhookEndpoint { url: w.url, secret: w.secret };
        MerchantChannels {
            settlement_webhook: r.settlement_webhook.map(endpoint),
            notification_webhook: r.notification_webhook.map(endpoint),
        }
    }
}

/// Which of a merchant's channels are its own: never their URLs or secrets.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelsResponse {
    pub settlement_webhook: bool,
    pub notification_webhook: bool,
    /// The id of the key they are sealed under (a digest, not the key).
    pub key_id: Option<String>,
}

impl From<&ChannelsView> for ChannelsResponse {
    fn from(v: &ChannelsView) -> Self {
        ChannelsResponse {
            settlement_webhook: v.settlement_webhook,
            notification_webhook: v.notification_webhook,
            key_id: v.key_id.clone(),
        }
    }
}
