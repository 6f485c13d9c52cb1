//! The HTTP API on the main listener: `/v1` (one file per resource: claims, operations, event
//! intake, receipts), health, metrics and the OpenAPI document. This file is its flat route table;
//! handlers share `web::AppState`, fail with `web::ApiError` (always problem+json), and read bodies
//! through `web::extract` (one size limit, `limits.max_body_bytes`, everywhere). The router that
//! serves it beside the dashboard is `crate::router`.

pub mod claim;
pub mod event;
pub mod health;
pub mod openapi;
pub mod operation;
pub mod receipt;

use axum::Router;
use axum::middleware;
use axum::routing::{get, post};

use crate::web::{AppState, auth};

/// The header on an answer that was stored earlier (a completed operation's result, a resent
/// event's receipt), as the gateway marks its replays: the work was not done again.
pub const REPLAYED: (&str, &str) = ("idempotent-replayed", "true");

/// The API's routes: `/v1` behind authentication, and the operational endpoints (health, metrics,
/// the OpenAPI document) open to all.
pub fn routes(state: AppState) -> Router<AppState> {
    let v1 = Router::new()
        .route("/v1/claims/{ns}", post(claim::create).get(claim::list).delete(claim::delete_prefix))
        .route("/v1/claims/{ns}/batch", post(claim::batch))
        .route("/v1/claims/{ns}/lookup", post(claim::lookup))
        .route("/v1/claims/{ns}/prefix", post(claim::prefix))
        .route("/v1/claims/{ns}/{id}", get(claim::read).delete(claim::delete))
        .route("/v1/operations/{ns}/begin", post(operation::begin))
        .route("/v1/operations/{ns}/{id}", get(operation::read).delete(operation::delete))
        .route("/v1/operations/{ns}/{id}/complete", post(operation::complete))
        .route("/v1/operations/{ns}/{id}/release", post(operation::release))
        .route("/v1/operations/{ns}/{id}/extend", post(operation::extend))
        .route("/v1/sources/{name}/events", post(event::intake))
        .route("/v1/receipts", get(receipt::list))
        .route("/v1/receipts/{id}", get(receipt::read))
        .route("/v1/receipts/replay", post(receipt::replay_matching))
        .route("/v1/receipts/{id}/replay", post(receipt::replay))
        .route("/v1/receipts/{id}/discard", post(receipt::discard))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::authenticate));
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(health::openapi))
        .merge(v1)
}
