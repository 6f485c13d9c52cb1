//! The one router of the main listener: the API's routes and the dashboard's side by side, the
//! fallbacks (unknown route, wrong method: problem+json), and the layer every request passes
//! first: the [`guard`] checks, then the handler, then request metrics (and `/ui`'s headers).

use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::web::{ApiError, AppState, auth, guard};

pub fn app(state: AppState) -> Router {
    Router::new()
        .merge(crate::api::routes(state.clone()))
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
        crate::web::headers::secure_headers(response.headers_mut());
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
