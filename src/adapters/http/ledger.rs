//! `GET /api/admin/reconciliation/findings?date=`: one day of the provider's ledger against
//! our books (docs/spec.md §10), and `GET /api/admin/payouts?date=`: what the provider pays
//! out that day (§13), for operators.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Admin;
use super::problem::{ApiError, Problem};
use super::{HttpState, query_param};
use crate::application::envelopes::timestamp;
use crate::application::ports::LedgerRun;
use crate::domain::ledger::Finding;
use crate::domain::payout::{PaymentPayout, Payout};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FindingsQuery {
    /// The provider's day, `YYYY-MM-DD` (in its zone).
    pub date: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerRunResponse {
    pub started_at: String,
    pub finished_at: String,
    /// The provider's transactions that day.
    pub transactions: i64,
    /// No findings.
    pub clean: bool,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FindingResponse {
    /// `MISSING_HERE` | `MISSING_AT_PROVIDER` | `AMOUNT_MISMATCH` | `STATUS_MISMATCH` |
    /// `UNREADABLE` | `PAYOUT_MISMATCH` | `SETTLEMENT_MISSING` | `SETTLEMENT_UNKNOWN`
    pub kind: &'static str,
    pub payment_key: Option<String>,
    pub order_id: Option<String>,
    pub transaction_key: Option<String>,
    /// What we have, e.g. `APPROVED 30000`.
    pub ours: Option<String>,
    /// What the provider has, e.g. `DONE 30000`.
    pub theirs: Option<String>,
    pub detail: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FindingsResponse {
    pub date: String,
    /// `null`: the day was never reconciled.
    pub run: Option<LedgerRunResponse>,
    pub findings: Vec<FindingResponse>,
}

impl From<&LedgerRun> for LedgerRunResponse {
    fn from(r: &LedgerRun) -> Self {
        LedgerRunResponse {
            started_at: timestamp(r.started_at),
            finished_at: timestamp(r.finished_at),
            transactions: r.transactions,
            clean: r.findings == 0,
        }
    }
}

impl From<&Finding> for FindingResponse {
    fn from(f: &Finding) -> Self {
        FindingResponse {
            kind: f.kind.as_str(),
            payment_key: f.payment_key.clone(),
            order_id: f.order_id.clone(),
            transaction_key: f.transaction_key.clone(),
            ours: f.ours.clone(),
            theirs: f.theirs.clone(),
            detail: f.detail.clone(),
        }
    }
}

/// The findings of one day's reconciliation against the provider's ledger, and its run.
#[utoipa::path(
    get,
    path = "/api/admin/reconciliation/findings",
    tag = "admin",
    params(FindingsQuery),
    responses(
        (status = 200, body = FindingsResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "date missing or not YYYY-MM-DD", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn findings(
    state: web::Data<HttpState>,
    admin: Admin,
    query: web::Query<FindingsQuery>,
) -> Result<HttpResponse, ApiError> {
    let day = day_param(query.into_inner().date)?;
    let found = state.ledger.findings(&admin.0, day).await?;
    Ok(HttpResponse::Ok().json(FindingsResponse {
        date: day.format("%Y-%m-%d").to_string(),
        run: found.as_ref().map(|(run, _)| LedgerRunResponse::from(run)),
        findings: found.map(|(_, f)| f.iter().map(FindingResponse::from).collect()).unwrap_or_default(),
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PayoutsQuery {
    /// The day the provider pays out, `YYYY-MM-DD` (`paidOutDate`).
    pub date: Option<String>,
}

/// One settlement row recorded against a transaction of ours.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PayoutRowResponse {
    pub payment_id: String,
    /// The provider's key of the transaction settled, if it gave one.
    pub transaction_key: Option<String>,
    /// Signed: a cancel is negative.
    pub amount: i64,
    pub fee: i64,
    pub supply_amount: Option<i64>,
    pub vat: Option<i64>,
    pub pay_out_amount: i64,
    pub sold_date: String,
    pub paid_out_date: String,
}

/// What the provider pays out on one day: what the bank should receive.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PayoutsResponse {
    pub date: String,
    pub count: usize,
    pub amount: i64,
    pub fee: i64,
    pub vat: i64,
    pub pay_out_amount: i64,
    pub rows: Vec<PayoutRowResponse>,
    /// `false` when the payment provider keeps no ledger (mock, external): payouts are read
    /// from Toss and need `payment.provider = toss`; nothing is ever listed.
    pub provider_ledger: bool,
}

/// A payment's payouts netted: its fee and what the provider pays out for it, once settled.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayoutResponse {
    pub fee: i64,
    pub pay_out_amount: i64,
    pub sold_date: String,
    pub paid_out_date: String,
}

impl From<&PaymentPayout> for PaymentPayoutResponse {
    fn from(p: &PaymentPayout) -> Self {
        PaymentPayoutResponse {
            fee: p.fee,
            pay_out_amount: p.pay_out_amount,
            sold_date: p.sold_date.format("%Y-%m-%d").to_string(),
            paid_out_date: p.paid_out_date.format("%Y-%m-%d").to_string(),
        }
    }
}

impl From<&Payout> for PayoutRowResponse {
    fn from(p: &Payout) -> Self {
        PayoutRowResponse {
            payment_id: p.payment_id.to_string(),
            transaction_key: p.transaction_key.clone(),
            amount: p.amount,
            fee: p.fee,
            supply_amount: p.supply_amount,
            vat: p.vat,
            pay_out_amount: p.pay_out_amount,
            sold_date: p.sold_date.format("%Y-%m-%d").to_string(),
            paid_out_date: p.paid_out_date.format("%Y-%m-%d").to_string(),
        }
    }
}

fn day_param(text: Option<String>) -> Result<chrono::NaiveDate, ApiError> {
    let text = query_param("date", text, 10)?
        .ok_or_else(|| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "date", "required, YYYY-MM-DD"))?;
    chrono::NaiveDate::parse_from_str(&text, "%Y-%m-%d")
        .map_err(|_| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "date", "must be YYYY-MM-DD"))
}

/// What the provider pays out on one day (by `paidOutDate`, docs/spec.md §13): the sums
/// and every row — what the bank should receive that day.
#[utoipa::path(
    get,
    path = "/api/admin/payouts",
    tag = "admin",
    params(PayoutsQuery),
    responses(
        (status = 200, body = PayoutsResponse),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "date missing or not YYYY-MM-DD", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn payouts(
    state: web::Data<HttpState>,
    admin: Admin,
    query: web::Query<PayoutsQuery>,
) -> Result<HttpResponse, ApiError> {
    let day = day_param(query.into_inner().date)?;
    let paid = state.ledger.payouts_on(&admin.0, day).await?;
    Ok(HttpResponse::Ok().json(PayoutsResponse {
        date: day.format("%Y-%m-%d").to_string(),
        count: paid.rows.len(),
        amount: paid.amount,
        fee: paid.fee,
        vat: paid.vat,
        pay_out_amount: paid.pay_out_amount,
        rows: paid.rows.iter().map(PayoutRowResponse::from).collect(),
        provider_ledger: paid.provider_ledger,
    }))
}
