//! `fake-toss`: the fake Toss Payments API on its own, for running the whole service locally
//! (README.md, "Payments through Toss"). Configured by environment:
//! `FAKE_TOSS_BIND` [127.0.0.1:8090], `FAKE_TOSS_SECRET_KEY` [test_sk_fake_0000000000000000],
//! `FAKE_TOSS_WEBHOOK_URL` (where `PAYMENT_STATUS_CHANGED` goes; none: no webhooks),
//! `FAKE_TOSS_FEE_BASIS_POINTS` [330: a 3.3 % fee] and `FAKE_TOSS_PAYOUT_DAYS` [2] (what
//! `GET /v1/settlements` answers).

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let bind = std::env::var("FAKE_TOSS_BIND").unwrap_or_else(|_| "127.0.0.1:8090".into());
    let mut settings = fake_toss::FakeSettings::default();
    if let Ok(key) = std::env::var("FAKE_TOSS_SECRET_KEY") {
        settings.secret_key = key;
    }
    let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(bp) = number("FAKE_TOSS_FEE_BASIS_POINTS").and_then(|v| i64::try_from(v).ok()) {
        settings.settlement.fee_basis_points = bp;
    }
    if let Some(days) = number("FAKE_TOSS_PAYOUT_DAYS") {
        settings.settlement.payout_days = days;
    }
    let fake = fake_toss::start(&bind, settings)?;
    if let Ok(url) = std::env::var("FAKE_TOSS_WEBHOOK_URL") {
        let _ = reqwest::Client::new()
            .post(format!("{}/__fake/webhook", fake.base_url))
            .json(&serde_json::json!({ "url": url }))
            .send()
            .await;
    }
    println!("fake Toss Payments API on {}", fake.base_url);
    tokio::signal::ctrl_c().await?;
    fake.stop().await;
    Ok(())
}
