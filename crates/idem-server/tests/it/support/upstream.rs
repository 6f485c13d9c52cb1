//! A real upstream API on a real socket, for the gateway's tests. It counts every request it
//! receives by path, remembers the `Idempotency-Key` headers it saw, and the raw path and query of
//! every request that reached it, routed or not.
//!
//! - `POST /orders` — 201 with a new order number; `?delay_ms=N` (or header `x-delay-ms: N`,
//!   which is not part of the fingerprint) answers after N ms.
//! - `POST /status/{code}` — answers that status (and counts).
//! - `POST /flaky` — 503 the first time, 201 after.
//! - `POST /big?bytes=N` — 200 with a body of N bytes.
//! - `GET /plain` — 200 "hello", for pass-through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

#[derive(Default)]
pub struct Seen {
    pub counts: HashMap<String, usize>,
    pub keys: Vec<Option<String>>,
    /// Every request's path and query, byte for byte as it arrived.
    pub raw: Vec<String>,
}

#[derive(Clone)]
pub struct Upstream {
    pub url: String,
    pub seen: Arc<Mutex<Seen>>,
}

impl Upstream {
    pub async fn start() -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let app = Router::new()
            .route("/orders", post(orders))
            .route("/status/{code}", post(status))
            .route("/flaky", post(flaky))
            .route("/big", post(big))
            .route("/plain", get(|| async { "hello" }))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .layer(axum::middleware::from_fn_with_state(Arc::clone(&seen), record_raw))
            .with_state(Arc::clone(&seen));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, seen }
    }

    /// How many requests reached `path`.
    pub fn count(&self, path: &str) -> usize {
        self.seen.lock().expect("lock").counts.get(path).copied().unwrap_or(0)
    }

    pub fn keys(&self) -> Vec<Option<String>> {
        self.seen.lock().expect("lock").keys.clone()
    }

    /// The path and query of every request that reached the upstream, as it arrived.
    pub fn raw(&self) -> Vec<String> {
        self.seen.lock().expect("lock").raw.clone()
    }
}

async fn record_raw(
    State(seen): State<SeenRef>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let raw = request.uri().path_and_query().map_or_else(|| request.uri().path().to_owned(), |p| p.to_string());
    seen.lock().expect("lock").raw.push(raw);
    next.run(request).await
}

type SeenRef = Arc<Mutex<Seen>>;

fn record(seen: &SeenRef, path: &str, headers: &HeaderMap) -> usize {
    let mut seen = seen.lock().expect("lock");
    seen.keys.push(headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned));
    let count = seen.counts.entry(path.to_owned()).or_default();
    *count += 1;
    *count
}

async fn orders(
    State(seen): State<SeenRef>,
    Query(q): Query<HashMap<String, u64>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let n = record(&seen, "/orders", &headers);
    let header_delay = headers.get("x-delay-ms").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    if let Some(ms) = q.get("delay_ms").copied().or(header_delay) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let order = json!({"order_id": n, "request": body});
    (StatusCode::CREATED, [("x-order-id", n.to_string())], axum::Json(order)).into_response()
}

async fn status(State(seen): State<SeenRef>, Path(code): Path<u16>, headers: HeaderMap) -> Response {
    let n = record(&seen, &format!("/status/{code}"), &headers);
    (StatusCode::from_u16(code).expect("valid status"), format!("attempt {n}")).into_response()
}

async fn flaky(State(seen): State<SeenRef>, headers: HeaderMap) -> Response {
    match record(&seen, "/flaky", &headers) {
        1 => (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response(),
        n => (StatusCode::CREATED, format!("done on attempt {n}")).into_response(),
    }
}

async fn big(State(seen): State<SeenRef>, Query(q): Query<HashMap<String, usize>>, headers: HeaderMap) -> Response {
    record(&seen, "/big", &headers);
    "x".repeat(q.get("bytes").copied().unwrap_or(0)).into_response()
}
