//! The HTTP API on the main listener: `/v1` (one file per resource: claims, operations, event
//! intake, receipts), health, metrics and the OpenAPI document. This file is the router — one flat route
//! table — and the layers every request passes; handlers share [`AppState`], fail with
//! [`ApiError`] (always problem+json), and read bodies through [`extract`] (one size limit,
//! `limits.max_body_bytes`, everywhere).

pub mod auth;
pub mod claim;
pub mod error;
pub mod event;
pub mod extract;
pub mod guard;
pub mod health;
pub mod openapi;
pub mod operation;
pub mod receipt;
pub mod state;

use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

pub use error::ApiError;
pub use state::AppState;

/// The header on an answer that was stored earlier (a completed operation's result, a resent
/// event's receipt), as the gateway marks its replays: the work was not done again.
pub const REPLAYED: (&str, &str) = ("idempotent-replayed", "true");

pub fn app(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/v1/claims/{ns}", post(claim::create))
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
        .merge(crate::ui::routes(state.clone()))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), front))
        // Bodies are read through `extract`, under `limits.max_body_bytes`; axum's own 2 MiB
        // default would answer first, in plain text.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

async fn not_found(State(_): State<AppState>, request: Request) -> ApiError {
    let path: String = request.uri().path().chars().take(200).collect();
    ApiError::NoRoute(format!("{} {path}", request.method()))
}

async fn method_not_allowed(State(_): State<AppState>) -> ApiError {
    ApiError::MethodNotAllowed
}

/// What every request passes, in one layer: the [`guard`] checks, then the handler; and every
/// request, refused or not, is counted with its latency, labelled by the matched route (never the
/// raw path, which would make one series per key), the method (any outside HTTP's standard set is
/// "other", so a client cannot mint series), the status and the token's name ("none" without a
/// valid one; "signature" for an event let in by its signature alone). One allocation per
/// request: the route. Every answer under `/ui`, whoever gave it, forbids framing.
async fn front(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route: std::sync::Arc<str> =
        request.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".into(), |p| p.as_str().into());
    let method = method_label(request.method());
    let ui = request.uri().path().starts_with("/ui");
    let mut response = match guard::refuse(&state, &request) {
        Some(error) => error.into_response(),
        None => next.run(request).await,
    };
    if ui {
        crate::ui::secure_headers(response.headers_mut());
    }
    let status = status_label(response.status());
    let token = response.extensions().get::<auth::TokenLabel>().map_or_else(|| "none".into(), |t| t.0.clone());
    metrics::counter!("idem_http_requests_total", "method" => method, "route" => route.clone(), "status" => status, "token" => token)
        .increment(1);
    metrics::histogram!("idem_http_request_duration_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}

fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    [Method::GET, Method::POST, Method::PUT, Method::DELETE, Method::PATCH, Method::HEAD, Method::OPTIONS]
        .iter()
        .zip(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
        .find_map(|(m, label)| (m == method).then_some(label))
        .unwrap_or("other")
}

/// The status as a label: the codes idem answers, without allocating; any other as its digits.
fn status_label(status: axum::http::StatusCode) -> metrics::SharedString {
    const KNOWN: [(u16, &str); 20] = [
        (200, "200"),
        (201, "201"),
        (202, "202"),
        (204, "204"),
        (304, "304"),
        (400, "400"),
        (401, "401"),
        (403, "403"),
        (404, "404"),
        (405, "405"),
        (409, "409"),
        (413, "413"),
        (415, "415"),
        (417, "417"),
        (422, "422"),
        (429, "429"),
        (431, "431"),
        (500, "500"),
        (502, "502"),
        (503, "503"),
    ];
    let code = status.as_u16();
    KNOWN.iter().find(|(c, _)| *c == code).map_or_else(|| code.to_string().into(), |(_, label)| (*label).into())
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};

    #[test]
    fn labels_are_bounded_and_exact() {
        assert_eq!(super::method_label(&Method::POST), "POST");
        assert_eq!(super::method_label(&Method::from_bytes(b"BREW").expect("method")), "other");
        for code in [200u16, 201, 404, 503, 504, 599] {
            let status = StatusCode::from_u16(code).expect("status");
            assert_eq!(super::status_label(status).as_ref(), code.to_string());
        }
    }
}
