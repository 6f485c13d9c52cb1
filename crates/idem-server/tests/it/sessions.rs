//! Callers the app names (contract §2, the `identity` scope part), against apps whose session
//! cookie changes its text on every response, as real frameworks' do:
//!
//! - **Laravel-style**: `laravel_session` is the session id encrypted again, with a new IV, on every
//!   response; `/whoami` names the user in a JSON field (`id_field = "id"`).
//! - **Flask-style**: a permanent `session` cookie signed again, with a new timestamp, on every
//!   request; `/whoami` names the user in a header (`id_header = "X-User-Id"`).
//!
//! In both, a double-tap after the first response arrived (it carries the cookie's new text) is a
//! replay; two users with one key never share; a cookie the app refuses gets the app's own `401`;
//! an app whose `/whoami` is down or slow is `503` with `Retry-After`; and nothing of those reaches
//! the order endpoint. Scoped by `cookie:laravel_session` instead, the double-tap runs twice: the
//! bug this part exists for (#39).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use http::Method;
use idem_core::SystemClock;
use idem_server::cli::client::{ApiClient, Reply};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::TestServer;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `laravel_session`: the session id, encrypted anew on every response; `/whoami` answers JSON.
    Laravel,
    /// `session`: the user, signed anew (a new timestamp) on every request; `/whoami` a header.
    Flask,
}

impl Style {
    fn cookie(self) -> &'static str {
        match self {
            Style::Laravel => "laravel_session",
            Style::Flask => "session",
        }
    }
}

/// The app behind idem: logins, `/whoami`, and `POST /orders`, which counts per user.
struct App {
    style: Style,
    sessions: Mutex<HashMap<String, String>>,
    orders: Mutex<HashMap<String, u64>>,
    iv: AtomicU64,
    whoami_down: AtomicBool,
}

type Shared = Arc<App>;

impl App {
    /// A keystream from the IV: enough to make each response's cookie text different.
    fn seal(&self, plain: &str) -> String {
        let iv = self.iv.fetch_add(1, Ordering::SeqCst).to_be_bytes();
        let stream = Sha256::digest(iv);
        let sealed: Vec<u8> = plain.bytes().zip(stream.iter().cycle()).map(|(a, b)| a ^ b).collect();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([&iv[..], &sealed].concat())
    }

    fn open(&self, cookie: &str) -> Option<String> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cookie).ok()?;
        let (iv, sealed) = bytes.split_at_checked(8)?;
        let stream = Sha256::digest(iv);
        String::from_utf8(sealed.iter().zip(stream.iter().cycle()).map(|(a, b)| a ^ b).collect()).ok()
    }

    /// The cookie's text for a user, as the app sets it now.
    fn cookie_for(&self, user: &str) -> String {
        match self.style {
            Style::Laravel => {
                let sid = format!("sid-{user}");
                self.sessions.lock().expect("lock").insert(sid.clone(), user.to_owned());
                self.seal(&sid)
            }
            // Signed with a timestamp that changes each time: "user.ts.sig".
            Style::Flask => self.seal(&format!("{user}.{}", self.iv.load(Ordering::SeqCst))),
        }
    }

    fn user_of(&self, headers: &HeaderMap) -> Option<String> {
        let name = self.style.cookie();
        let cookies = headers.get(http::header::COOKIE)?.to_str().ok()?;
        let value = cookies.split(';').find_map(|c| c.trim().strip_prefix(name)?.strip_prefix('='))?;
        let plain = self.open(value)?;
        match self.style {
            Style::Laravel => self.sessions.lock().expect("lock").get(&plain).cloned(),
            Style::Flask => plain.split_once('.').map(|(user, _)| user.to_owned()),
        }
    }

    fn set_cookie(&self, user: &str) -> (http::HeaderName, String) {
        (http::header::SET_COOKIE, format!("{}={}; Path=/; HttpOnly", self.style.cookie(), self.cookie_for(user)))
    }
}

async fn whoami(State(app): State<Shared>, headers: HeaderMap) -> Response {
    if app.whoami_down.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let Some(user) = app.user_of(&headers) else {
        return (StatusCode::UNAUTHORIZED, axum::Json(json!({"message": "Unauthenticated."}))).into_response();
    };
    match app.style {
        Style::Laravel => axum::Json(json!({"id": user, "name": user.to_uppercase()})).into_response(),
        Style::Flask => ([("x-user-id", user)], "ok").into_response(),
    }
}

async fn orders(State(app): State<Shared>, headers: HeaderMap) -> Response {
    let Some(user) = app.user_of(&headers) else { return StatusCode::UNAUTHORIZED.into_response() };
    let n = {
        let mut orders = app.orders.lock().expect("lock");
        let n = orders.entry(user.clone()).or_default();
        *n += 1;
        *n
    };
    (StatusCode::CREATED, [app.set_cookie(&user)], axum::Json(json!({"user": user, "order": n}))).into_response()
}

async fn start_app(style: Style) -> (Shared, String) {
    let app = Arc::new(App {
        style,
        sessions: Mutex::default(),
        orders: Mutex::default(),
        iv: AtomicU64::new(1),
        whoami_down: AtomicBool::new(false),
    });
    let router = axum::Router::new()
        .route("/whoami", axum::routing::get(whoami))
        .route("/orders", axum::routing::post(orders))
        .with_state(Arc::clone(&app));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, router).await });
    (app, url)
}

async fn gateway(upstream: &str, scope: &str, identity: &str) -> (TestServer, ApiClient) {
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n\n[[gateway.routes]]\npath = \"/orders\"\n\
         methods = [\"POST\"]\nscope = [{scope}]\n\n{identity}"
    );
    let doc: toml::Table = text.parse().expect("toml");
    let gateway: idem_server::config::GatewayConfig = doc["gateway"].clone().try_into().expect("a valid [gateway]");
    let server = TestServer::start_with(|c| c.gateway = Some(gateway), Arc::new(SystemClock)).await;
    let client = ApiClient::new(server.gateway_url.as_deref().expect("gateway"), None).expect("client");
    (server, client)
}

async fn order(client: &ApiClient, key: &str, cookie: Option<&str>) -> Reply {
    let mut headers = vec![("content-type", "application/json"), ("idempotency-key", key)];
    headers.extend(cookie.map(|c| ("cookie", c)));
    client
        .send_with(Method::POST, "/orders", Some(Bytes::from_static(b"{\"item\":\"lamp\"}")), &headers)
        .await
        .expect("request")
}

/// The `name=value` of the response's `Set-Cookie`, as a browser sends it back.
fn next_cookie(reply: &Reply) -> String {
    let set = reply.headers.get(http::header::SET_COOKIE).and_then(|v| v.to_str().ok()).expect("a Set-Cookie");
    set.split(';').next().expect("name=value").to_owned()
}

fn replayed(reply: &Reply) -> bool {
    reply.headers.get("idempotent-replayed").is_some_and(|v| v == "true")
}

fn orders_of(app: &App, user: &str) -> u64 {
    app.orders.lock().expect("lock").get(user).copied().unwrap_or(0)
}

async fn a_rotating_session_is_one_caller(style: Style, identity: &str) {
    let (app, upstream) = start_app(style).await;
    let (server, gw) = gateway(&upstream, "\"identity\"", identity).await;
    let alice = format!("{}={}", style.cookie(), app.cookie_for("alice"));
    let first = order(&gw, "k1", Some(&alice)).await;
    assert_eq!((first.status.as_u16(), replayed(&first)), (201, false), "{}", String::from_utf8_lossy(&first.body));
    let rotated = next_cookie(&first);
    assert_ne!(rotated, alice, "the app set a cookie of another text");
    let double_tap = order(&gw, "k1", Some(&rotated)).await;
    assert_eq!((double_tap.status.as_u16(), replayed(&double_tap)), (201, true), "the double-tap is a replay");
    assert_eq!(double_tap.body, first.body);
    assert_eq!(orders_of(&app, "alice"), 1, "alice's order ran once");

    let bob = format!("{}={}", style.cookie(), app.cookie_for("bob"));
    let bobs = order(&gw, "k1", Some(&bob)).await;
    assert_eq!((bobs.status.as_u16(), replayed(&bobs)), (201, false), "bob's own execution, never alice's answer");
    assert_eq!(bobs.json()["user"], "bob");

    let forged = format!("{}=not-a-session", style.cookie());
    let refused = order(&gw, "k2", Some(&forged)).await;
    assert_eq!(refused.status.as_u16(), 401, "the app's own refusal");
    assert_eq!(refused.json()["message"], "Unauthenticated.", "its body as the app wrote it");
    let anonymous = order(&gw, "k2", None).await;
    assert_eq!(anonymous.status.as_u16(), 400, "no credential, no caller: scope-missing");

    app.whoami_down.store(true, Ordering::SeqCst);
    let carol = format!("{}={}", style.cookie(), app.cookie_for("carol"));
    let down = order(&gw, "k3", Some(&carol)).await;
    assert_eq!(down.status.as_u16(), 503, "the app cannot say who is calling: never a guess");
    assert!(down.headers.contains_key("retry-after"));
    assert_eq!(down.json()["type"], "urn:idem:problem:identity-unavailable");
    assert_eq!((orders_of(&app, "bob"), orders_of(&app, "carol")), (1, 0), "nothing else reached the orders");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_laravel_style_session_encrypted_anew_is_one_caller() {
    let identity = "[gateway.identity]\nurl = \"/whoami\"\nid_field = \"id\"\ntimeout = \"1s\"\n";
    a_rotating_session_is_one_caller(Style::Laravel, identity).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flask_style_session_signed_anew_is_one_caller() {
    let identity = "[gateway.identity]\nurl = \"/whoami\"\nid_header = \"X-User-Id\"\ntimeout = \"1s\"\n";
    a_rotating_session_is_one_caller(Style::Flask, identity).await;
}

/// What `identity` is for: scoped by the cookie's text, the double-tap after the first response
/// is another caller's request, and the order runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_by_a_rotating_cookie_the_double_tap_runs_twice() {
    let (app, upstream) = start_app(Style::Laravel).await;
    let (server, gw) = gateway(&upstream, "\"cookie:laravel_session\"", "").await;
    let alice = format!("laravel_session={}", app.cookie_for("alice"));
    let first = order(&gw, "k1", Some(&alice)).await;
    let double_tap = order(&gw, "k1", Some(&next_cookie(&first))).await;
    assert_eq!((double_tap.status.as_u16(), replayed(&double_tap)), (201, false));
    assert_eq!(orders_of(&app, "alice"), 2, "ran twice: why the identity part exists");
    server.stop().await;
}
