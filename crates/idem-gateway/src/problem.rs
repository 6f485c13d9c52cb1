//! The gateway's own answers, as RFC 9457 problem+json like the rest of idem.

use http::{HeaderValue, Response, StatusCode, header};
use serde_json::json;

use crate::{GatewayBody, full};

pub fn problem(status: StatusCode, kind: &str, detail: &str) -> Response<GatewayBody> {
    let body = json!({
        "type": format!("urn:idem:problem:{kind}"),
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut response = Response::new(full(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    response
}

/// 409 for a duplicate of a request that is still running.
pub fn in_flight(retry_after_secs: u64) -> Response<GatewayBody> {
    let mut response = problem(
        StatusCode::CONFLICT,
        "request-in-flight",
        "a request with this Idempotency-Key is still being processed; retry after the indicated time",
    );
    if let Ok(value) = HeaderValue::from_str(&retry_after_secs.max(1).to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}
