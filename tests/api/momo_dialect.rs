//! The meetup platform's payment endpoints (docs/spec.md §14, docs/dialects.md), as its
//! frontend reads them: its `ApiResponse` `{success, message, data, timestamp}`, its
//! `PaymentResponseDto`s in Spring Data's `Page`, its Korean texts (`PaymentErrorCode`, its
//! `GlobalExceptionHandler`, `JwtFilter` and `JwtTokenProvider`), its access tokens from the
//! bearer header or its cookie, against the real listener on both databases; the provider's
//! record through the fake Toss over HTTP.

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::StatusCode;
use serde_json::{Value, json};

use orchestrator::application::Actor;
use orchestrator::application::orchestration::PlaceOrder;
use orchestrator::application::ports::{OrderRecord, Scenario};
use orchestrator::domain::order::OrderSource;

use crate::helpers::{Backend, TestApp};
use crate::on_both_databases;

/// The platform's `jwt.secret.key` (32 bytes or more).
const SECRET: &str = "momo-platform-jwt-secret-key-for-tests-2026";

fn dialect_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("APP__HTTP__DIALECTS__MOMO__BIND", "127.0.0.1:0"),
        ("APP__HTTP__DIALECTS__MOMO__JWT_SECRET", SECRET),
    ]
}

/// An access token as its `JwtTokenProvider.createToken("access", userId, role, 10 min)`.
fn access(user: i64) -> String {
    token(json!({ "sub": user.to_string(), "category": "access", "role": "USER" }), 600)
}

fn token(mut claims: Value, exp_in: i64) -> String {
    let now = chrono::Utc::now().timestamp();
    claims["iat"] = json!(now);
    claims["exp"] = json!(now + exp_in);
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// A member's registration for a meeting, charged as the meeting consumer does.
async fn register(app: &TestApp, user: i64, meeting: i64, scenario: &str) -> OrderRecord {
    let command = PlaceOrder {
        scenario: Scenario::parse(scenario).unwrap(),
        ..PlaceOrder::meeting(OrderSource::Meeting, &meeting.to_string(), &user.to_string(), "KRW", 15000)
    };
    app.services.orchestrator.place_order(&Actor::system("test-meeting"), command).await.unwrap()
}

/// Its frontend: a token, its paths, its envelope read back.
struct Frontend<'a> {
    app: &'a TestApp,
    base: String,
    token: String,
}

impl Frontend<'_> {
    async fn call(&self, method: &str, path: &str, body: Option<&str>) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.base);
        let mut request = match method {
            "GET" => self.app.client.get(url),
            "DELETE" => self.app.client.delete(url),
            _ => self.app.client.post(url),
        }
        .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body.to_owned());
        }
        let res = request.send().await.unwrap();
        let status = res.status();
        let body: Value = res.json().await.unwrap();
        envelope(&body);
        (status, body)
    }

    async fn data(&self, method: &str, path: &str, body: Option<&str>, message: &str) -> Value {
        let (status, body) = self.call(method, path, body).await;
        assert_eq!(status, StatusCode::OK, "{method} {path}: {body}");
        assert_eq!((&body["success"], &body["message"]), (&json!(true), &json!(message)), "{body}");
        body["data"].clone()
    }

    /// A key-in answered with the member's payment: `200` once Toss took the charge, `202`
    /// (`PENDING`) while it has not said yet.
    async fn keyed_in(&self, body: Option<&str>) -> Value {
        let (status, answer) = self.call("POST", "/payments/test/keyin", body).await;
        let data = answer["data"].clone();
        match status {
            StatusCode::OK => {
                assert_eq!(answer["message"], json!("테스트 키인 결제가 완료되었습니다."), "{answer}")
            }
            StatusCode::ACCEPTED => {
                assert_eq!(answer["message"], json!("결제 결과를 확인하고 있습니다."), "{answer}");
                assert_eq!(data["status"], json!("PENDING"), "{answer}");
            }
            other => panic!("key-in answered {other}: {answer}"),
        }
        assert_eq!(answer["success"], json!(true), "{answer}");
        data
    }

    /// The member's payment `payment` once Toss settled it (reconciliation runs in the
    /// workers), as `/me` lists it.
    async fn settled(&self, payment: &Value) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (_, page) = self.call("GET", "/payments/me?size=2000", None).await;
            let found = page["data"]["content"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["id"] == payment["id"])
                .cloned()
                .unwrap_or(Value::Null);
            if found["status"] != json!("PENDING") {
                return found;
            }
            assert!(std::time::Instant::now() < deadline, "the key-in never settled: {found}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    async fn refused(&self, method: &str, path: &str, body: Option<&str>) -> (StatusCode, String) {
        let (status, body) = self.call(method, path, body).await;
        assert_eq!((&body["success"], &body["data"]), (&json!(false), &Value::Null), "{body}");
        (status, body["message"].as_str().unwrap().to_owned())
    }
}

/// Its `ApiResponse`: these four fields, `timestamp` a `LocalDateTime` of Seoul's clock now.
fn envelope(body: &Value) {
    let mut keys: Vec<&String> = body.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["data", "message", "success", "timestamp"], "{body}");
    let stamp = body["timestamp"].as_str().unwrap();
    let (main, _) = stamp.split_once('.').unwrap_or((stamp, ""));
    let at = chrono::NaiveDateTime::parse_from_str(main, "%Y-%m-%dT%H:%M:%S").expect("a LocalDateTime");
    let seoul = chrono::Utc::now().with_timezone(&chrono_tz::Asia::Seoul).naive_local();
    assert!((seoul - at).num_seconds().abs() < 60, "Seoul's wall time: {stamp}");
}

async fn its_tokens_and_error_texts(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, &dialect_env()).await else { return };
    let base = app.momo.clone().expect("the dialect's listener is on");
    let me = format!("{base}/payments/me");
    let read = |res: reqwest::Response| async move {
        let status = res.status();
        let body: Value = res.json().await.unwrap();
        envelope(&body);
        assert_eq!((&body["success"], &body["data"]), (&json!(false), &Value::Null), "{body}");
        (status, body["message"].as_str().unwrap().to_owned())
    };
    let unauthorized = |text: &str| (StatusCode::UNAUTHORIZED, text.to_owned());
    // Its entry point, then each of its JwtTokenProvider's texts.
    assert_eq!(
        read(app.client.get(&me).send().await.unwrap()).await,
        unauthorized("인증이 필요합니다. 로그인해 주세요.")
    );
    let basic = app.client.get(&me).header("authorization", "Basic abc").send().await.unwrap();
    assert_eq!(read(basic).await, unauthorized("인증이 필요합니다. 로그인해 주세요."));
    let expired = token(json!({ "sub": "7", "category": "access" }), -5);
    let refresh = token(json!({ "sub": "7", "category": "refresh" }), 600);
    let forged = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({ "sub": "7", "category": "access", "exp": chrono::Utc::now().timestamp() + 600 }),
        &EncodingKey::from_secret(b"someone-elses-secret-key-0123456789abc").unwrap(),
    )
    .unwrap();
    for (token, text) in [
        (expired.as_str(), "만료된 토큰입니다."),
        (refresh.as_str(), "유효하지 않은 Access 토큰입니다."),
        (forged.as_str(), "잘못된 JWT 서명입니다."),
        ("garbage", "잘못된 JWT 서명입니다."),
    ] {
        let res = app.client.get(&me).bearer_auth(token).send().await.unwrap();
        assert_eq!(read(res).await, unauthorized(text), "{token}");
    }
    // Its cookie: `Authorization=Bearer_<jwt>`; the answer clears it and hands the token back.
    let good = access(7);
    let res =
        app.client.get(&me).header("cookie", format!("Authorization=Bearer_{good}")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let cleared = res.headers().get("set-cookie").unwrap().to_str().unwrap().to_owned();
    assert!(cleared.starts_with("Authorization=;") && cleared.contains("Max-Age=0"), "{cleared}");
    assert_eq!(res.headers().get("authorization").unwrap().to_str().unwrap(), format!("Bearer {good}"));
    let res =
        app.client.get(&me).header("cookie", "theme=dark; Authorization=nonsense").send().await.unwrap();
    assert_eq!(read(res).await, unauthorized("잘못된 토큰 형식입니다."));

    // With a token: its 405 text; ours for what it answers 500 to (docs/dialects.md).
    let front = Frontend { app: &app, base: base.clone(), token: good };
    assert_eq!(
        front.refused("DELETE", "/payments/me", None).await,
        (StatusCode::METHOD_NOT_ALLOWED, "지원하지 않는 HTTP 메서드입니다.".into())
    );
    assert_eq!(
        front.refused("GET", "/payments/abc/pg", None).await,
        (StatusCode::BAD_REQUEST, "입력 값을 다시 확인해주세요.".into())
    );
    assert_eq!(
        front.refused("POST", "/payments/1/refund", Some("{not json")).await,
        (StatusCode::BAD_REQUEST, "입력 값을 다시 확인해주세요.".into())
    );
    assert_eq!(
        front.refused("GET", "/nowhere", None).await,
        (StatusCode::NOT_FOUND, "요청한 리소스를 찾을 수 없습니다.".into())
    );
    // No key-in but with Toss's test keys (here: the mock provider), its 403; its DTO first.
    assert_eq!(
        front.refused("POST", "/payments/test/keyin", Some(r#"{"meetingId":12}"#)).await,
        (StatusCode::FORBIDDEN, "Key-in API는 테스트 키에서만 호출할 수 있습니다.".into())
    );
    assert_eq!(
        front.refused("POST", "/payments/test/keyin", Some(r#"{"cardCvc":"1"}"#)).await,
        (StatusCode::BAD_REQUEST, "모임 ID는 필수입니다||CVC는 3자리 숫자여야 합니다".into())
    );
    assert_eq!(
        front.refused("GET", "/payments/test/keyin", None).await,
        (StatusCode::METHOD_NOT_ALLOWED, "지원하지 않는 HTTP 메서드입니다.".into())
    );
    // Its OpenAPI document, on the native listener: its four paths, tagged.
    let doc: Value =
        app.client.get(format!("{}/openapi/momo.json", app.base)).send().await.unwrap().json().await.unwrap();
    let mut operations: Vec<String> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            assert_eq!(op["tags"], json!(["momo"]), "{method} {path}");
            operations.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    operations.sort();
    assert_eq!(
        operations,
        [
            "GET /payments/me",
            "GET /payments/{paymentId}/pg",
            "POST /payments/test/keyin",
            "POST /payments/{paymentId}/refund"
        ]
    );
    // Without one, an unknown path asks for one first, as its security does.
    assert_eq!(
        read(app.client.get(format!("{base}/nowhere")).send().await.unwrap()).await,
        unauthorized("인증이 필요합니다. 로그인해 주세요.")
    );
}

/// The content's ids, in order.
fn ids(page: &Value) -> Vec<i64> {
    page["content"].as_array().unwrap().iter().map(|p| p["id"].as_i64().unwrap()).collect()
}

async fn a_members_payments_page_and_refund_as_its_frontend_reads_them(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, &dialect_env()).await else { return };
    let base = app.momo.clone().expect("the dialect's listener is on");
    let seven = Frontend { app: &app, base: base.clone(), token: access(7) };
    let eight = Frontend { app: &app, base: base.clone(), token: access(8) };
    let mut completed = Vec::new();
    for meeting in 101..=105 {
        completed.push(register(&app, 7, meeting, "").await.payment.unwrap().number);
    }
    let declined = register(&app, 7, 106, "payment=decline").await.payment.unwrap().number;
    let pending = register(&app, 7, 107, "payment=timeout").await.payment.unwrap().number;
    let others = register(&app, 8, 201, "").await.payment.unwrap().number;

    // The default page: Spring Data's Page of its PaymentResponseDto.
    let page = seven.data("GET", "/payments/me", None, "내 결제 내역 조회 완료").await;
    let unsorted = json!({ "empty": true, "sorted": false, "unsorted": true });
    assert_eq!(
        (
            &page["totalElements"],
            &page["totalPages"],
            &page["size"],
            &page["number"],
            &page["numberOfElements"]
        ),
        (&json!(7), &json!(1), &json!(20), &json!(0), &json!(7))
    );
    assert_eq!(
        (&page["first"], &page["last"], &page["empty"], &page["sort"]),
        (&json!(true), &json!(true), &json!(false), &unsorted)
    );
    assert_eq!(
        page["pageable"],
        json!({ "pageNumber": 0, "pageSize": 20, "sort": unsorted, "offset": 0, "paged": true, "unpaged": false })
    );
    let by_id =
        |id: i64| page["content"].as_array().unwrap().iter().find(|p| p["id"] == json!(id)).unwrap().clone();
    let done = by_id(completed[0]);
    assert_eq!(
        (&done["userId"], &done["meetingId"], &done["amount"], &done["paymentMethod"], &done["status"]),
        (&json!(7), &json!(101), &json!(15000), &json!("TOSS"), &json!("COMPLETED"))
    );
    let mut keys: Vec<&String> = done["detail"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["orderId", "paidAt", "pgTransactionId"]);
    let failed = by_id(declined);
    assert_eq!(failed["status"], "FAILED");
    let mut keys: Vec<&String> = failed["detail"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["failReason", "failedAt"]);
    assert_eq!((&by_id(pending)["status"], &by_id(pending)["detail"]), (&json!("PENDING"), &Value::Null));
    assert!(!ids(&page).contains(&others), "only the member's own");
    assert_eq!(ids(&eight.data("GET", "/payments/me", None, "내 결제 내역 조회 완료").await), [others]);

    // Its paging rules: lenient numbers, size 1..=2000, a page past the end, status, sort.
    let seven = &seven;
    let get = |query: &'static str| async move {
        seven.data("GET", &format!("/payments/me?{query}"), None, "내 결제 내역 조회 완료").await
    };
    assert_eq!(get("size=0").await["size"], 20);
    assert_eq!(get("size=5000").await["size"], 2000);
    assert_eq!(get("size=abc&page=abc").await["size"], 20);
    assert_eq!(get("page=-3").await["number"], 0);
    let second = get("size=2&page=1").await;
    assert_eq!(
        (
            &second["numberOfElements"],
            &second["number"],
            &second["totalPages"],
            &second["first"],
            &second["last"]
        ),
        (&json!(2), &json!(1), &json!(4), &json!(false), &json!(false))
    );
    let past = get("page=10").await;
    assert_eq!(
        (&past["content"], &past["last"], &past["empty"], &past["totalElements"]),
        (&json!([]), &json!(true), &json!(true), &json!(7))
    );
    assert_eq!(get("status=COMPLETED").await["totalElements"], 5);
    assert_eq!(ids(&get("status=FAILED").await), [declined]);
    assert_eq!(get("status=REFUNDED").await["totalElements"], 0);
    let descending = ids(&get("sort=id,desc").await);
    let mut expected = ids(&page);
    expected.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(descending, expected);
    assert_eq!(
        get("sort=id,desc").await["sort"],
        json!({ "empty": false, "sorted": true, "unsorted": false })
    );
    for bad in ["status=LOST", "sort=password"] {
        assert_eq!(
            seven.refused("GET", &format!("/payments/me?{bad}"), None).await,
            (StatusCode::BAD_REQUEST, "입력 값을 다시 확인해주세요.".into()),
            "{bad}"
        );
    }

    // Refunds: its ownership and state rules; the refunded payment is gone from /me.
    let refund = |id: i64| format!("/payments/{id}/refund");
    let reason = Some(r#"{"reason":"일정 변경"}"#);
    assert_eq!(
        eight.refused("POST", &refund(completed[0]), reason).await,
        (StatusCode::FORBIDDEN, "환불 권한이 없습니다.".into())
    );
    assert_eq!(
        seven.refused("POST", &refund(declined), reason).await,
        (StatusCode::BAD_REQUEST, "완료된 결제만 환불 가능합니다.".into())
    );
    assert_eq!(
        seven.refused("POST", &refund(987_654), reason).await,
        (StatusCode::NOT_FOUND, "결제 정보를 찾을 수 없습니다.".into())
    );
    let refunded = seven.data("POST", &refund(completed[0]), reason, "환불이 완료되었습니다.").await;
    assert_eq!((&refunded["id"], &refunded["status"]), (&json!(completed[0]), &json!("REFUNDED")));
    assert!(refunded["detail"]["refundedAt"].is_string(), "{refunded}");
    assert_eq!(
        seven.refused("POST", &refund(completed[0]), reason).await,
        (StatusCode::NOT_FOUND, "결제 정보를 찾을 수 없습니다.".into())
    );
    let after = get("").await;
    assert_eq!(after["totalElements"], 6);
    assert!(!ids(&after).contains(&completed[0]));
    assert_eq!(
        crate::helpers::count_where(&app.db, "outbox_events", "event_type = 'payment.refunded'").await,
        1
    );
    // Without a body (no content type): not JSON, 415; an empty JSON body: its bad-input
    // text; no reason: its DTO's `@NotBlank` text, nothing refunded (we never make one up).
    assert_eq!(
        seven.refused("POST", &refund(completed[1]), None).await,
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "지원하지 않는 Content-Type입니다. application/json으로 보내 주세요.".into()
        )
    );
    assert_eq!(
        seven.refused("POST", &refund(completed[1]), Some("")).await,
        (StatusCode::BAD_REQUEST, "입력 값을 다시 확인해주세요.".into())
    );
    assert_eq!(
        seven.refused("POST", &refund(completed[1]), Some("{}")).await,
        (StatusCode::BAD_REQUEST, "환불 사유는 필수입니다".into())
    );
    seven.data("POST", &refund(completed[1]), Some(r#"{"reason":"x"}"#), "환불이 완료되었습니다.").await;
    // The mock provider keeps no record to show.
    assert_eq!(
        seven.refused("GET", &format!("/payments/{}/pg", completed[2]), None).await,
        (StatusCode::NOT_FOUND, "결제 정보를 찾을 수 없습니다.".into())
    );
}

async fn the_pg_view_is_tosss_record_for_its_owner_only(backend: Backend) {
    let fake = crate::toss::Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &dialect_env(), false).await else { return };
    let base = app.momo.clone().expect("the dialect's listener is on");
    // Member 7 saves a card (the billing-auth widget, then our API), and registers.
    let native = app.token("7");
    let methods: Value = app.get("/api/payment-methods", &native).send().await.unwrap().json().await.unwrap();
    let auth = fake.post("/__fake/billing-auth", json!({ "customerKey": methods["customerKey"] })).await;
    let saved = app
        .post("/api/payment-methods", &native)
        .json(&json!({ "authKey": auth["authKey"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(saved.status(), StatusCode::CREATED);
    let paid = register(&app, 7, 101, "").await.payment.unwrap();
    let seven = Frontend { app: &app, base: base.clone(), token: access(7) };
    let eight = Frontend { app: &app, base, token: access(8) };
    let pg = format!("/payments/{}/pg", paid.number);
    let record = seven.data("GET", &pg, None, "PG 결제 조회 완료").await;
    let mut keys: Vec<&String> = record.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "approvedAt",
            "failure",
            "method",
            "orderId",
            "orderName",
            "paymentKey",
            "requestedAt",
            "status",
            "totalAmount"
        ]
    );
    assert_eq!(record["paymentKey"].as_str(), paid.provider_transaction_id.as_deref());
    assert_eq!((&record["status"], &record["totalAmount"]), (&json!("DONE"), &json!(15000)));
    assert_eq!(
        eight.refused("GET", &pg, None).await,
        (StatusCode::NOT_FOUND, "사용자를 찾을 수 없습니다.".into())
    );
    assert_eq!(
        seven.refused("GET", "/payments/987654/pg", None).await,
        (StatusCode::NOT_FOUND, "결제 정보를 찾을 수 없습니다.".into())
    );
    // Refunded at Toss, then gone from /pg.
    seven
        .data(
            "POST",
            &format!("/payments/{}/refund", paid.number),
            Some(r#"{"reason":"x"}"#),
            "환불이 완료되었습니다.",
        )
        .await;
    assert_eq!(
        seven.refused("GET", &pg, None).await,
        (StatusCode::NOT_FOUND, "결제 정보를 찾을 수 없습니다.".into())
    );
}

/// Its `PaymentResponseDto` of a completed payment, as its frontend reads one.
fn completed(payment: &Value, user: i64, meeting: i64, amount: i64) {
    assert_eq!(
        (&payment["userId"], &payment["meetingId"], &payment["amount"]),
        (&json!(user), &json!(meeting), &json!(amount)),
        "{payment}"
    );
    assert_eq!((&payment["paymentMethod"], &payment["status"]), (&json!("TOSS"), &json!("COMPLETED")));
    assert!(payment["id"].is_i64(), "id: a Long");
    let detail = payment["detail"].as_object().unwrap();
    let mut keys: Vec<&String> = detail.keys().collect();
    keys.sort();
    assert_eq!(keys, ["orderId", "paidAt", "pgTransactionId"], "{payment}");
}

/// The platform's whole setup (its meetings on MariaDB, its broker and meeting service) and
/// Toss's test environment (the fake): our service with both, and the dialect's listener.
async fn keyed_in_app(
    backend: Backend,
    fake: &crate::toss::Fake,
    platform: &crate::momo::Platform,
) -> Option<(TestApp, orchestrator::startup::Workers)> {
    keyed_in_app_with(backend, fake, platform, &[]).await
}

/// [`keyed_in_app`] with `extra` settings.
async fn keyed_in_app_with(
    backend: Backend,
    fake: &crate::toss::Fake,
    platform: &crate::momo::Platform,
    extra: &[(&'static str, &'static str)],
) -> Option<(TestApp, orchestrator::startup::Workers)> {
    let mut env = dialect_env();
    env.extend_from_slice(extra);
    env.extend([
        ("APP__PAYMENT__PROVIDER", "toss"),
        ("APP__PAYMENT__TOSS__SECRET_KEY", crate::toss::SECRET),
        ("APP__PAYMENT__TOSS__BASE_URL", fake.running.base_url.as_str()),
    ]);
    platform.serve_with(backend, &platform.fees_url(), &env).await
}

async fn a_keyed_in_card_pays_a_meeting_once_as_its_frontend_and_meeting_service_read_it(backend: Backend) {
    // Meeting 12 costs 15 000, 13 is free; 99 does not exist.
    let Some(platform) = crate::momo::Platform::start(&[(12, 15_000), (13, 0)]).await else { return };
    let fake = crate::toss::Fake::start().await;
    let Some((app, _workers)) = keyed_in_app(backend, &fake, &platform).await else { return };
    let base = app.momo.clone().expect("the dialect's listener is on");
    let member = |user: i64| Frontend { app: &app, base: base.clone(), token: access(user) };
    let (seven, eight) = (member(7), member(8));
    let ok = "테스트 키인 결제가 완료되었습니다.";

    // Its frontend's call with no card: its test card, charged the meeting's fee at Toss.
    let paid = seven.data("POST", "/payments/test/keyin", Some(r#"{"meetingId":12}"#), ok).await;
    completed(&paid, 7, 12, 15_000);
    assert_eq!(fake.effects("key_in").await, 1);
    let pg = seven.data("GET", &format!("/payments/{}/pg", paid["id"]), None, "PG 결제 조회 완료").await;
    assert_eq!((&pg["status"], &pg["totalAmount"]), (&json!("DONE"), &json!(15_000)));
    assert_eq!(
        (&pg["paymentKey"], &pg["orderId"]),
        (&paid["detail"]["pgTransactionId"], &paid["detail"]["orderId"])
    );
    let mine = seven.data("GET", "/payments/me", None, "내 결제 내역 조회 완료").await;
    assert_eq!(ids(&mine), [paid["id"].as_i64().unwrap()]);
    // The meeting service gets one `payment.completed` under a new uuId.
    let read = platform.replies_after(&app, 1).await;
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[0].kind, "payment.completed");
    assert!(uuid::Uuid::parse_str(&read[0].uu_id).is_ok(), "a new uuId: {}", read[0].uu_id);
    assert_eq!(
        (
            &read[0].data["paymentId"],
            &read[0].data["userId"],
            &read[0].data["meetingId"],
            &read[0].data["amount"]
        ),
        (&paid["id"], &json!(7), &json!(12), &json!(15_000))
    );

    // Again, with another card: the same payment, nothing charged, nothing sent.
    let again = seven
        .data(
            "POST",
            "/payments/test/keyin",
            Some(r#"{"meetingId":"12","cardNumber":"5555444433332222"}"#),
            ok,
        )
        .await;
    assert_eq!(again, paid);
    assert_eq!(fake.effects("key_in").await, 1);

    // A free meeting, one the platform does not have, a card the company refuses: its texts,
    // nothing charged, stored or sent.
    assert_eq!(
        eight.refused("POST", "/payments/test/keyin", Some(r#"{"meetingId":13}"#)).await,
        (StatusCode::BAD_REQUEST, "무료 모임 참가 처리에 실패했습니다".into())
    );
    assert_eq!(
        eight.refused("POST", "/payments/test/keyin", Some(r#"{"meetingId":99}"#)).await,
        (StatusCode::NOT_FOUND, "모임을 찾을 수 없습니다.".into())
    );
    let refused_card = format!(r#"{{"meetingId":12,"cardNumber":"{}"}}"#, fake_toss::KEY_IN_DECLINED_CARD);
    assert_eq!(
        eight.refused("POST", "/payments/test/keyin", Some(&refused_card)).await,
        (StatusCode::BAD_GATEWAY, "결제 승인 실패".into())
    );
    assert_eq!(
        eight.refused("POST", "/payments/test/keyin", Some(r#"{"meetingId":12,"cardNumber":"4242"}"#)).await,
        (StatusCode::BAD_REQUEST, "카드번호는 16자리 숫자여야 합니다".into())
    );
    assert_eq!(fake.effects("key_in").await, 1);
    let none = eight.data("GET", "/payments/me", None, "내 결제 내역 조회 완료").await;
    assert_eq!(none["totalElements"], json!(0), "{none}");

    // Two key-ins of one member at once (Toss holds each answer 300 ms): the pair is taken
    // before the charge, so one charge, one payment, nothing to give back.
    let nine = member(9);
    let body = Some(r#"{"meetingId":12}"#);
    fake.fault("key_in", "delay", 300, 2).await;
    let (a, b) = tokio::join!(nine.keyed_in(body), nine.keyed_in(body));
    assert_eq!(a["id"], b["id"], "{a} {b}");
    assert_eq!(fake.effects("key_in").await, 2);
    assert_eq!(fake.calls("cancel").await, 0, "nothing charged twice, nothing given back");
    let a = nine.settled(&a).await;
    // Charged, but Toss's answer lost (a 500 after the charge): what Toss holds decides.
    let ten = member(10);
    fake.fault("key_in", "effect_then_500", 0, 1).await;
    let lost = ten.data("POST", "/payments/test/keyin", body, ok).await;
    completed(&lost, 10, 12, 15_000);
    assert_eq!(fake.effects("key_in").await, 3, "charged once");

    // Refunded, the payment leaves its list and the member may pay again (a new payment).
    seven
        .data(
            "POST",
            &format!("/payments/{}/refund", paid["id"]),
            Some(r#"{"reason":"x"}"#),
            "환불이 완료되었습니다.",
        )
        .await;
    let anew = seven.data("POST", "/payments/test/keyin", Some(r#"{"meetingId":12}"#), ok).await;
    completed(&anew, 7, 12, 15_000);
    assert_ne!(anew["id"], paid["id"]);
    // Member 9's once, 10's and 7's new payment (the meeting service binds no queue to
    // `payment.refunded.key`: the refund reaches no one, as on the platform).
    let read = platform.replies_after(&app, 4).await;
    assert!(read.iter().all(|r| r.kind == "payment.completed"), "{read:?}");
    let mut told: Vec<(i64, i64)> = read
        .iter()
        .map(|r| (r.data["userId"].as_i64().unwrap(), r.data["paymentId"].as_i64().unwrap()))
        .collect();
    told.sort_unstable();
    let id = |p: &Value| p["id"].as_i64().unwrap();
    let mut expected = vec![(7, id(&paid)), (7, id(&anew)), (9, id(&a)), (10, id(&lost))];
    expected.sort_unstable();
    assert_eq!(told, expected);
}

async fn a_live_key_is_refused_key_in(backend: Backend) {
    let fake = crate::toss::Fake::start().await;
    let mut env = dialect_env();
    env.extend([
        ("APP__PAYMENT__PROVIDER", "toss"),
        ("APP__PAYMENT__TOSS__SECRET_KEY", "live_sk_the_shops_real_key"),
        ("APP__PAYMENT__TOSS__BASE_URL", fake.running.base_url.as_str()),
    ]);
    let Some(app) = TestApp::spawn_with(backend, &env).await else { return };
    let front = Frontend { app: &app, base: app.momo.clone().unwrap(), token: access(7) };
    assert_eq!(
        front.refused("POST", "/payments/test/keyin", Some(r#"{"meetingId":12}"#)).await,
        (StatusCode::FORBIDDEN, "Key-in API는 테스트 키에서만 호출할 수 있습니다.".into())
    );
    assert_eq!(fake.calls("key_in").await, 0);
}

on_both_databases!(
    a_keyed_in_card_pays_a_meeting_once_as_its_frontend_and_meeting_service_read_it,
    a_live_key_is_refused_key_in
);

on_both_databases!(
    its_tokens_and_error_texts,
    a_members_payments_page_and_refund_as_its_frontend_reads_them,
    the_pg_view_is_tosss_record_for_its_owner_only
);

/// Toss's own record of the charge under `order_id` (what it shows the member).
async fn toss_record(fake: &crate::toss::Fake, order_id: &str) -> Value {
    crate::webhooks::at_toss_path(fake, &format!("/v1/payments/orders/{order_id}")).await
}

/// Toss answers the key-in after our timeout (1 s) and only then takes the charge: the
/// look-up at the timeout finds nothing. The payment waits `PENDING`, the member's retry and
/// a registration for the same pair meet it, and reconciliation finds the charge: one charge,
/// one payment, one `payment.completed`.
async fn a_slow_toss_charges_a_member_once(backend: Backend) {
    let Some(platform) = crate::momo::Platform::start(&[(12, 15_000)]).await else { return };
    let fake = crate::toss::Fake::start().await;
    let slow = [("APP__PAYMENT__TOSS__TIMEOUT", "1s"), ("APP__PAYMENT__RECONCILIATION__INTERVAL", "50ms")];
    let Some((app, workers)) = keyed_in_app_with(backend, &fake, &platform, &slow).await else { return };
    // Every loop of a worker on Toss (the ledger too) under a name of its own: readiness
    // tells them apart by it.
    assert!(workers.loops().contains(&"the provider's ledger"), "{:?}", workers.loops());
    crate::helpers::names_are_unique(workers.loops());
    let seven = Frontend { app: &app, base: app.momo.clone().unwrap(), token: access(7) };
    fake.fault("key_in", "late", 1_500, 1).await;
    let body = Some(r#"{"meetingId":12}"#);
    let pending = seven.keyed_in(body).await;
    assert_eq!(pending["status"], json!("PENDING"), "{pending}");
    // The member tries again at once, with another card; the meeting service registers the
    // pair meanwhile: both meet the payment in flight, nothing is charged again.
    let again = seven.keyed_in(Some(r#"{"meetingId":12,"cardNumber":"5555444433332222"}"#)).await;
    assert_eq!(again["id"], pending["id"], "{again}");
    platform.register("reg-slow-1", 12, 7, None).await;
    let paid = seven.settled(&pending).await;
    completed(&paid, 7, 12, 15_000);
    assert_eq!((fake.calls("key_in").await, fake.effects("key_in").await), (1, 1), "one call, one charge");
    assert_eq!(fake.calls("cancel").await, 0);
    // Toss shows the charge as the platform named it: the meeting's title.
    let record = toss_record(&fake, paid["detail"]["orderId"].as_str().unwrap()).await;
    assert_eq!(record["orderName"], json!("meeting 12 참가비"), "{record}");
    // The meeting service hears one answer for the pair, the completion.
    let read = platform.replies_after(&app, 1).await;
    assert_eq!(read.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(), ["payment.completed"], "{read:?}");
    assert_eq!(read[0].data["paymentId"], paid["id"]);
}

/// Twenty key-ins of one member for one meeting at once, Toss slow (300 ms) and refusing
/// every cancel: the pair is taken before the charge, so one charge and no cancel owed.
async fn twenty_parallel_key_ins_charge_once(backend: Backend) {
    let Some(platform) = crate::momo::Platform::start(&[(12, 15_000)]).await else { return };
    let fake = crate::toss::Fake::start().await;
    let Some((app, _workers)) = keyed_in_app(backend, &fake, &platform).await else { return };
    let member = Frontend { app: &app, base: app.momo.clone().unwrap(), token: access(21) };
    fake.fault("key_in", "delay", 300, 20).await;
    fake.fault("cancel", "fail_500", 0, 20).await;
    let body = Some(r#"{"meetingId":12}"#);
    let answers = futures_util::future::join_all((0..20).map(|_| member.keyed_in(body))).await;
    let ids: std::collections::BTreeSet<String> = answers.iter().map(|a| a["id"].to_string()).collect();
    assert_eq!(ids.len(), 1, "one payment: {ids:?}");
    let paid = member.settled(&answers[0]).await;
    completed(&paid, 21, 12, 15_000);
    assert_eq!((fake.calls("key_in").await, fake.effects("key_in").await), (1, 1));
    assert_eq!(fake.calls("cancel").await, 0, "no charge to give back");
    let read = platform.replies_after(&app, 1).await;
    assert_eq!(read.len(), 1, "{read:?}");
}

/// A meeting the platform no longer sells (deleted; finished and full) is charged by
/// neither a key-in nor a registration (docs/migrating.md: the fee query).
async fn a_meeting_the_platform_no_longer_sells_is_never_charged(backend: Backend) {
    let Some(platform) = crate::momo::Platform::start(&[(12, 15_000), (14, 22_000), (15, 22_000)]).await
    else {
        return;
    };
    platform.meetings_sql("UPDATE meetings SET is_deleted = 1, deleted_at = NOW() WHERE id = 14");
    platform.meetings_sql(
        "UPDATE meetings SET status = 'FINISHED', meeting_date = '2020-05-01 19:00:00', \
         meeting_end_date = '2020-05-01 21:00:00', current_participants_count = 10 WHERE id = 15",
    );
    let fake = crate::toss::Fake::start().await;
    let Some((app, _workers)) = keyed_in_app(backend, &fake, &platform).await else { return };
    let member = Frontend { app: &app, base: app.momo.clone().unwrap(), token: access(30) };
    for gone in [14, 15] {
        let body = format!(r#"{{"meetingId":{gone}}}"#);
        assert_eq!(
            member.refused("POST", "/payments/test/keyin", Some(&body)).await,
            (StatusCode::NOT_FOUND, "모임을 찾을 수 없습니다.".into()),
            "meeting {gone}"
        );
        platform.register(&format!("reg-gone-{gone}"), gone, 30, None).await;
    }
    let read = platform.replies_after(&app, 2).await;
    assert_eq!(read.len(), 2, "{read:?}");
    for reply in &read {
        assert_eq!(reply.kind, "payment.failed", "{reply:?}");
        assert_eq!(reply.data["failReason"], json!("모임 없음 (MEETING_NOT_FOUND)"), "{reply:?}");
    }
    assert_eq!(fake.calls("key_in").await, 0, "nothing charged");
    // The one still sold is.
    let paid = member.keyed_in(Some(r#"{"meetingId":12}"#)).await;
    completed(&member.settled(&paid).await, 30, 12, 15_000);
}

/// What a hostile page or client sends the money paths: a refund without a reason, a reason
/// with NUL, a body that is not JSON by its content type, a cross-site post carrying the
/// cookie, two tokens. Each is refused in the envelope and nothing moves.
async fn the_money_paths_refuse_what_a_hostile_client_sends(backend: Backend) {
    let Some(platform) = crate::momo::Platform::start(&[(12, 15_000)]).await else { return };
    let fake = crate::toss::Fake::start().await;
    let Some((app, _workers)) = keyed_in_app(backend, &fake, &platform).await else { return };
    let base = app.momo.clone().unwrap();
    let seven = Frontend { app: &app, base: base.clone(), token: access(7) };
    let paid = seven.keyed_in(Some(r#"{"meetingId":12}"#)).await;
    let paid = seven.settled(&paid).await;
    let refund = format!("/payments/{}/refund", paid["id"]);
    assert_eq!(
        seven.refused("POST", &refund, Some("{}")).await,
        (StatusCode::BAD_REQUEST, "환불 사유는 필수입니다".into())
    );
    assert_eq!(
        seven.refused("POST", &refund, Some(r#"{"reason":"  "}"#)).await,
        (StatusCode::BAD_REQUEST, "환불 사유는 필수입니다".into())
    );
    assert_eq!(
        seven.refused("POST", &refund, Some(r#"{"reason":"a\u0000b"}"#)).await,
        (StatusCode::BAD_REQUEST, "입력 값을 다시 확인해주세요.".into())
    );
    // Raw requests, as a browser or a script would send them.
    let send = |path: &str, content_type: Option<&str>, cookie: bool, extra: &[(&str, &str)]| {
        let mut request = app.client.post(format!("{base}{path}")).body(r#"{"meetingId":12,"reason":"x"}"#);
        if let Some(t) = content_type {
            request = request.header("content-type", t);
        }
        request = if cookie {
            request.header("cookie", format!("Authorization=Bearer_{}", access(8)))
        } else {
            request.bearer_auth(access(8))
        };
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        request.send()
    };
    let envelope_of = async |res: reqwest::Response| {
        let status = res.status();
        let body: Value = res.json().await.unwrap();
        envelope(&body);
        assert_eq!((&body["success"], &body["data"]), (&json!(false), &Value::Null), "{body}");
        (status, body["message"].as_str().unwrap().to_owned())
    };
    let media = (
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "지원하지 않는 Content-Type입니다. application/json으로 보내 주세요.".to_owned(),
    );
    for content_type in [Some("text/plain"), Some("application/x-www-form-urlencoded"), None] {
        assert_eq!(
            envelope_of(send("/payments/test/keyin", content_type, false, &[]).await.unwrap()).await,
            media,
            "{content_type:?}"
        );
        assert_eq!(
            envelope_of(send(&refund, content_type, false, &[]).await.unwrap()).await.0,
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
    }
    let cross = (StatusCode::FORBIDDEN, "다른 사이트에서 보낸 요청은 쿠키로 인증할 수 없습니다.".to_owned());
    let json_type = Some("application/json");
    for headers in [&[("sec-fetch-site", "cross-site")][..], &[("origin", "https://evil.example")][..]] {
        assert_eq!(
            envelope_of(send("/payments/test/keyin", json_type, true, headers).await.unwrap()).await,
            cross,
            "{headers:?}"
        );
    }
    let two = app
        .client
        .post(format!("{base}/payments/test/keyin"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", access(8)))
        .header("authorization", format!("Bearer {}", access(9)))
        .body(r#"{"meetingId":12}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(envelope_of(two).await.0, StatusCode::UNAUTHORIZED);
    // Nothing moved: one charge (member 7's), no refund yet, member 8 has nothing.
    assert_eq!((fake.calls("key_in").await, fake.calls("cancel").await), (1, 0));
    let eight = Frontend { app: &app, base: base.clone(), token: access(8) };
    let none = eight.call("GET", "/payments/me", None).await.1;
    assert_eq!(none["data"]["totalElements"], json!(0), "{none}");
    // Two refunds of the paid payment at once, Toss slow to cancel (500 ms): one refunds;
    // the other waits for it and is answered what it left (its "only completed payments"
    // text), never "try again" (issue 67) — and Toss cancels once.
    fake.fault("cancel", "delay", 500, 1).await;
    let body = Some(r#"{"reason":"twice at once"}"#);
    let (a, b) = tokio::join!(seven.call("POST", &refund, body), seven.call("POST", &refund, body));
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::BAD_REQUEST], "{a:?} {b:?}");
    let lost = if a.0 == StatusCode::OK { b.1 } else { a.1 };
    assert_eq!(lost["message"], json!("완료된 결제만 환불 가능합니다."), "{lost}");
    assert_eq!(fake.effects("cancel").await, 1);
    // A same-site post with the cookie still works (its frontend's own calls).
    let own =
        send("/payments/test/keyin", json_type, true, &[("sec-fetch-site", "same-origin")]).await.unwrap();
    assert!(own.status().is_success(), "{}", own.status());
}

on_both_databases!(
    a_slow_toss_charges_a_member_once,
    twenty_parallel_key_ins_charge_once,
    a_meeting_the_platform_no_longer_sells_is_never_charged,
    the_money_paths_refuse_what_a_hostile_client_sends
);
