//! `GET /api/admin/reconciliation/findings?date=`: one day of the provider's ledger against
//! our books (docs/spec.md §10), for operators.

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
    /// `MISSING_HERE` | `MISSING_AT_PROVIDER` | `AMOUNT_MISMATCH` | `STATUS_MISMATCH`
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
    let text = query_param("date", query.into_inner().date, 10)?
        .ok_or_else(|| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "date", "required, YYYY-MM-DD"))?;
    let day = chrono::NaiveDate::parse_from_str(&text, "%Y-%m-%d")
        .map_err(|_| ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, "date", "must be YYYY-MM-DD"))?;
    let found = state.ledger.findings(&admin.0, day).await?;
    Ok(HttpResponse::Ok().json(FindingsResponse {
        date: day.format("%Y-%m-%d").to_string(),
        run: found.as_ref().map(|(run, _)| LedgerRunResponse::from(run)),
        findings: found.map(|(_, f)| f.iter().map(FindingResponse::from).collect()).unwrap_or_default(),
    }))
}
