//! Its `PaymentController`'s paths over our use cases: a member's payments as Spring Data's
//! `Page`, the provider's live record, and the refund (docs/dialects.md).

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::MomoApi;
use super::auth::Member;
use super::envelope::{MomoError, ok, text};
use super::schema::{
    PageableView, PaymentDetail, PaymentPage, PaymentResponse, PgFailure, PgPayment, SortView,
};
use crate::adapters::http::HttpState;
use crate::adapters::jackson::local_date_time;
use crate::application::AppError;
use crate::application::money::member_payments::NOT_OWNER;
use crate::application::money::provider_view::PROVIDER_REFUSED;
use crate::application::money::refunds::RefundOutcome;
use crate::application::ports::{CustomerPayments, MeetingPayment, PaymentSortKey};
use crate::domain::payment::PaymentStatus;

/// Spring Data's defaults: `size` 20, at most 2000 (`max-page-size`).
const DEFAULT_SIZE: u64 = 20;
const MAX_SIZE: u64 = 2000;

/// Its `PaymentStatus` for ours.
pub fn status_of(status: PaymentStatus) -> &'static str {
    match status {
        PaymentStatus::Requested | PaymentStatus::ConfirmationRequired => "PENDING",
        PaymentStatus::Approved | PaymentStatus::RefundPending | PaymentStatus::PartiallyRefunded => {
            "COMPLETED"
        }
        PaymentStatus::Declined => "FAILED",
        PaymentStatus::Refunded | PaymentStatus::Cancelled => "REFUNDED",
    }
}

/// Its statuses, each a name [`status_of`] gives or `EXPIRED` (none of ours).
const ITS_STATUSES: [&str; 5] = ["PENDING", "COMPLETED", "FAILED", "REFUNDED", "EXPIRED"];

/// Ours for its `status` filter: those [`status_of`] names so (`EXPIRED`: none; `REFUNDED`:
/// only gone ones, which a member never sees).
fn statuses_of(name: &str) -> Option<Vec<PaymentStatus>> {
    ITS_STATUSES
        .contains(&name)
        .then(|| PaymentStatus::ALL.iter().copied().filter(|s| status_of(*s) == name).collect())
}

impl MomoApi {
    fn time(&self, at: chrono::DateTime<chrono::Utc>) -> String {
        local_date_time(at.with_timezone(&self.zone).naive_local())
    }

    pub(super) fn fail(&self, status: StatusCode, message: &'static str) -> MomoError {
        MomoError::new(self.zone, status, message)
    }

    /// A use case's error in the platform's words where it has them.
    pub(super) fn app_error(&self, err: AppError) -> MomoError {
        match err {
            AppError::NotFound(_) => self.fail(StatusCode::NOT_FOUND, text::PAYMENT_NOT_FOUND),
            AppError::Conflict { code: "REFUND_NOT_ALLOWED", .. } => {
                self.fail(StatusCode::BAD_REQUEST, text::REFUND_NOT_ALLOWED)
            }
            AppError::Conflict { code: "NOT_SUPPORTED", .. } => {
                self.fail(StatusCode::NOT_FOUND, text::PAYMENT_NOT_FOUND)
            }
            // The provider's refusal is its answer, not an outage (docs/decisions.md).
            AppError::Conflict { code: PROVIDER_REFUSED, .. } => {
                self.fail(StatusCode::CONFLICT, text::PG_REFUSED)
            }
            err if err.is_transient() || matches!(err, AppError::Conflict { .. }) => {
                tracing::warn!(error = %crate::application::error::Chain(&err), "momo dialect: unavailable");
                self.fail(StatusCode::SERVICE_UNAVAILABLE, text::UNAVAILABLE)
            }
            err => {
                tracing::error!(error = %crate::application::error::Chain(&err), "momo dialect: internal error");
                self.fail(StatusCode::INTERNAL_SERVER_ERROR, text::INTERNAL)
            }
        }
    }

    /// Its `PaymentResponseDto`: `detail` by status, without its null fields.
    pub(super) fn payment(&self, p: &MeetingPayment) -> PaymentResponse {
        let payment = &p.payment;
        let status = status_of(payment.status);
        let detail = match status {
            "COMPLETED" => Some(PaymentDetail {
                pg_transaction_id: payment.provider_transaction_id.clone(),
                order_id: Some(payment.payment_request_id.clone()),
                paid_at: payment.approved_at.map(|at| self.time(at)),
                ..PaymentDetail::default()
            }),
            "FAILED" => Some(PaymentDetail {
                fail_reason: payment.decline_code.clone(),
                failed_at: Some(self.time(payment.updated_at)),
                ..PaymentDetail::default()
            }),
            "REFUNDED" => Some(PaymentDetail {
                pg_transaction_id: payment.provider_transaction_id.clone(),
                refunded_at: Some(self.time(payment.updated_at)),
                ..PaymentDetail::default()
            }),
            _ => None,
        };
        PaymentResponse {
            id: payment.number,
            user_id: p.customer_id.parse::<i64>().ok(),
            meeting_id: p.meeting_id.as_deref().and_then(|m| m.parse::<i64>().ok()),
            amount: payment.amount.minor(),
            payment_method: "TOSS",
            status,
            created_at: self.time(payment.created_at),
            detail,
        }
    }
}

/// A path id as the platform reads a `Long`: not one is its bad input (it answers 500).
fn payment_id(api: &MomoApi, text: &str) -> Result<i64, MomoError> {
    text.parse::<i64>().map_err(|_| api.fail(StatusCode::BAD_REQUEST, text::BAD_INPUT))
}

/// A number as Spring Data reads `page` and `size`: what is not an `int` is 0.
fn lenient(value: &str) -> i64 {
    value.trim().parse::<i32>().map_or(0, i64::from)
}

/// `page`, `size`, `sort` and `status` as its `PageableHandlerMethodArgumentResolver` and
/// its controller read them.
fn page_query(
    api: &MomoApi,
    pairs: &[(String, String)],
) -> Result<(CustomerPayments, SortView, u64, u64), MomoError> {
    let last = |name: &str| pairs.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let page = last("page").map_or(0, lenient).max(0) as u64;
    let size = match last("size").map(lenient) {
        None => DEFAULT_SIZE,
        Some(n) if n < 1 => DEFAULT_SIZE,
        Some(n) => (n as u64).min(MAX_SIZE),
    };
    let bad = || api.fail(StatusCode::BAD_REQUEST, text::BAD_INPUT);
    let statuses = match last("status").filter(|s| !s.is_empty()) {
        None => None,
        Some(name) => Some(statuses_of(name).ok_or_else(bad)?),
    };
    let mut sort = Vec::new();
    for (_, spec) in pairs.iter().filter(|(k, _)| k == "sort") {
        let mut parts: Vec<&str> = spec.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
        let direction = match parts.last().map(|d| d.to_ascii_lowercase()) {
            Some(d) if d == "asc" || d == "desc" => {
                parts.pop();
                d
            }
            _ => "asc".to_owned(),
        };
        for property in parts {
            let key = match property {
                "id" => PaymentSortKey::Number,
                "amount" => PaymentSortKey::Amount,
                "createdAt" => PaymentSortKey::CreatedAt,
                "status" => PaymentSortKey::Status,
                _ => return Err(bad()),
            };
            sort.push((key, direction == "desc"));
        }
    }
    let sorted = !sort.is_empty();
    let sort_view = SortView { empty: !sorted, sorted, unsorted: !sorted };
    let query = CustomerPayments {
        statuses,
        sort,
        offset: page.saturating_mul(size),
        limit: size,
        ..CustomerPayments::default()
    };
    Ok((query, sort_view, page, size))
}

/// `GET /payments/me`: the member's payments as Spring Data's `Page`.
#[utoipa::path(
    get,
    path = "/payments/me",
    tag = "momo",
    params(("status" = Option<String>, Query, description = "PENDING, COMPLETED, FAILED, REFUNDED, EXPIRED"), ("page" = Option<String>, Query, description = "From 0"), ("size" = Option<String>, Query, description = "Default 20, at most 2000"), ("sort" = Option<String>, Query, description = "property[,asc|desc]: id, amount, createdAt, status")),
    responses(
        (status = 200, description = "data: Spring Data's Page of its PaymentResponseDto", body = crate::adapters::http::momo::schema::Answer<PaymentPage>),
        (status = 400, description = "입력 값을 다시 확인해주세요.", body = crate::adapters::http::momo::schema::Envelope),
        (status = 401, description = "Its token texts (docs/dialects.md)", body = crate::adapters::http::momo::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn me(
    state: web::Data<HttpState>,
    api: web::Data<MomoApi>,
    member: Member,
    query: web::Query<Vec<(String, String)>>,
) -> Result<HttpResponse, MomoError> {
    let (query, sort, page, size) = page_query(&api, &query)?;
    let (rows, total) = state.member_payments.page(&member.0, query).await.map_err(|e| api.app_error(e))?;
    let pages = total.div_ceil(size);
    let content: Vec<PaymentResponse> = rows.iter().map(|p| api.payment(p)).collect();
    let count = content.len();
    let body = PaymentPage {
        content,
        pageable: PageableView {
            page_number: page,
            page_size: size,
            sort,
            offset: page * size,
            paged: true,
            unpaged: false,
        },
        last: page + 1 >= pages,
        total_elements: total,
        total_pages: pages,
        size,
        number: page,
        sort,
        first: page == 0,
        number_of_elements: count,
        empty: count == 0,
    };
    Ok(ok(api.zone, "내 결제 내역 조회 완료", body))
}

/// `GET /payments/{paymentId}/pg`: the provider's record in its nine fields, owner only.
#[utoipa::path(
    get,
    path = "/payments/{paymentId}/pg",
    tag = "momo",
    params(("paymentId" = i64, Path, description = "The payment's number")),
    responses(
        (status = 200, description = "data: Toss's record in its nine fields", body = crate::adapters::http::momo::schema::Answer<PgPayment>),
        (status = 400, description = "입력 값을 다시 확인해주세요.", body = crate::adapters::http::momo::schema::Envelope),
        (status = 401, description = "Its token texts (docs/dialects.md)", body = crate::adapters::http::momo::schema::Envelope),
        (status = 404, description = "결제 정보를 찾을 수 없습니다. / 사용자를 찾을 수 없습니다.", body = crate::adapters::http::momo::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn pg(
    state: web::Data<HttpState>,
    api: web::Data<MomoApi>,
    member: Member,
    path: web::Path<String>,
) -> Result<HttpResponse, MomoError> {
    let id = payment_id(&api, &path)?;
    let record = match state.member_payments.provider_record(&member.0, id).await {
        Ok(record) => record,
        Err(AppError::Forbidden { code: NOT_OWNER, .. }) => {
            return Err(api.fail(StatusCode::NOT_FOUND, text::USER_NOT_FOUND));
        }
        Err(err) => return Err(api.app_error(err)),
    };
    let data = PgPayment {
        payment_key: record.payment_key,
        order_id: record.order_id,
        order_name: record.order_name,
        status: record.status,
        total_amount: record.total_amount,
        method: record.method,
        approved_at: record.approved_at,
        requested_at: record.requested_at,
        failure: record.failure.map(|f| PgFailure { code: f.code, message: f.message }),
    };
    Ok(ok(api.zone, "PG 결제 조회 완료", data))
}

/// Its `RefundRequestDto`.
#[derive(Debug, Deserialize)]
struct RefundBody {
    reason: Option<String>,
}

/// `POST /payments/{paymentId}/refund {reason}`: what remains of the member's completed
/// payment, refunded; the payment is then gone from `/me` and `/pg`.
#[utoipa::path(
    post,
    path = "/payments/{paymentId}/refund",
    tag = "momo",
    params(("paymentId" = i64, Path, description = "The payment's number")),
    request_body = crate::adapters::http::momo::schema::RefundRequest,
    responses(
        (status = 200, description = "data: the payment, REFUNDED", body = crate::adapters::http::momo::schema::Answer<PaymentResponse>),
        (status = 400, description = "환불 사유는 필수입니다 / 완료된 결제만 환불 가능합니다. / 입력 값을 다시 확인해주세요. (a reason over 500 characters or with control characters)", body = crate::adapters::http::momo::schema::Envelope),
        (status = 401, description = "Its token texts (docs/dialects.md)", body = crate::adapters::http::momo::schema::Envelope),
        (status = 403, description = "환불 권한이 없습니다.", body = crate::adapters::http::momo::schema::Envelope),
        (status = 404, description = "결제 정보를 찾을 수 없습니다.", body = crate::adapters::http::momo::schema::Envelope),
        (status = 415, description = "지원하지 않는 Content-Type입니다. application/json으로 보내 주세요.", body = crate::adapters::http::momo::schema::Envelope),
        (status = 502, description = "환불 처리 실패", body = crate::adapters::http::momo::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn refund(
    state: web::Data<HttpState>,
    api: web::Data<MomoApi>,
    member: Member,
    path: web::Path<String>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, MomoError> {
    let id = payment_id(&api, &path)?;
    super::json_body(&api, &req)?;
    let bad = || api.fail(StatusCode::BAD_REQUEST, text::BAD_INPUT);
    let request: RefundBody = serde_json::from_slice(&body).map_err(|_| bad())?;
    // Its DTO's `@NotBlank`: no reason is no refund (Toss needs one; we never make one up).
    let Some(reason) = request.reason.filter(|r| !r.trim().is_empty()) else {
        return Err(api.fail(StatusCode::BAD_REQUEST, text::REASON_REQUIRED));
    };
    // A reason Toss would refuse, or we could not store: the client's to mend, not retried.
    if reason.chars().count() > 500 || reason.chars().any(crate::domain::text::is_refused_control) {
        return Err(bad());
    }
    let outcome = match state.member_payments.refund(&member.0, id, Some(reason)).await {
        Ok(outcome) => outcome,
        Err(AppError::Forbidden { code: NOT_OWNER, .. }) => {
            return Err(api.fail(StatusCode::FORBIDDEN, text::UNAUTHORIZED_REFUND));
        }
        Err(err) => return Err(api.app_error(err)),
    };
    let record = match outcome {
        RefundOutcome::Refunded(record) => record,
        RefundOutcome::Rejected { .. } => return Err(api.fail(StatusCode::BAD_GATEWAY, text::REFUND_FAILED)),
        RefundOutcome::Pending { .. } => {
            return Err(api.fail(StatusCode::SERVICE_UNAVAILABLE, text::REFUND_PENDING));
        }
    };
    let payment =
        record.payment.clone().ok_or_else(|| api.fail(StatusCode::INTERNAL_SERVER_ERROR, text::INTERNAL))?;
    let view = MeetingPayment {
        payment,
        customer_id: record.order.customer_id.clone(),
        meeting_id: record.order.meeting_id.clone(),
    };
    Ok(ok(api.zone, "환불이 완료되었습니다.", api.payment(&view)))
}
