//! Operational endpoints: liveness, readiness (the store answers a read and a write), Prometheus
//! metrics and the OpenAPI document.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::json;

use crate::web::error::ApiError;
use crate::web::state::AppState;

/// The process is up.
pub async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// The store can be read and written now.
pub async fn readyz(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    match tokio::time::timeout(Duration::from_secs(3), state.stores.lifecycle.check_ready()).await {
        Ok(Ok(())) => Ok(Json(json!({"status": "ready"}))),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(ApiError::Unavailable),
    }
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    crate::worker::gauges::claims_at_scrape(state.stores.claims.as_ref()).await;
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], crate::telemetry::metrics_handle().render())
}

pub async fn openapi() -> impl IntoResponse {
    Json(super::openapi::document())
}
