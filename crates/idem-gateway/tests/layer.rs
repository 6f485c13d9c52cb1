//! The engine as a tower layer around an axum router, over a real the log engine (idem-log) store: the handler runs
//! once however many identical requests race, unguarded routes are untouched, and a key belongs to
//! one caller (a session cookie, or a JWT claim verified by a verifier the application builds), and a
//! route with `errors = Stripe` answers in Stripe's shape while its handler's own answers pass as they are.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use http_body_util::BodyExt;
use idem_core::SystemClock;
use idem_core::gateway::{InFlightPolicy, KeyPolicy, PathPattern};
use idem_gateway::{Engine, EngineConfig, ErrorShape, IdempotencyLayer, JwtVerifier, RoutePolicy, Routes, ScopePart};
use idem_log::{LogOptions, LogStore};
use tower::ServiceExt;

struct App {
    router: Router,
    calls: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

fn app(in_flight: InFlightPolicy) -> App {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(LogStore::open(dir.path(), Arc::new(SystemClock), LogOptions::default()).expect("open"));
    let engine = Arc::new(Engine::new(store, Arc::new(SystemClock), EngineConfig::default()));
    let mut orders = RoutePolicy::new(PathPattern::parse("/orders").expect("valid"));
    orders.key = KeyPolicy::Required;
    orders.in_flight = in_flight;
    let calls = Arc::new(AtomicUsize::new(0));
    let router = Router::new()
        .route("/orders", post(create_order))
        .route("/health", get(|| async { "ok" }))
        .with_state(Arc::clone(&calls))
        .layer(IdempotencyLayer::new(engine, Routes::new([orders])));
    App { router, calls, _dir: dir }
}

async fn create_order(State(calls): State<Arc<AtomicUsize>>, body: String) -> (StatusCode, String) {
    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(100)).await;
    (StatusCode::CREATED, format!("{{\"order\":{n},\"request\":{body}}}"))
}

fn order(key: Option<&str>) -> Request<Body> {
    let mut builder =
        Request::post("/orders").header("content-type", "application/json").header("authorization", "Bearer alice");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(Body::from("{\"item\":\"book\"}")).expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_runs_once_for_100_racing_duplicates() {
    let app = app(InFlightPolicy::Wait);
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let router = app.router.clone();
            tokio::spawn(async move {
                let response = router.oneshot(order(Some("k-1"))).await.expect("infallible");
                let status = response.status();
                (status, response.into_body().collect().await.expect("body").to_bytes())
            })
        })
        .collect();
    let mut bodies = std::collections::HashSet::new();
    for task in tasks {
        let (status, body) = task.await.expect("task");
        assert_eq!(status, StatusCode::CREATED);
        bodies.insert(body);
    }
    assert_eq!(app.calls.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(bodies.len(), 1, "every caller got the same answer");
}

#[tokio::test]
async fn replays_mismatches_and_missing_keys_behave_as_behind_the_proxy() {
    let app = app(InFlightPolicy::Reject);
    let first = app.router.clone().oneshot(order(Some("k-2"))).await.expect("infallible");
    assert_eq!(first.status(), StatusCode::CREATED);
    let again = app.router.clone().oneshot(order(Some("k-2"))).await.expect("infallible");
    assert_eq!(again.headers().get("idempotent-replayed").map(|v| v.as_bytes()), Some(&b"true"[..]));
    let other = Request::post("/orders")
        .header("content-type", "application/json")
        .header("authorization", "Bearer alice")
        .header("idempotency-key", "k-2")
        .body(Body::from("{\"item\":\"pen\"}"))
        .expect("request");
    assert_eq!(app.router.clone().oneshot(other).await.expect("infallible").status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(app.router.clone().oneshot(order(None)).await.expect("infallible").status(), StatusCode::BAD_REQUEST);
    let health = app.router.clone().oneshot(Request::get("/health").body(Body::empty()).expect("request")).await;
    assert_eq!(health.expect("infallible").status(), StatusCode::OK, "unguarded routes pass through");
    assert_eq!(app.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_key_with_bytes_outside_ascii_is_400_and_nothing_runs() {
    let app = app(InFlightPolicy::Reject);
    let mut request = order(None);
    request.headers_mut().insert("idempotency-key", axum::http::HeaderValue::from_bytes(b"caf\xe9").expect("obs-text"));
    let response = app.router.clone().oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(response.headers().get("content-type").map(|v| v.as_bytes()), Some(&b"application/problem+json"[..]));
    assert_eq!(app.calls.load(Ordering::SeqCst), 0);
}

/// `/orders` scoped by a session cookie, `/payments` by the `sub` of an HS256 JWT whose verifier
/// the application built.
fn scoped_app() -> App {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(LogStore::open(dir.path(), Arc::new(SystemClock), LogOptions::default()).expect("open"));
    let engine = Arc::new(Engine::new(store, Arc::new(SystemClock), EngineConfig::default()));
    let mut orders = RoutePolicy::new(PathPattern::parse("/orders").expect("valid"));
    orders.scope = vec![ScopePart::Cookie("session".into())];
    let verifier = JwtVerifier::hs256(SECRET).expect("secret").issuer(["https://login.example".to_owned()]);
    let mut payments = RoutePolicy::new(PathPattern::parse("/payments").expect("valid")).with_jwt(Arc::new(verifier));
    payments.scope = vec![ScopePart::Jwt("sub".into())];
    let calls = Arc::new(AtomicUsize::new(0));
    let router = Router::new()
        .route("/orders", post(create_order))
        .route("/payments", post(create_order))
        .with_state(Arc::clone(&calls))
        .layer(IdempotencyLayer::new(engine, Routes::new([orders, payments])));
    App { router, calls, _dir: dir }
}

const SECRET: &[u8] = b"the-layer-test-secret-of-32-bytes!!";

fn token(sub: &str, issued: u64) -> String {
    idem_gateway::jwt::ring::install();
    let now = jsonwebtoken::get_current_timestamp();
    let claims = serde_json::json!({"sub": sub, "iss": "https://login.example", "exp": now + 600, "iat": issued});
    let key = jsonwebtoken::EncodingKey::from_secret(SECRET);
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).expect("signs")
}

/// (status, replayed) of a keyed POST with these headers.
async fn send(app: &App, path: &str, headers: &[(&str, String)]) -> (StatusCode, bool) {
    let mut builder = Request::post(path).header("content-type", "application/json").header("idempotency-key", "k");
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    let response = app.router.clone().oneshot(builder.body(Body::from("{}")).expect("request")).await;
    let response = response.expect("infallible");
    (response.status(), response.headers().contains_key("idempotent-replayed"))
}

#[tokio::test]
async fn the_layer_scopes_keys_by_a_session_cookie_or_a_verified_jwt_claim() {
    let app = scoped_app();
    let cookie = |c: &str| vec![("cookie", c.to_owned())];
    assert_eq!(send(&app, "/orders", &cookie("session=alice; theme=dark")).await, (StatusCode::CREATED, false));
    assert_eq!(send(&app, "/orders", &cookie("theme=light; session=alice")).await, (StatusCode::CREATED, true));
    assert_eq!(send(&app, "/orders", &cookie("session=bob")).await, (StatusCode::CREATED, false), "bob's own key");
    assert_eq!(send(&app, "/orders", &cookie("theme=dark")).await.0, StatusCode::BAD_REQUEST, "no session");
    assert_eq!(app.calls.load(Ordering::SeqCst), 2);
    let bearer = |t: String| vec![("authorization", format!("Bearer {t}"))];
    assert_eq!(send(&app, "/payments", &bearer(token("alice", 1))).await, (StatusCode::CREATED, false));
    assert_eq!(send(&app, "/payments", &bearer(token("alice", 2))).await, (StatusCode::CREATED, true), "refreshed");
    assert_eq!(send(&app, "/payments", &bearer(token("bob", 1))).await, (StatusCode::CREATED, false));
    let forged = token("alice", 3).replace('.', ".x");
    assert_eq!(send(&app, "/payments", &bearer(forged)).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(send(&app, "/payments", &[]).await.0, StatusCode::BAD_REQUEST, "no token, no scope");
    assert_eq!(app.calls.load(Ordering::SeqCst), 4, "nothing ran for the refusals");
}

/// An inner service that fails: the client gets a plain 500 problem, never the service's own
/// error text (which may name hosts, files or secrets).
#[tokio::test]
async fn an_inner_failure_is_a_500_that_keeps_its_text_to_itself() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(LogStore::open(dir.path(), Arc::new(SystemClock), LogOptions::default()).expect("open"));
    let engine = Arc::new(Engine::new(store, Arc::new(SystemClock), EngineConfig::default()));
    let failing = tower::service_fn(|_: Request<Body>| async {
        Err::<axum::http::Response<Body>, std::io::Error>(std::io::Error::other("db at 10.0.0.7 password=hunter2"))
    });
    let service = tower::ServiceBuilder::new()
        .layer(IdempotencyLayer::new(
            engine,
            Routes::new([RoutePolicy::new(PathPattern::parse("/orders").expect("valid"))]),
        ))
        .service(failing);
    let response =
        service.oneshot(Request::get("/health").body(Body::empty()).expect("request")).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = response.into_body().collect().await.expect("body").to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("urn:idem:problem:internal"), "{text}");
    assert!(!text.contains("hunter2") && !text.contains("10.0.0.7"), "{text}");
}

/// `/orders` with `errors = "stripe"`, a body limit of 64 bytes, and `/conflict`, whose handler
/// answers its own 409 in problem+json.
fn stripe_app() -> App {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(LogStore::open(dir.path(), Arc::new(SystemClock), LogOptions::default()).expect("open"));
    let config = EngineConfig { max_body_bytes: 64, ..EngineConfig::default() };
    let engine = Arc::new(Engine::new(store, Arc::new(SystemClock), config));
    let mut orders = RoutePolicy::new(PathPattern::parse("/orders").expect("valid"));
    orders.key = KeyPolicy::Required;
    orders.errors = ErrorShape::Stripe;
    let conflict =
        RoutePolicy { errors: ErrorShape::Stripe, ..RoutePolicy::new(PathPattern::parse("/conflict").expect("valid")) };
    let calls = Arc::new(AtomicUsize::new(0));
    let own_409 =
        || async { (StatusCode::CONFLICT, [("content-type", "application/problem+json")], "{\"title\":\"mine\"}") };
    let router = Router::new()
        .route("/orders", post(create_order))
        .route("/conflict", post(own_409))
        .with_state(Arc::clone(&calls))
        .layer(IdempotencyLayer::new(engine, Routes::new([orders, conflict])));
    App { router, calls, _dir: dir }
}

/// The status, Content-Type and JSON body of a response.
async fn answer(app: &App, request: Request<Body>) -> (StatusCode, String, serde_json::Value) {
    let response = app.router.clone().oneshot(request).await.expect("infallible");
    let content_type = response.headers().get("content-type").map(|v| v.to_str().expect("ascii").to_owned());
    let (status, body) = (response.status(), response.into_body().collect().await.expect("body").to_bytes());
    (status, content_type.unwrap_or_default(), serde_json::from_slice(&body).expect("JSON"))
}

#[tokio::test]
async fn a_stripe_route_answers_in_stripes_shape_and_leaves_the_handlers_own_answers_alone() {
    let app = stripe_app();
    let first = tokio::spawn({
        let router = app.router.clone();
        async move { router.oneshot(order(Some("s-1"))).await.expect("infallible").status() }
    });
    // The handler counts its call as it starts, then takes 100 ms.
    while app.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (status, content_type, held) = answer(&app, order(Some("s-1"))).await;
    assert_eq!((status, content_type.as_str()), (StatusCode::CONFLICT, "application/json"));
    assert_eq!(
        (held["error"]["type"].as_str(), held["error"]["code"].as_str()),
        (Some("idempotency_error"), Some("request-in-flight"))
    );
    assert_eq!(first.await.expect("task"), StatusCode::CREATED);
    let mut other = order(Some("s-1"));
    *other.body_mut() = Body::from("{\"item\":\"pen\"}");
    let (status, _, reused) = answer(&app, other).await;
    assert_eq!(
        (status, reused["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("idempotency-key-reused"))
    );
    let (status, _, missing) = answer(&app, order(None)).await;
    assert_eq!((status, missing["error"]["type"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_request_error")));
    let mut large = order(Some("s-2"));
    *large.body_mut() = Body::from(format!("{{\"item\":\"{}\"}}", "x".repeat(100)));
    let (status, content_type, too_large) = answer(&app, large).await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "application/json"),
        "the layer's own 413"
    );
    assert_eq!(too_large["error"]["code"], "payload-too-large");
    let own = Request::post("/conflict").header("idempotency-key", "c-1").header("authorization", "Bearer alice");
    let (status, content_type, body) = answer(&app, own.body(Body::empty()).expect("request")).await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::CONFLICT, "application/problem+json"),
        "the handler's own"
    );
    assert_eq!(body, serde_json::json!({"title": "mine"}));
    assert_eq!(app.calls.load(Ordering::SeqCst), 1);
}
