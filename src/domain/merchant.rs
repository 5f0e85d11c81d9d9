//! Merchants (docs/spec.md §15): one deployment serves many, each with its stores, its people
//! (memberships) and its servers (API keys); every order is one merchant's. Pure: the codes'
//! rule, a merchant's status and what it allows, a store registered under it, and which role
//! may do what. A merchant's timezone is checked to be an IANA zone by the caller (the domain
//! knows no zone database) and kept as given.

use chrono::{DateTime, Utc};

use crate::domain::ids::{ApiKeyId, MerchantId, StoreId};
use crate::domain::text;

/// The merchant every deployment has (`app migrate` makes it): every row made before
/// merchants, and every unscoped one, is its.
pub const DEFAULT_CODE: &str = "DEFAULT";
/// The `DEFAULT` merchant's id: fixed, so every release and the migration that makes it
/// agree on it.
pub fn default_merchant_id() -> MerchantId {
    MerchantId::from_uuid(uuid::Uuid::from_u128(1))
}

/// The longest merchant or store code.
pub const MAX_CODE: usize = 50;
/// The longest merchant or store name.
pub const MAX_NAME: usize = 120;

spelled!(
    /// Whether a merchant may act: a `SUSPENDED` merchant's members and keys are refused and
    /// it takes no new order; its sagas in flight finish.
    MerchantStatus {
        Active => "ACTIVE",
        Suspended => "SUSPENDED",
    }
);

spelled!(
    /// Whether a store takes orders.
    StoreStatus {
        Active => "ACTIVE",
        Inactive => "INACTIVE",
    }
);

spelled!(
    /// A person's role in one merchant: `VIEWER` reads, `OPERATOR` also writes.
    MemberRole {
        Viewer => "VIEWER",
        Operator => "OPERATOR",
    }
);

spelled!(
    /// An API key's role: `ORDERS` places and reads orders, `VIEWER` reads, `OPERATOR` also
    /// writes.
    KeyRole {
        Orders => "ORDERS",
        Viewer => "VIEWER",
        Operator => "OPERATOR",
    }
);

spelled!(
    /// What is asked of a merchant; an illegal one names itself in the error.
    MerchantAction {
        Suspend => "SUSPEND",
        Resume => "RESUME",
        RegisterStore => "REGISTER_STORE",
    }
);

/// What a caller needs to do under a merchant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Read its orders, stores, reports.
    Read,
    /// Place an order.
    PlaceOrders,
    /// Refund, repair a notification or a settlement.
    Write,
}

impl MemberRole {
    /// Whether a member in this role may do what `need` asks.
    pub fn allows(self, need: Need) -> bool {
        match self {
            MemberRole::Viewer => need == Need::Read,
            MemberRole::Operator => true,
        }
    }
}

impl KeyRole {
    /// Whether a key in this role may do what `need` asks.
    pub fn allows(self, need: Need) -> bool {
        match self {
            KeyRole::Orders => matches!(need, Need::Read | Need::PlaceOrders),
            KeyRole::Viewer => need == Need::Read,
            KeyRole::Operator => true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MerchantError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("a {from} merchant cannot {action}")]
    InvalidTransition { from: MerchantStatus, action: MerchantAction },
}

fn invalid(field: &str, message: impl Into<String>) -> MerchantError {
    MerchantError::Invalid { field: field.to_owned(), message: message.into() }
}

/// A merchant's or a store's code, as the commerce backend normalises it: trimmed,
/// upper-cased, `[A-Z0-9][A-Z0-9_-]*`, at most [`MAX_CODE`] characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Code(String);

impl Code {
    /// `raw` normalised.
    ///
    /// # Errors
    /// `Invalid` naming `field`: empty, too long, or a character outside the rule.
    pub fn parse(field: &str, raw: &str) -> Result<Code, MerchantError> {
        let code = raw.trim().to_ascii_uppercase();
        let mut chars = code.chars();
        let Some(first) = chars.next() else { return Err(invalid(field, "must not be empty")) };
        if code.chars().count() > MAX_CODE {
            return Err(invalid(field, format!("must be at most {MAX_CODE} characters")));
        }
        let alnum = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit();
        if !alnum(first) || !chars.all(|c| alnum(c) || c == '_' || c == '-') {
            return Err(invalid(
                field,
                "must be letters, digits, '_' or '-', starting with a letter or digit",
            ));
        }
        Ok(Code(code))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A name: trimmed, not empty, at most [`MAX_NAME`] characters, no control character.
fn name(field: &str, raw: &str) -> Result<String, MerchantError> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    text::check(field, name, MAX_NAME).map_err(|e| invalid(field, e.to_string()))?;
    Ok(name.to_owned())
}

/// A merchant: its code unique in the deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merchant {
    pub id: MerchantId,
    pub code: Code,
    pub name: String,
    pub status: MerchantStatus,
    /// An IANA zone (checked by the caller): its daily report's day.
    pub timezone: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Optimistic-concurrency version as loaded.
    pub version: i64,
}

impl Merchant {
    /// A new `ACTIVE` merchant.
    ///
    /// # Errors
    /// `Invalid` naming `code` or `name`.
    pub fn create(
        id: MerchantId,
        code: &str,
        merchant_name: &str,
        timezone: String,
        now: DateTime<Utc>,
    ) -> Result<Merchant, MerchantError> {
        Ok(Merchant {
            id,
            code: Code::parse("code", code)?,
            name: name("name", merchant_name)?,
            status: MerchantStatus::Active,
            timezone,
            created_at: now,
            updated_at: now,
            version: 0,
        })
    }

    fn guard(&self, action: MerchantAction, allowed: bool) -> Result<(), MerchantError> {
        if allowed { Ok(()) } else { Err(MerchantError::InvalidTransition { from: self.status, action }) }
    }

    /// Suspended: its members and keys refused, no new order taken.
    ///
    /// # Errors
    /// `InvalidTransition` unless `ACTIVE`, and always for the `DEFAULT` merchant.
    pub fn suspend(&mut self, now: DateTime<Utc>) -> Result<(), MerchantError> {
        // The `DEFAULT` merchant serves every caller that names none: it is never suspended.
        let default = self.code.as_str() == DEFAULT_CODE;
        self.guard(MerchantAction::Suspend, self.status == MerchantStatus::Active && !default)?;
        self.status = MerchantStatus::Suspended;
        self.updated_at = now;
        Ok(())
    }

    /// Active again.
    ///
    /// # Errors
    /// `InvalidTransition` unless `SUSPENDED`.
    pub fn resume(&mut self, now: DateTime<Utc>) -> Result<(), MerchantError> {
        self.guard(MerchantAction::Resume, self.status == MerchantStatus::Suspended)?;
        self.status = MerchantStatus::Active;
        self.updated_at = now;
        Ok(())
    }

    /// Whether it may act at all (its members, its keys, new orders).
    pub fn is_active(&self) -> bool {
        self.status == MerchantStatus::Active
    }

    /// A new `ACTIVE` store of this merchant, in its timezone.
    ///
    /// # Errors
    /// `InvalidTransition` when the merchant is not `ACTIVE`; `Invalid` naming `code` or `name`.
    pub fn register_store(
        &self,
        id: StoreId,
        code: &str,
        store_name: &str,
        now: DateTime<Utc>,
    ) -> Result<Store, MerchantError> {
        self.guard(MerchantAction::RegisterStore, self.is_active())?;
        Ok(Store {
            id,
            merchant_id: self.id,
            code: Code::parse("code", code)?,
            name: name("name", store_name)?,
            status: StoreStatus::Active,
            timezone: self.timezone.clone(),
            created_at: now,
        })
    }
}

/// A store: its code unique within its merchant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    pub id: StoreId,
    pub merchant_id: MerchantId,
    pub code: Code,
    pub name: String,
    pub status: StoreStatus,
    /// The merchant's when the store was registered.
    pub timezone: String,
    pub created_at: DateTime<Utc>,
}

/// A person's role in one merchant: the token whose `sub` is `subject` acts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub merchant_id: MerchantId,
    pub subject: String,
    pub role: MemberRole,
    pub created_at: DateTime<Utc>,
}

impl Membership {
    /// A membership of `subject` (a token's `sub`: not empty, at most 200 characters, no
    /// control character).
    ///
    /// # Errors
    /// `Invalid` naming `subject`.
    pub fn new(
        merchant_id: MerchantId,
        subject: &str,
        role: MemberRole,
        now: DateTime<Utc>,
    ) -> Result<Membership, MerchantError> {
        if subject.trim().is_empty() || subject.trim() != subject {
            return Err(invalid("subject", "must not be empty nor start or end with a space"));
        }
        text::check("subject", subject, MAX_SUBJECT).map_err(|e| invalid("subject", e.to_string()))?;
        Ok(Membership { merchant_id, subject: subject.to_owned(), role, created_at: now })
    }
}

/// The longest subject a membership names.
pub const MAX_SUBJECT: usize = 200;

/// A merchant's API key as stored: everything but the key itself (only its secret's hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: ApiKeyId,
    pub merchant_id: MerchantId,
    pub name: String,
    pub role: KeyRole,
    /// What follows `mk_`: how a presented key finds this row.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Why a stored key does not let its bearer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRefusal {
    Revoked,
    Expired,
}

impl ApiKey {
    /// A key named `key_name` (as a merchant's name is checked).
    ///
    /// # Errors
    /// `Invalid` naming `name`, or `expiresAt` when it is not after `now`.
    pub fn create(
        id: ApiKeyId,
        merchant_id: MerchantId,
        key_name: &str,
        role: KeyRole,
        prefix: String,
        expires_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Result<ApiKey, MerchantError> {
        if expires_at.is_some_and(|at| at <= now) {
            return Err(invalid("expiresAt", "must be in the future"));
        }
        Ok(ApiKey {
            id,
            merchant_id,
            name: name("name", key_name)?,
            role,
            prefix,
            created_at: now,
            expires_at,
            last_used_at: None,
            revoked_at: None,
        })
    }

    /// Whether the key lets its bearer in at `now`.
    ///
    /// # Errors
    /// Why not: revoked, or expired (at its `expiresAt` exactly, it is).
    pub fn usable_at(&self, now: DateTime<Utc>) -> Result<(), KeyRefusal> {
        if self.revoked_at.is_some() {
            return Err(KeyRefusal::Revoked);
        }
        if self.expires_at.is_some_and(|at| at <= now) {
            return Err(KeyRefusal::Expired);
        }
        Ok(())
    }

    /// Revoked at `now`; revoking a revoked key keeps its first time.
    pub fn revoke(&mut self, now: DateTime<Utc>) {
        self.revoked_at.get_or_insert(now);
    }

    /// Whether its `lastUsedAt` is worth writing at `now`: never more than once a minute.
    pub fn use_is_worth_recording(&self, now: DateTime<Utc>) -> bool {
        self.last_used_at.is_none_or(|last| now - last >= chrono::Duration::minutes(1))
    }
}

/// A webhook a merchant's settlements or notifications go to, instead of the deployment's
/// (docs/spec.md §13): its URL (it may carry a token) and its Standard Webhooks secret.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookEndpoint {
    pub url: String,
    /// `whsec_<base64>`.
    pub secret: String,
}

impl std::fmt::Debug for WebhookEndpoint {
    /// Neither the URL (a token may be in it) nor the secret reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookEndpoint(<redacted>)")
    }
}

/// The longest channel URL.
pub const MAX_URL: usize = 2000;

impl WebhookEndpoint {
    fn check(&self, field: &str) -> Result<(), MerchantError> {
        let url_field = format!("{field}.url");
        let scheme = self.url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        let host = self.url.split_once("://").map(|(_, rest)| rest).unwrap_or_default();
        if !matches!(scheme.as_deref(), Some("https" | "http")) || host.is_empty() {
            return Err(invalid(&url_field, "must be an http:// or https:// URL"));
        }
        text::check(&url_field, &self.url, MAX_URL).map_err(|e| invalid(&url_field, e.to_string()))?;
        let secret = self.secret.strip_prefix("whsec_").unwrap_or_default();
        if secret.len() < 24 || !secret.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b)) {
            return Err(invalid(
                &format!("{field}.secret"),
                "must be whsec_ followed by base64 (24 bytes or more)",
            ));
        }
        Ok(())
    }
}

/// A merchant's own channels (docs/spec.md §15); what it leaves unset goes the
/// deployment's way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MerchantChannels {
    pub settlement_webhook: Option<WebhookEndpoint>,
    pub notification_webhook: Option<WebhookEndpoint>,
}

impl MerchantChannels {
    /// # Errors
    /// `Invalid` naming the field (`settlementWebhook.url`, `notificationWebhook.secret`, …).
    pub fn check(&self) -> Result<(), MerchantError> {
        if let Some(w) = &self.settlement_webhook {
            w.check("settlementWebhook")?;
        }
        if let Some(w) = &self.notification_webhook {
            w.check("notificationWebhook")?;
        }
        Ok(())
    }

    /// Whether it sets nothing (the deployment's channels for everything).
    pub fn is_empty(&self) -> bool {
        self.settlement_webhook.is_none() && self.notification_webhook.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn merchant() -> Merchant {
        Merchant::create(MerchantId::new(), " acme-01 ", "Acme", "Asia/Seoul".into(), now()).unwrap()
    }

    #[test]
    fn codes_are_normalised_as_the_commerce_backend_does() {
        for (raw, code) in [(" acme ", "ACME"), ("a_b-1", "A_B-1"), ("9LIVES", "9LIVES")] {
            assert_eq!(Code::parse("code", raw).unwrap().as_str(), code, "{raw:?}");
        }
        for raw in ["", "   ", "-acme", "_acme", "ac me", "acmé", "a.b", &"A".repeat(MAX_CODE + 1)] {
            assert!(Code::parse("code", raw).is_err(), "{raw:?}");
        }
        assert!(Code::parse("code", &"A".repeat(MAX_CODE)).is_ok());
    }

    #[test]
    fn a_merchant_is_created_active_with_a_clean_name() {
        let m = merchant();
        assert_eq!((m.code.as_str(), m.name.as_str(), m.status), ("ACME-01", "Acme", MerchantStatus::Active));
        for bad in ["", "  ", "a\u{0}b", &"n".repeat(MAX_NAME + 1)] {
            let err = Merchant::create(MerchantId::new(), "X", bad, "UTC".into(), now()).unwrap_err();
            assert!(
                matches!(err, MerchantError::Invalid { ref field, .. } if field == "name"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn transition_table() {
        use MerchantAction::*;
        use MerchantStatus::*;
        for (from, action, to) in [
            (Active, Suspend, Some(Suspended)),
            (Suspended, Suspend, None),
            (Suspended, Resume, Some(Active)),
            (Active, Resume, None),
            (Active, RegisterStore, Some(Active)),
            (Suspended, RegisterStore, None),
        ] {
            let mut m = merchant();
            m.status = from;
            let result = match action {
                Suspend => m.suspend(now()),
                Resume => m.resume(now()),
                RegisterStore => m.register_store(StoreId::new(), "s1", "Store", now()).map(|_| ()),
            };
            match to {
                Some(to) => {
                    assert!(result.is_ok(), "{from} {action}");
                    assert_eq!(m.status, to, "{from} {action}");
                }
                None => {
                    assert_eq!(
                        result,
                        Err(MerchantError::InvalidTransition { from, action }),
                        "{from} {action}"
                    );
                    assert_eq!(m.status, from, "a refused action changes nothing");
                }
            }
        }
    }

    #[test]
    fn the_default_merchant_is_never_suspended() {
        let mut m =
            Merchant::create(default_merchant_id(), DEFAULT_CODE, "Default", "UTC".into(), now()).unwrap();
        assert_eq!(
            m.suspend(now()),
            Err(MerchantError::InvalidTransition {
                from: MerchantStatus::Active,
                action: MerchantAction::Suspend
            })
        );
        assert!(m.is_active());
    }

    #[test]
    fn a_store_takes_its_merchants_timezone_and_code_rule() {
        let m = merchant();
        let store = m.register_store(StoreId::new(), " gangnam ", " Gangnam ", now()).unwrap();
        assert_eq!(
            (store.merchant_id, store.code.as_str(), store.name.as_str(), store.timezone.as_str()),
            (m.id, "GANGNAM", "Gangnam", "Asia/Seoul")
        );
        assert_eq!(store.status, StoreStatus::Active);
        assert!(m.register_store(StoreId::new(), "bad code", "x", now()).is_err());
    }

    #[test]
    fn what_each_role_may_do() {
        use Need::*;
        for (need, viewer, operator) in [(Read, true, true), (PlaceOrders, false, true), (Write, false, true)]
        {
            assert_eq!(MemberRole::Viewer.allows(need), viewer, "member viewer {need:?}");
            assert_eq!(MemberRole::Operator.allows(need), operator, "member operator {need:?}");
        }
        for (need, orders, viewer, operator) in
            [(Read, true, true, true), (PlaceOrders, true, false, true), (Write, false, false, true)]
        {
            assert_eq!(KeyRole::Orders.allows(need), orders, "key orders {need:?}");
            assert_eq!(KeyRole::Viewer.allows(need), viewer, "key viewer {need:?}");
            assert_eq!(KeyRole::Operator.allows(need), operator, "key operator {need:?}");
        }
    }

    #[test]
    fn a_key_lets_in_until_revoked_or_expired() {
        let at = now();
        let key = |expires: Option<i64>| {
            ApiKey::create(
                ApiKeyId::new(),
                MerchantId::new(),
                "server",
                KeyRole::Orders,
                "abc".into(),
                expires.map(|s| at + chrono::Duration::seconds(s)),
                at,
            )
        };
        assert!(key(Some(0)).is_err(), "an expiry that is already past");
        let mut k = key(Some(60)).unwrap();
        assert_eq!(k.usable_at(at), Ok(()));
        assert_eq!(k.usable_at(at + chrono::Duration::seconds(59)), Ok(()));
        assert_eq!(k.usable_at(at + chrono::Duration::seconds(60)), Err(KeyRefusal::Expired));
        k.revoke(at);
        k.revoke(at + chrono::Duration::seconds(5));
        assert_eq!(k.revoked_at, Some(at), "the first revocation counts");
        assert_eq!(k.usable_at(at), Err(KeyRefusal::Revoked));
        let mut k = key(None).unwrap();
        assert!(k.use_is_worth_recording(at));
        k.last_used_at = Some(at);
        assert!(!k.use_is_worth_recording(at + chrono::Duration::seconds(59)));
        assert!(k.use_is_worth_recording(at + chrono::Duration::seconds(60)));
    }

    #[test]
    fn a_membership_names_a_clean_subject() {
        for bad in ["", " a", "a ", "a\u{7}", &"s".repeat(MAX_SUBJECT + 1)] {
            assert!(Membership::new(MerchantId::new(), bad, MemberRole::Viewer, now()).is_err(), "{bad:?}");
        }
        assert!(Membership::new(MerchantId::new(), "auth0|42", MemberRole::Operator, now()).is_ok());
    }

    #[test]
    fn the_default_merchant_has_a_fixed_id() {
        assert_eq!(default_merchant_id().to_string(), "00000000-0000-0000-0000-000000000001");
    }

    #[test]
    fn a_channel_is_a_web_url_and_a_standard_webhooks_secret() {
        let endpoint = |url: &str, secret: &str| MerchantChannels {
            settlement_webhook: Some(WebhookEndpoint { url: url.into(), secret: secret.into() }),
            notification_webhook: None,
        };
        let good = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        assert!(endpoint("https://hooks.example/settle?token=t", good).check().is_ok());
        for (url, secret, field) in [
            ("ftp://hooks.example", good, "settlementWebhook.url"),
            ("https://", good, "settlementWebhook.url"),
            ("hooks.example", good, "settlementWebhook.url"),
            ("https://hooks.example", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "settlementWebhook.secret"),
            ("https://hooks.example", "whsec_short", "settlementWebhook.secret"),
        ] {
            let err = endpoint(url, secret).check().unwrap_err();
            assert!(
                matches!(err, MerchantError::Invalid { field: ref f, .. } if f == field),
                "{url} {secret}: {err}"
            );
        }
        assert!(!format!("{:?}", endpoint("https://hooks.example/?token=t", good)).contains("token"));
        assert!(MerchantChannels::default().is_empty());
    }
}
