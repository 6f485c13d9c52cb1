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
    let method = idem_metrics::http::method_label(request.method().as_str());
    let ui = request.uri().path().starts_with("/ui");
    let (request, body_read) = watch_body(request);
    let mut response = match guard::refuse(&state, &request) {
        Some(error) => error.into_response(),
        None => next.run(request).await,
    };
    if body_read.as_ref().is_some_and(|read| !read.load(std::sync::atomic::Ordering::Acquire)) {
        // Answered before the body was read (a refused token, a bad path): the rest of it is still
        // on the wire, so the connection cannot carry another request. Say so, rather than let a
        // client send its next request on a connection about to close.
        response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    if ui {
        crate::web::headers::secure_headers(response.headers_mut());
    }
    let token = response.extensions().get::<auth::TokenLabel>().map_or_else(|| "none".into(), |t| t.0.clone());
    idem_metrics::http::request(method, route, response.status().as_u16(), token, started.elapsed().as_secs_f64());
    response
}

/// A request whose body is watched: the flag is set once the body has been read to its end. `None`
/// for a request without a body.
fn watch_body(request: Request) -> (Request, Option<std::sync::Arc<std::sync::atomic::AtomicBool>>) {
    use http_body::Body as _;
    if request.body().is_end_stream() {
        return (request, None);
    }
    let read = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (parts, body) = request.into_parts();
    let watched = WatchedBody { inner: body, read: std::sync::Arc::clone(&read) };
    (Request::from_parts(parts, axum::body::Body::new(watched)), Some(read))
}

/// A body that says when it has been read to its end.
struct WatchedBody {
    inner: axum::body::Body,
    read: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl http_body::Body for WatchedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.store(true, std::sync::atomic::Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
