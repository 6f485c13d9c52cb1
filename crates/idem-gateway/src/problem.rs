//! The gateway's own answers: every kind it can answer, with its status, its type and Stripe's
//! type for it, in one place ([`Problem`]), and the shapes a route may have them written in
//! ([`ErrorShape`]): RFC 9457 problem+json like the rest of idem (the default), Stripe's
//! `{"error": {…}}`, or the operator's template ([`crate::template`]).
//!
//! An answer is made as problem+json where it is decided, often with no route at hand (a store that
//! failed, a task that panicked). It carries what it says ([`Answered`], an extension), so that one
//! function, [`ErrorShape::render`], writes it again in its route's shape once the route is known:
//! at the end of [`crate::Engine::handle`], and where the proxy or the tower layer answers for a
//! route itself. A response without it (the upstream's own, a replay) is never touched; the status
//! and every header (`Retry-After`, `WWW-Authenticate`) stay as they were.

use std::sync::Arc;

use http::{HeaderValue, Response, StatusCode, header};
use serde_json::json;

use crate::template::{Filling, Template};
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
    /// The upstream could not be reached: nothing was sent.
    UpstreamUnavailable,
    /// The exchange with the upstream broke off after it may have acted (after the request was
    /// sent, or after its status line): kept as the key's answer, so that a retry does not run it
    /// again.
    UpstreamOutcomeUnknown,
    /// The idempotency store did not answer: nothing was forwarded.
    StoreUnavailable,
    /// The keys that verify bearer JWTs could not be fetched.
    JwksUnavailable,
    /// The app's identity endpoint could not say who is calling (the `identity` scope part).
    IdentityUnavailable,
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
            Self::UpstreamUnavailable | Self::UpstreamOutcomeUnknown => StatusCode::BAD_GATEWAY,
            Self::StoreUnavailable | Self::JwksUnavailable | Self::IdentityUnavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The problem type's last segment (`urn:idem:problem:<kind>`); Stripe's shape gives it as
    /// `code`.
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
            Self::UpstreamOutcomeUnknown => "upstream-outcome-unknown",
            Self::StoreUnavailable => "store-unavailable",
            Self::JwksUnavailable => "jwks-unavailable",
            Self::IdentityUnavailable => "identity-unavailable",
            Self::UpstreamTimeout => "upstream-timeout",
        }
    }

    /// The problem type: `urn:idem:problem:<kind>`.
    pub fn type_uri(self) -> String {
        format!("urn:idem:problem:{}", self.kind())
    }

    /// The status's reason phrase (`Conflict`).
    pub fn title(self) -> &'static str {
        self.status().canonical_reason().unwrap_or("Error")
    }

    /// Stripe's error `type` for this answer, one of the four its API documents. Stripe answers a
    /// key in use or reused with `idempotency_error`, and its own 401 with `invalid_request_error`;
    /// the SDKs choose their error class by the status (401: `AuthenticationError`; 409, 422 and
    /// 5xx: `APIError`, after their retries of 409 and 5xx), and raise whenever `error` is there.
    pub fn stripe_type(self) -> &'static str {
        match self {
            Self::Held | Self::KeyReused => "idempotency_error",
            Self::MissingKey
            | Self::InvalidKey
            | Self::InvalidRequest
            | Self::ScopeMissing
            | Self::InvalidToken
            | Self::PayloadTooLarge => "invalid_request_error",
            Self::Internal
            | Self::UpstreamUnavailable
            | Self::UpstreamOutcomeUnknown
            | Self::StoreUnavailable
            | Self::JwksUnavailable
            | Self::IdentityUnavailable
            | Self::UpstreamTimeout => "api_error",
        }
    }

    /// The problem+json answer, `detail` saying what happened and what the client may do; it
    /// carries [`Answered`], so that a route with another shape writes it in that one.
    pub fn answer(self, detail: &str) -> Response<GatewayBody> {
        let (body, content_type) = ErrorShape::Problem.body(self, detail);
        let mut response = Response::new(full(body));
        *response.status_mut() = self.status();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        response.extensions_mut().insert(Answered { problem: self, detail: detail.to_owned() });
        response
    }

    /// The answer with `Retry-After: seconds` (at least 1).
    pub fn retry_after(self, detail: &str, seconds: u64) -> Response<GatewayBody> {
        let mut response = self.answer(detail);
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
        response
    }
}

/// What an answer of idem's says, kept on it (a response extension) so that it can be written in
/// its route's shape. Only idem's own answers carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    pub problem: Problem,
    pub detail: String,
}

/// How a route writes idem's own answers (`errors`, `errors_template`): same status, same
/// headers, the body in the shape the upstream's clients read.
#[derive(Debug, Clone, Default)]
pub enum ErrorShape {
    /// RFC 9457 `application/problem+json`: `type`, `title`, `status`, `detail`.
    #[default]
    Problem,
    /// Stripe's `{"error": {"type", "code", "message"}}` (`application/json`): `type` from
    /// [`Problem::stripe_type`], `code` the problem's kind, `message` its detail. Stripe's SDKs
    /// raise on it; a body without `error` stripe-node returns as the object it asked for.
    Stripe,
    /// The operator's JSON document with placeholders (`application/json`).
    Template(Arc<Template>),
}

impl ErrorShape {
    /// The body of `problem` with `detail` in this shape, and its Content-Type.
    pub fn body(&self, problem: Problem, detail: &str) -> (String, &'static str) {
        match self {
            Self::Problem => {
                let body = json!({
                    "type": problem.type_uri(),
                    "title": problem.title(),
                    "status": problem.status().as_u16(),
                    "detail": detail,
                });
                (body.to_string(), "application/problem+json")
            }
            Self::Stripe => {
                let body = json!({"error": {"type": problem.stripe_type(), "code": problem.kind(), "message": detail}});
                (body.to_string(), "application/json")
            }
            Self::Template(template) => {
                let type_uri = problem.type_uri();
                let (kind, title, status) = (problem.kind(), problem.title(), problem.status().as_u16());
                (template.render(&Filling { type_uri: &type_uri, kind, title, detail, status }), "application/json")
            }
        }
    }

    /// `response` in this shape when it is an answer of idem's ([`Answered`]): its body and
    /// Content-Type replaced, its status and other headers kept. Any other response is returned
    /// as it is.
    pub fn render(&self, mut response: Response<GatewayBody>) -> Response<GatewayBody> {
        // Every answer is made problem+json: in that shape there is nothing to do.
        if matches!(self, Self::Problem) {
            return response;
        }
        let Some(answered) = response.extensions().get::<Answered>() else { return response };
        let (body, content_type) = self.body(answered.problem, &answered.detail);
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        response.headers_mut().remove(header::CONTENT_LENGTH);
        *response.body_mut() = full(body);
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

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;
    use serde_json::Value;

    use super::*;

    const ALL: [Problem; 15] = [
        Problem::MissingKey,
        Problem::InvalidKey,
        Problem::InvalidRequest,
        Problem::ScopeMissing,
        Problem::InvalidToken,
        Problem::Held,
        Problem::PayloadTooLarge,
        Problem::KeyReused,
        Problem::Internal,
        Problem::UpstreamUnavailable,
        Problem::UpstreamOutcomeUnknown,
        Problem::StoreUnavailable,
        Problem::JwksUnavailable,
        Problem::IdentityUnavailable,
        Problem::UpstreamTimeout,
    ];

    /// The status, Content-Type, Retry-After and JSON body of a response.
    async fn read(response: Response<GatewayBody>) -> (u16, String, Option<String>, Value) {
        let header = |name| response.headers().get(name).map(|v: &HeaderValue| v.to_str().expect("ascii").to_owned());
        let (status, content_type, retry_after) =
            (response.status().as_u16(), header(header::CONTENT_TYPE).unwrap_or_default(), header(header::RETRY_AFTER));
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        (status, content_type, retry_after, serde_json::from_slice(&bytes).expect("JSON"))
    }

    #[tokio::test]
    async fn every_problem_in_the_problem_shape() {
        for problem in ALL {
            let (status, content_type, _, body) = read(problem.answer("what \"happened\"")).await;
            assert_eq!(status, problem.status().as_u16());
            assert_eq!(content_type, "application/problem+json");
            let expected = json!({
                "type": format!("urn:idem:problem:{}", problem.kind()),
                "title": problem.status().canonical_reason().expect("a reason"),
                "status": status,
                "detail": "what \"happened\"",
            });
            assert_eq!(body, expected, "{problem:?}");
            let again = ErrorShape::Problem.render(problem.answer("what \"happened\""));
            assert_eq!(read(again).await.3, expected, "rendering in the default shape changes nothing");
        }
    }

    #[tokio::test]
    async fn every_problem_in_stripes_shape_with_its_status_and_retry_after() {
        for problem in ALL {
            let response = ErrorShape::Stripe.render(problem.retry_after("try again\nlater", 7));
            assert_eq!(response.extensions().get::<Answered>().map(|a| a.problem), Some(problem));
            let (status, content_type, retry_after, body) = read(response).await;
            assert_eq!((status, content_type.as_str()), (problem.status().as_u16(), "application/json"));
            assert_eq!(retry_after.as_deref(), Some("7"), "{problem:?}: Retry-After kept");
            let expected = json!({"error": {"type": problem.stripe_type(), "code": problem.kind(), "message": "try again\nlater"}});
            assert_eq!(body, expected, "{problem:?}");
        }
        let types: Vec<_> = [Problem::Held, Problem::KeyReused, Problem::MissingKey, Problem::PayloadTooLarge]
            .iter()
            .chain(&[
                Problem::InvalidToken,
                Problem::UpstreamUnavailable,
                Problem::StoreUnavailable,
                Problem::UpstreamTimeout,
            ])
            .map(|p| p.stripe_type())
            .collect();
        let expected = ["idempotency_error", "idempotency_error", "invalid_request_error", "invalid_request_error"]
            .into_iter()
            .chain(["invalid_request_error", "api_error", "api_error", "api_error"]);
        assert!(types.into_iter().eq(expected));
    }

    #[tokio::test]
    async fn every_problem_in_a_template() {
        let text = r#"{"errors": [{"status": {{status}}, "code": "{{kind}}", "title": "{{title}}", "detail": "{{detail}}", "source": {{type}}}]}"#;
        let template = Arc::new(Template::parse("t.json", text).expect("a template"));
        for problem in ALL {
            let response = problem.retry_after("a \\ b", 2);
            let (status, content_type, retry_after, body) =
                read(ErrorShape::Template(Arc::clone(&template)).render(response)).await;
            assert_eq!(
                (status, content_type.as_str(), retry_after.as_deref()),
                (problem.status().as_u16(), "application/json", Some("2"))
            );
            let expected = json!({"errors": [{"status": status, "code": problem.kind(), "title": problem.title(), "detail": "a \\ b", "source": problem.type_uri()}]});
            assert_eq!(body, expected, "{problem:?}");
        }
    }

    #[tokio::test]
    async fn a_response_that_is_not_idems_is_never_touched() {
        let mut upstream = Response::new(full(r#"{"id":"ch_1"}"#));
        *upstream.status_mut() = StatusCode::CONFLICT;
        upstream.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        let (status, content_type, _, body) = read(ErrorShape::Stripe.render(upstream)).await;
        assert_eq!((status, content_type.as_str(), body), (409, "application/problem+json", json!({"id": "ch_1"})));
    }

    #[tokio::test]
    async fn other_headers_stay() {
        let mut answer = Problem::InvalidToken.answer("no");
        answer
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer error=\"invalid_token\""));
        let rendered = ErrorShape::Stripe.render(answer);
        assert_eq!(
            rendered.headers().get(header::WWW_AUTHENTICATE).map(|v| v.as_bytes()),
            Some(&b"Bearer error=\"invalid_token\""[..])
        );
        assert_eq!(read(rendered).await.3["error"]["code"], "invalid-token");
    }
}
