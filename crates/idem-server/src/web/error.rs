//! The one HTTP error type. Every failure a client can see is an `ApiError`, rendered as RFC 9457
//! `application/problem+json` with a single `status_code()` match. Internal causes are logged once
//! here and never shown: the body says what went wrong in the client's terms only.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idem_core::{Invalid, StoreError};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Invalid(#[from] Invalid),
    #[error("{0}")]
    NotFound(String),
    /// A path that is no route at all (a wrong base URL, a typo): never read as "absent".
    #[error("no route {0}: idem's API is under /v1 (GET /openapi.json lists every route); check the client's base URL")]
    NoRoute(String),
    #[error("{0}")]
    Conflict(String),
    /// The operation is held by someone else; retry after this many seconds.
    #[error("someone else is doing this work now; retry after the indicated time, or begin with wait_seconds")]
    InProgress(u64),
    #[error("this key was begun with a different request; nothing was changed")]
    FingerprintMismatch,
    #[error("this token no longer holds the key: its lease ended or it was released, completed or taken over")]
    LeaseLost,
    #[error("the event's signature could not be verified: {0}")]
    BadSignature(String),
    #[error(
        "a valid bearer token is required: send the header `Authorization: Bearer <token>` (the CLI: --token or the IDEM_TOKEN environment variable; the clients: their `token` option)"
    )]
    Unauthorized,
    /// A known caller outside what it may do; the text names what was refused. Nothing changed.
    #[error("{0}; nothing was changed")]
    Forbidden(String),
    /// With no tokens configured: a `Host` that is not idem's (DNS rebinding), or a cross-site
    /// `Origin` on a request that changes something.
    #[error("{0}")]
    ForbiddenHost(String),
    #[error("the request body is larger than limits.max_body_bytes ({0} bytes)")]
    PayloadTooLarge(usize),
    #[error("the request headers are larger than limits.max_header_bytes ({0} bytes)")]
    HeadersTooLarge(usize),
    #[error("the only Expect this server supports is 100-continue")]
    ExpectationFailed,
    #[error("the request body must be JSON (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error("this method is not allowed on this resource")]
    MethodNotAllowed,
    #[error("the store is unavailable; nothing was changed, retry shortly")]
    Unavailable,
    /// The store cannot work as configured; the text (the store's) says what to change.
    #[error("the store is unavailable: {0}; nothing was changed")]
    StoreMisconfigured(String),
    /// The store's answer was lost after the write was sent: it may or may not have been made.
    #[error(
        "the store's answer was lost after the change was sent: it may or may not have been made. Retry with the same client_token to learn which (a claim or a begin that was made answers as made for its own client_token)"
    )]
    OutcomeUnknown,
    #[error("an internal error occurred; nothing was changed")]
    Internal,
}

/// The problem+json body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem, e.g. `urn:idem:problem:invalid-request`.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    /// For invalid requests: the field at fault, e.g. `items[3].parts[0]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub field: Option<String>,
}

impl ApiError {
    pub fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Invalid(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) | ApiError::NoRoute(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::InProgress(_) | ApiError::LeaseLost => StatusCode::CONFLICT,
            ApiError::FingerprintMismatch => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::BadSignature(_) => StatusCode::UNAUTHORIZED,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::ForbiddenHost(_) => StatusCode::FORBIDDEN,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::ExpectationFailed => StatusCode::EXPECTATION_FAILED,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unavailable | ApiError::StoreMisconfigured(_) | ApiError::OutcomeUnknown => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A short stable name: the problem type's last segment and the `kind` label of
    /// `idem_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::Invalid(_) => "invalid-request",
            ApiError::NotFound(_) => "not-found",
            ApiError::NoRoute(_) => "no-such-route",
            ApiError::Conflict(_) => "conflict",
            ApiError::InProgress(_) => "in-progress",
            ApiError::FingerprintMismatch => "fingerprint-mismatch",
            ApiError::LeaseLost => "lease-lost",
            ApiError::BadSignature(_) => "invalid-signature",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden(_) | ApiError::ForbiddenHost(_) => "forbidden",
            ApiError::PayloadTooLarge(_) => "payload-too-large",
            ApiError::HeadersTooLarge(_) => "headers-too-large",
            ApiError::ExpectationFailed => "expectation-failed",
            ApiError::UnsupportedMediaType => "unsupported-media-type",
            ApiError::MethodNotAllowed => "method-not-allowed",
            // A misconfigured store is one kind of unavailable store: clients retry it, and the
            // alert on `store-unavailable` fires.
            ApiError::Unavailable | ApiError::StoreMisconfigured(_) => "store-unavailable",
            ApiError::OutcomeUnknown => "outcome-unknown",
            ApiError::Internal => "internal",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            ApiError::Invalid(_) => "Invalid request",
            ApiError::NotFound(_) => "Not found",
            ApiError::NoRoute(_) => "No such route",
            ApiError::Conflict(_) => "Conflict",
            ApiError::InProgress(_) => "In progress",
            ApiError::FingerprintMismatch => "Fingerprint mismatch",
            ApiError::LeaseLost => "Lease lost",
            ApiError::BadSignature(_) => "Invalid signature",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden(_) | ApiError::ForbiddenHost(_) => "Forbidden",
            ApiError::PayloadTooLarge(_) => "Payload too large",
            ApiError::HeadersTooLarge(_) => "Request header fields too large",
            ApiError::ExpectationFailed => "Expectation failed",
            ApiError::UnsupportedMediaType => "Unsupported media type",
            ApiError::MethodNotAllowed => "Method not allowed",
            ApiError::Unavailable | ApiError::StoreMisconfigured(_) => "Store unavailable",
            ApiError::OutcomeUnknown => "Outcome unknown",
            ApiError::Internal => "Internal error",
        }
    }

    pub fn problem(&self) -> Problem {
        let field = match self {
            ApiError::Invalid(invalid) => Some(invalid.field.clone()),
            _ => None,
        };
        Problem {
            kind: format!("urn:idem:problem:{}", self.kind()),
            title: self.title(),
            status: self.status_code().as_u16(),
            detail: self.to_string(),
            field,
        }
    }
}

impl From<idem_gateway::BodyError> for ApiError {
    fn from(e: idem_gateway::BodyError) -> Self {
        match e {
            idem_gateway::BodyError::TooLarge(limit) => ApiError::PayloadTooLarge(limit),
            idem_gateway::BodyError::Unreadable => ApiError::Invalid(Invalid::new("body", e.detail())),
        }
    }
}

/// Store faults are told at most once per kind every 10 seconds: a store that is down fails every
/// request, and its log should say so once in a while, not once per request.
static STORE_FAULTS: std::sync::LazyLock<idem_core::throttle::Throttle> =
    std::sync::LazyLock::new(|| idem_core::throttle::Throttle::new(std::time::Duration::from_secs(10)));

fn tell_store_fault(what: &str, cause: &str) {
    let kind = cause.split(':').next().unwrap_or(cause);
    if let Some(skipped) = STORE_FAULTS.admit(kind, std::time::Instant::now()) {
        tracing::warn!(%cause, more_like_it = skipped, "{what}");
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(cause) => {
                tell_store_fault("store unavailable", &cause);
                ApiError::Unavailable
            }
            StoreError::OutcomeUnknown(cause) => {
                tell_store_fault("store's answer lost: outcome unknown", &cause);
                ApiError::OutcomeUnknown
            }
            // The store logged it once when it found it; the client is told what to change.
            StoreError::Misconfigured(what) => ApiError::StoreMisconfigured(what),
            StoreError::Closed => ApiError::Unavailable,
            StoreError::Internal(cause) => {
                tracing::error!(%cause, "store internal error");
                ApiError::Internal
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        idem_metrics::http::problem(self.kind());
        let status = self.status_code();
        let mut response = (status, Json(self.problem())).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        match self {
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::Unavailable | ApiError::StoreMisconfigured(_) | ApiError::OutcomeUnknown => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::InProgress(seconds) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
            }
            _ => {}
        }
        response
    }
}
