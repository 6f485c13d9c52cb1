//! The dashboard (contract §7): `GET /ui` on the API listener, served by this binary with its
//! two assets compiled in (`assets/ui.css`, `assets/ui.js`). Pages are rendered here as HTML;
//! the script, about 150 lines and no framework, adds the rest: it sends the token as a Bearer
//! header, turns links and forms into requests that swap the page (so permalinks stay real
//! URLs), and refreshes live sections until paused. There is no build step and nothing to
//! vendor; htmx would have done the swapping, but not the token handling, and at 50 KB it is ten
//! times the code this needs.
//!
//! With `[auth] tokens` set, every page but the prompt needs the token: a request without it gets
//! the prompt (401) and nothing else. The token travels only in the `Authorization` header. Every
//! POST must carry `idem-ui: 1`, which only the dashboard's own script sends (a cross-site form
//! cannot set a header), and pages forbid framing and any script but their own.

mod html;
mod pages;
pub mod tally;

pub use pages::OverviewCounts;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::api::AppState;

const CSS: &str = include_str!("assets/ui.css");
const JS: &str = include_str!("assets/ui.js");

pub fn routes(state: AppState) -> Router<AppState> {
    let pages = Router::new()
        .route("/ui", get(pages::overview))
        .route("/ui/", get(pages::overview))
        .route("/ui/receipts", get(pages::receipts))
        .route("/ui/receipts/{id}", get(pages::receipt))
        .route("/ui/receipts/{id}/replay", post(pages::replay_one))
        .route("/ui/receipts/{id}/discard", post(pages::discard_one))
        .route("/ui/replay", get(pages::bulk).post(pages::bulk_run))
        .route("/ui/lookup", get(pages::lookup))
        .route("/ui/lookup/delete", post(pages::lookup_delete))
        .route_layer(middleware::from_fn_with_state(state, gate));
    Router::new()
        .route("/ui/assets/ui.css", get(|| async { asset("text/css; charset=utf-8", CSS) }))
        .route("/ui/assets/ui.js", get(|| async { asset("text/javascript; charset=utf-8", JS) }))
        .merge(pages)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The token check, the POST guard, and the headers every page carries.
async fn gate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if request.method() == Method::POST && request.headers().get("idem-ui").is_none_or(|v| v != "1") {
        return html_response(
            StatusCode::FORBIDDEN,
            html::page(
                "Forbidden",
                html::Tab::None,
                false,
                "<h1>Forbidden</h1><p>Dashboard actions are sent by the dashboard's own script.</p>",
            ),
        );
    }
    if !state.tokens.is_empty() {
        match crate::api::auth::presented(request.headers()) {
            Some(token) if state.tokens.accepts(token) => {}
            other => return html_response(StatusCode::UNAUTHORIZED, html::prompt(other.is_some())),
        }
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}

fn html_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
