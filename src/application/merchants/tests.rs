//! The merchant use cases against mock stores: the order of checks, what a key lets in, and
//! what is written when.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::*;
use crate::application::ports::{
    MockClock, MockMerchantAccessStore, MockMerchantDirectory, MockMerchantReports,
};
use crate::domain::merchant::MerchantStatus;

fn at() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn merchant(status: MerchantStatus) -> Merchant {
    let mut m = Merchant::create(MerchantId::new(), "ACME", "Acme", "UTC".into(), at()).unwrap();
    m.status = status;
    m
}

fn service(directory: MockMerchantDirectory, access: MockMerchantAccessStore) -> Merchants {
    let mut clock = MockClock::new();
    clock.expect_now().returning(at);
    Merchants::new(
        Arc::new(directory),
        Arc::new(access),
        Arc::new(MockMerchantReports::new()),
        Arc::new(clock),
    )
}

fn key_actor(merchant: MerchantId, role: KeyRole) -> Actor {
    let mut actor = Actor::customer("key:k").in_merchant(Some(merchant));
    actor.key =
        Some(crate::application::actor::KeyGrant { key_id: ApiKeyId::new(), merchant_id: merchant, role });
    actor
}

fn is_forbidden(result: Result<Authorized, AppError>) -> bool {
    matches!(result, Err(AppError::Forbidden { code: FORBIDDEN, .. }))
}

#[tokio::test]
async fn every_no_under_a_merchant_is_the_same_403() {
    let active = merchant(MerchantStatus::Active);
    let suspended = merchant(MerchantStatus::Suspended);
    let (a, s) = (active.clone(), suspended.clone());
    let mut directory = MockMerchantDirectory::new();
    directory
        .expect_merchant()
        .returning(move |id| Ok([a.clone(), s.clone()].into_iter().find(|m| m.id == id)));
    let mut access = MockMerchantAccessStore::new();
    let (active_id, suspended_id) = (active.id, suspended.id);
    access.expect_member().returning(move |merchant, subject| {
        let role = match subject {
            "viewer" => MemberRole::Viewer,
            "operator" => MemberRole::Operator,
            _ => return Ok(None),
        };
        let known = merchant == active_id || merchant == suspended_id;
        Ok(known.then(|| Membership::new(merchant, subject, role, at()).unwrap()))
    });
    let merchants = service(directory, access);
    let nowhere = MerchantId::new();
    for (actor, id, need, allowed) in [
        (Actor::customer("viewer"), active.id, Need::Read, true),
        (Actor::customer("viewer"), active.id, Need::Write, false),
        (Actor::customer("operator"), active.id, Need::Write, true),
        (Actor::customer("stranger"), active.id, Need::Read, false),
        (Actor::customer("operator"), suspended.id, Need::Read, false),
        (Actor::customer("operator"), nowhere, Need::Read, false),
        (key_actor(active.id, KeyRole::Orders), active.id, Need::PlaceOrders, true),
        (key_actor(active.id, KeyRole::Orders), active.id, Need::Write, false),
        (key_actor(active.id, KeyRole::Operator), nowhere, Need::Read, false),
        (key_actor(suspended.id, KeyRole::Operator), suspended.id, Need::Read, false),
        (Actor::any_order("commerce:alice"), active.id, Need::Read, false),
    ] {
        let result = merchants.authorize(&actor, id, need).await;
        if allowed {
            let auth = result.unwrap_or_else(|e| panic!("{actor:?} {need:?}: {e}"));
            // What it was let in for is what it may do with the proof, no more.
            assert!(auth.require(need).is_ok() && auth.require(Need::Read).is_ok());
            assert_eq!(auth.require(Need::Write).is_ok(), need == Need::Write, "{actor:?} {need:?}");
            let (found, scoped) = (auth.merchant, auth.actor);
            assert_eq!(found.id, id);
            assert_eq!((scoped.merchant, scoped.is_admin, scoped.key), (Some(id), false, actor.key));
        } else {
            assert!(is_forbidden(result), "{actor:?} {need:?} on {id}");
        }
    }
    // The operator: every merchant, suspended too; one that does not exist is a 404.
    let scoped = merchants.authorize(&Actor::admin("ops"), suspended.id, Need::Write).await.unwrap().actor;
    assert!(scoped.is_admin);
    assert!(matches!(
        merchants.authorize(&Actor::admin("ops"), nowhere, Need::Read).await,
        Err(AppError::NotFound("merchant"))
    ));
}

fn stored_key(merchant: MerchantId, issued: &keys::IssuedKey) -> ApiKey {
    ApiKey::create(ApiKeyId::new(), merchant, "server", KeyRole::Orders, issued.prefix.clone(), None, at())
        .unwrap()
}

#[tokio::test]
async fn a_key_lets_in_only_whole_unrevoked_and_unexpired_and_records_its_use_once_a_minute() {
    let issued = keys::issue().unwrap();
    let merchant_id = MerchantId::new();
    let fresh = stored_key(merchant_id, &issued);
    let mut used = fresh.clone();
    used.last_used_at = Some(at() - chrono::Duration::seconds(30));
    let mut revoked = fresh.clone();
    revoked.revoke(at());
    let mut expired = fresh.clone();
    expired.expires_at = Some(at());
    for (stored, lets_in, writes) in
        [(fresh.clone(), true, 1), (used, true, 0), (revoked, false, 0), (expired, false, 0)]
    {
        let mut access = MockMerchantAccessStore::new();
        let (row, hash) = (stored.clone(), issued.hash);
        access.expect_key_by_prefix().returning(move |_| Ok(Some((row.clone(), hash))));
        access
            .expect_update_key()
            .withf(|_, used_at, audit| *used_at == Some(at()) && audit.is_empty())
            .times(writes)
            .returning(|_, _, _| Ok(()));
        let merchants = service(MockMerchantDirectory::new(), access);
        let actor = merchants.authenticate_key(&issued.plain).await.unwrap();
        assert_eq!(actor.is_some(), lets_in, "{stored:?}");
        if let Some(actor) = actor {
            assert_eq!(actor.key.map(|k| (k.merchant_id, k.role)), Some((merchant_id, KeyRole::Orders)));
            assert!(!actor.is_admin);
        }
    }
    // A wrong secret behind the right prefix, and a token of another shape.
    let mut access = MockMerchantAccessStore::new();
    let (row, hash) = (fresh, issued.hash);
    access.expect_key_by_prefix().returning(move |_| Ok(Some((row.clone(), hash))));
    access.expect_update_key().never();
    let merchants = service(MockMerchantDirectory::new(), access);
    let other = keys::issue().unwrap();
    let wrong = format!("mk_{}_{}", issued.prefix, &other.plain[other.plain.len() - 64..]);
    assert!(merchants.authenticate_key(&wrong).await.unwrap().is_none());
    assert!(merchants.authenticate_key("eyJhbGciOiJIUzI1NiJ9.e30.x").await.unwrap().is_none());
}

#[tokio::test]
async fn a_duplicate_code_is_named_and_only_the_operator_manages() {
    let mut directory = MockMerchantDirectory::new();
    directory.expect_insert_merchant().returning(|_, _| Err(RepoError::Conflict));
    let merchants = service(directory, MockMerchantAccessStore::new());
    let new = NewMerchant { code: "acme".into(), name: "Acme".into(), timezone: Some("Asia/Seoul".into()) };
    assert!(matches!(
        merchants.create(&Actor::admin("ops"), new.clone()).await,
        Err(AppError::Conflict { code: DUPLICATE_MERCHANT_CODE, .. })
    ));
    assert!(matches!(
        merchants.create(&Actor::customer("viewer"), new.clone()).await,
        Err(AppError::Forbidden { .. })
    ));
    let bad_zone = NewMerchant { timezone: Some("Mars/Olympus".into()), ..new };
    assert!(matches!(
        merchants.create(&Actor::admin("ops"), bad_zone).await,
        Err(AppError::Validation { ref field, .. }) if field == "timezone"
    ));
}
