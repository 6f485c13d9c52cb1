//! The router: one flat route table, the shared state, and the layers every request passes.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idem_core::Store;

use crate::auth::Tokens;
use crate::config::Config;
use crate::error::ApiError;
use crate::{claim, event, health};

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub config: Arc<Config>,
    pub tokens: Arc<Tokens>,
    pub max_body_bytes: usize,
    /// Wakes the delivery worker when new work is queued.
    pub delivery_wake: Arc<tokio::sync::Notify>,
}

impl AppState {
    pub fn new(config: Config, store: Arc<dyn Store>, delivery_wake: Arc<tokio::sync::Notify>) -> Self {
        let tokens = Arc::new(Tokens::new(config.auth.tokens.iter().map(|t| t.expose())));
        let max_body_bytes = config.limits.max_body_bytes;
        Self { store, config: Arc::new(config), tokens, max_body_bytes, delivery_wake }
    }
}

pub fn app(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/v1/claims/{ns}", post(claim::create))
        .route("/v1/claims/{ns}/batch", post(claim::batch))
        .route("/v1/claims/{ns}/lookup", post(claim::lookup))
        .route("/v1/claims/{ns}/{id}", get(claim::read).delete(claim::delete))
        .route("/v1/sources/{name}/events", post(event::intake))
        .route("/v1/receipts", get(event::list))
        .route("/v1/receipts/{id}", get(event::read))
        .route("/v1/receipts/{id}/replay", post(event::replay))
        .route_layer(middleware::from_fn_with_state(state.clone(), crate::auth::require_token));
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(health::openapi))
        .merge(v1)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(record_request))
        .with_state(state)
}

async fn not_found(State(_): State<AppState>) -> ApiError {
    ApiError::NotFound("no such route".into())
}

async fn method_not_allowed(State(_): State<AppState>) -> ApiError {
    ApiError::MethodNotAllowed
}

/// Counts every request and records its latency, labelled by the matched route (never the raw
/// path, which would make one series per key).
async fn record_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route =
        request.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().as_str().to_owned();
    let response = next.run(request).await.into_response();
    let status = response.status().as_u16().to_string();
    metrics::counter!("idem_http_requests_total", "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("idem_http_request_duration_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}
