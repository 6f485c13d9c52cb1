//! An axum orders service made idempotent with `IdempotencyLayer`: `POST /orders` with an
//! `Idempotency-Key` creates one order however often the client retries. Its users log in with a
//! session cookie, so each one's keys are told apart by that cookie (`scope`).
//!
//! ```sh
//! cargo run -p idem-gateway --example axum_orders          # listens on 127.0.0.1:3030
//! curl -i -XPOST localhost:3030/orders -H 'Idempotency-Key: "abc"' -H 'Cookie: session=alice' \
//!      -H 'Content-Type: application/json' -d '{"item":"book"}'
//! ```
//! Run the curl twice: the second answer is the first one, with `Idempotent-Replayed: true`. With
//! `session=bob` the same key is Bob's own; with no session cookie it is 400 (`scope-missing`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use idem_core::SystemClock;
use idem_core::gateway::{KeyPolicy, PathPattern};
use idem_gateway::{Engine, EngineConfig, IdempotencyLayer, RoutePolicy, Routes, ScopePart};
use idem_log::{LogOptions, LogStore};

async fn create_order(State(next): State<Arc<AtomicU64>>, body: String) -> (StatusCode, String) {
    let id = next.fetch_add(1, Ordering::SeqCst) + 1;
    println!("creating order {id}: {body}");
    (StatusCode::CREATED, format!("{{\"order_id\":{id}}}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Any store backend works; this one keeps its keys in ./orders-idem-data.
    let store = Arc::new(LogStore::open("./orders-idem-data".as_ref(), Arc::new(SystemClock), LogOptions::default())?);
    let engine = Arc::new(Engine::new(store, Arc::new(SystemClock), EngineConfig::default()));
    let mut orders = RoutePolicy::new(PathPattern::parse("/orders")?);
    orders.key = KeyPolicy::Required;
    orders.scope = vec![ScopePart::Cookie("session".into())];
    let app = Router::new()
        .route("/orders", post(create_order))
        .with_state(Arc::new(AtomicU64::new(0)))
        .layer(IdempotencyLayer::new(engine, Routes::new([orders])));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3030").await?;
    println!("orders service on http://127.0.0.1:3030");
    axum::serve(listener, app).await?;
    Ok(())
}
