//! The gateway's own answers, as RFC 9457 problem+json like the rest of idem: every kind it can
//! answer, with its status and type, in one place ([`Problem`]).

use http::{HeaderValue, Response, StatusCode, header};
use serde_json::json;

use crate::{GatewayBody, full};

/// Every problem the gateway answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// A guarded method without an `Idempotency-Key` on a route that requires one.
    MissingKey,
    /// An `Idempotency-Key` that is empty, too long, or not printable ASCII.
    InvalidKey,
    /// A body the client broke off, or malformed.
    InvalidRequest,
    /// None of the route's `scope` parts is on the request.
    ScopeMissing,
    /// A bearer JWT that did not verify.
    InvalidToken,
    /// A key whose request is still running.
    Held,
    /// A body over `limits.max_body_bytes`.
    PayloadTooLarge,
    /// A key already used with another request.
    KeyReused,
    /// Something inside idem failed (a stored response unreadable, a task that panicked).
    Internal,
    /// The upstream could not be reached, or broke off.
    UpstreamUnavailable,
    /// The idempotency store did not answer: nothing was forwarded.
    StoreUnavailable,
    /// The keys that verify bearer JWTs could not be fetched.
    JwksUnavailable,
    /// The upstream did not answer within the route's `upstream_timeout`.
    UpstreamTimeout,
}

impl Problem {
    pub fn status(self) -> StatusCode {
        match self {
            Self::MissingKey | Self::InvalidKey | Self::InvalidRequest | Self::ScopeMissing => StatusCode::BAD_REQUEST,
            Self::InvalidToken => StatusCode::UNAUTHORIZED,
            Self::Held => StatusCode::CONFLICT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::UpstreamUnavailable => StatusCode::BAD_GATEWAY,
            Self::StoreUnavailable | Self::JwksUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The problem type's last segment (`urn:idem:problem:<kind>`).
    pub fn kind(self) -> &'static str {
        match self {
            Self::MissingKey => "missing-idempotency-key",
            Self::InvalidKey => "invalid-idempotency-key",
            Self::InvalidRequest => "invalid-request",
            Self::ScopeMissing => "scope-missing",
            Self::InvalidToken => "invalid-token",
            Self::Held => "request-in-flight",
            Self::PayloadTooLarge => "payload-too-large",
            Self::KeyReused => "idempotency-key-reused",
            Self::Internal => "internal",
            Self::UpstreamUnavailable => "upstream-unavailable",
            Self::StoreUnavailable => "store-unavailable",
            Self::JwksUnavailable => "jwks-unavailable",
            Self::UpstreamTimeout => "upstream-timeout",
        }
    }

    /// The problem+json answer, `detail` saying what happened and what the client may do.
    pub fn answer(self, detail: &str) -> Response<GatewayBody> {
        let status = self.status();
        let body = json!({
            "type": format!("urn:idem:problem:{}", self.kind()),
            "title": status.canonical_reason().unwrap_or("Error"),
            "status": status.as_u16(),
            "detail": detail,
        });
        let mut response = Response::new(full(body.to_string()));
        *response.status_mut() = status;
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        response
    }

    /// The answer with `Retry-After: seconds` (at least 1).
    pub fn retry_after(self, detail: &str, seconds: u64) -> Response<GatewayBody> {
        let mut response = self.answer(detail);
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
        response
    }
}

/// 409 for a duplicate of a request that is still running.
pub fn held(retry_after_secs: u64) -> Response<GatewayBody> {
    Problem::Held.retry_after(
        "a request with this Idempotency-Key is still being processed; retry after the indicated time",
        retry_after_secs,
    )
}
