//! The dashboard (docs/dashboard.md): `GET /ui` on the API listener, served by this binary with
//! its two assets compiled in (`assets/ui.css`, `assets/ui.js`). Pages are rendered here as HTML
//! with maud's compile-time templates, which escape every value spliced in; the script, about
//! 160 lines and no framework, adds the rest: it sends the token as a Bearer header, turns links
//! and forms into requests that swap the page (so permalinks stay real URLs), and refreshes live
//! sections until paused. There is no build step and nothing to vendor; htmx would have done the
//! swapping, but not the token handling, and at 50 KB it is ten times the code this needs.
//!
//! With tokens configured, every page but the prompt needs one: a request without it gets the
//! prompt (401) and nothing else. The token travels only in the `Authorization` header. The
//! dashboard follows the token (docs/security.md): any token sees every page (within its namespaces and
//! sources), and only an `admin` token is shown, and may use, the actions (replay, discard, bulk
//! replay, delete). Every POST must carry `idem-ui: 1`, which only the dashboard's own script sends
//! (a cross-site form cannot set a header), and every answer under `/ui`, the prompt and error
//! pages included, forbids framing and any script but the dashboard's own.

mod html;
mod pages;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::config::Can;
use crate::web::auth::{Caller, TokenLabel};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::web::AppState;

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

/// A dashboard request: the server's state and who asks. Derefs to the state.
pub struct Ui {
    pub state: AppState,
    pub caller: Caller,
}

impl std::ops::Deref for Ui {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.state
    }
}

impl FromRequestParts<AppState> for Ui {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let caller = parts.extensions.get::<Caller>().cloned().unwrap_or(Caller::Anonymous);
        Ok(Ui { state: state.clone(), caller })
    }
}

impl Ui {
    /// Whether this caller is shown, and may use, the actions on `source`'s receipts.
    pub fn acts_on_source(&self, source: &str) -> bool {
        self.caller.can(Can::Admin) && self.caller.sees_source(source)
    }

    /// Whether this caller is shown, and may use, deletes in `ns`.
    pub fn acts_on_namespace(&self, ns: &str) -> bool {
        self.caller.can(Can::Admin) && self.caller.sees_namespace(ns)
    }
}

/// The token check and the POST guard: the prompt for no token or an unknown one, 403 for an
/// action without the dashboard's header or without an admin token.
async fn gate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let caller = state.tokens.caller(request.headers());
    if request.method() == Method::POST && request.headers().get("idem-ui").is_none_or(|v| v != "1") {
        return forbidden(&caller, "Dashboard actions are sent by the dashboard's own script.");
    }
    if matches!(caller, Caller::Anonymous) {
        let rejected = crate::web::auth::presented(request.headers()).is_some();
        return html_response(StatusCode::UNAUTHORIZED, html::prompt(rejected));
    }
    if request.method() == Method::POST && !caller.can(Can::Admin) {
        let why = format!(
            "Token {} may view the dashboard but not act: replay, discard and delete need a token with can = \"admin\".",
            caller.name()
        );
        return forbidden(&caller, &why);
    }
    let label = TokenLabel::of(&caller);
    request.extensions_mut().insert(caller);
    let mut response = next.run(request).await;
    response.extensions_mut().insert(label);
    response
}

fn forbidden(caller: &Caller, why: &str) -> Response {
    let content = maud::html! { h1 { "Forbidden" } (html::notice("error", why)) };
    html_response(
        StatusCode::FORBIDDEN,
        html::page("Forbidden", html::Tab::None, signed_in(caller).as_deref(), content),
    )
}

/// What the page's header says about the token in use, when there is one.
pub fn signed_in(caller: &Caller) -> Option<String> {
    match caller {
        Caller::Token(grant) => Some(format!("{} ({})", grant.name, grant.can.as_str())),
        Caller::Open | Caller::Anonymous => None,
    }
}

fn html_response(status: StatusCode, body: maud::Markup) -> Response {
    let mut response = (status, body.into_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
