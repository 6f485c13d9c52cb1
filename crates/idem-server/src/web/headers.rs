//! The headers every answer under `/ui` carries, whoever gave it (a page, the token prompt, an
//! error, a refused host): the dashboard's own script and styles only, no framing, no sniffing, no
//! referrer beyond idem, nothing cached.

use axum::http::{HeaderMap, HeaderValue, header};

/// The headers every answer under `/ui` carries, whoever gave it (a page, the prompt, an error, an
/// asset): no framing, no script but the dashboard's own, no sniffing.
pub fn secure_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}
