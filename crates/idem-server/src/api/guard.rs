//! What every request on the API listener is checked for before a handler runs, so that idem, not
//! the HTTP library, answers in problem+json: an `Expect` other than `100-continue` (417), headers
//! larger than `limits.max_header_bytes` (431), and a `Content-Length` over
//! `limits.max_body_bytes` (413, before the body is read, so `Expect: 100-continue` uploads are
//! never invited to send it). What the HTTP library refuses on its own (a header block past its
//! buffer, a malformed `Content-Length`) it answers itself, with an empty body.

use axum::extract::Request;
use axum::http::header;

use super::error::ApiError;
use super::state::AppState;

/// Why `request` is refused before any handler runs, if it is.
pub fn refuse(state: &AppState, request: &Request) -> Option<ApiError> {
    let headers = request.headers();
    if let Some(expect) = headers.get(header::EXPECT)
        && !expect.as_bytes().eq_ignore_ascii_case(b"100-continue")
    {
        return Some(ApiError::ExpectationFailed);
    }
    let header_bytes: usize = headers.iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum();
    let max_header_bytes = state.config.limits.max_header_bytes;
    if header_bytes > max_header_bytes {
        return Some(ApiError::HeadersTooLarge(max_header_bytes));
    }
    idem_gateway::declared_too_large(headers, state.max_body_bytes).map(ApiError::from)
}
