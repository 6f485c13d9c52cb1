//! Who is calling: the parts of a request that separate one caller's keys from another's
//! (docs/reference/config.md#scope). A key belongs to one caller, so no request may reach a key
//! without saying whose it is:
//!
//! - `header:NAME`: the header's value, as before (absent counts as empty, so that the keys a
//!   route already holds keep their ids);
//! - `cookie:NAME`: that one cookie's value (every occurrence, in order); other cookies may
//!   change freely;
//! - `jwt:CLAIM`: a claim of the request's bearer JWT, read only once the token verifies
//!   ([`crate::jwt`]); a token that does not verify is refused (`401`), never read;
//! - `identity`: the caller the app itself names when asked ([`crate::identity`]), for credentials
//!   whose text changes while the user stays the same (a session cookie encrypted anew on every
//!   response); the app's `401`/`403` goes back to the client, and an app that cannot answer is
//!   `503`.
//!
//! A keyed request that carries none of its route's parts is refused (`400 scope-missing`): with
//! nothing to tell callers apart, every caller would share one key space and one caller's retry
//! could replay another's response. A part counts as carried when it is there and not empty; a
//! route with several parts (a bearer token or a session cookie, say) takes a request that carries
//! any of them, the others counting as empty. A caller that is there but named empty (a verified
//! token whose `sub` is `""`, an app that names nobody) is no caller: `scope-missing` too.
//! `scope = []` says that a route has no callers to tell apart: then nothing is asked for.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request, header};
use idem_metrics::gateway::Outcome;

use crate::GatewayBody;
use crate::jwt::{JwtFailure, JwtVerifier};
use crate::policy::RoutePolicy;
use crate::problem::Problem;
use crate::state::count;

// The parts as written are the route's policy; this module reads them off a request.
pub use crate::policy::{BadScopePart, ScopePart};

/// Why a keyed request has no scope to file its key under.
pub(crate) enum ScopeRefusal {
    /// It carries none of the route's parts.
    Missing,
    /// Its bearer token did not verify.
    Token(JwtFailure),
    /// The route reads `jwt:` claims but was given no verifier (a tower-layer route built without
    /// [`RoutePolicy::with_jwt`]).
    NoVerifier,
    /// A caller is there but named empty (this part).
    Empty(ScopePart),
    /// The app refused the caller: its own answer.
    IdentityRefused(Box<http::Response<Bytes>>),
    /// The app could not say who is calling (why, for the log).
    IdentityUnavailable(String),
    /// The route has `identity` but was given no resolver ([`RoutePolicy::with_identity`]).
    NoResolver,
}

impl ScopeRefusal {
    pub(crate) fn answer(self, route: &RoutePolicy) -> http::Response<GatewayBody> {
        match self {
            ScopeRefusal::Missing => {
                count(route, Outcome::ScopeMissing);
                Problem::ScopeMissing.answer(&missing_detail(&route.scope))
            }
            ScopeRefusal::Token(JwtFailure::KeysUnavailable) => {
                count(route, Outcome::JwksUnavailable);
                JwtFailure::KeysUnavailable.count(&route.path);
                let detail = "the keys that verify bearer tokens (the JWKS) could not be fetched; nothing was \
                              forwarded, retry shortly";
                Problem::JwksUnavailable.retry_after(detail, crate::jwt::RETRY_AFTER_FAILURE.as_secs())
            }
            ScopeRefusal::Token(failure) => {
                count(route, Outcome::InvalidToken);
                failure.count(&route.path);
                let mut response = Problem::InvalidToken.answer(&format!(
                    "the bearer token did not verify ({}); nothing was forwarded",
                    failure.describe()
                ));
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer error=\"invalid_token\""));
                response
            }
            ScopeRefusal::NoVerifier => {
                tracing::error!(route = route.path.as_str(), "the route's scope reads jwt: claims but has no verifier");
                count(route, Outcome::InvalidToken);
                Problem::Internal.answer("the route's JWT verifier is not configured")
            }
            ScopeRefusal::Empty(part) => {
                count(route, Outcome::ScopeMissing);
                Problem::ScopeMissing.answer(&format!(
                    "this route tells callers' keys apart by {part}, and it names no caller for this request (an \
                     empty value); nothing was forwarded"
                ))
            }
            refusal => identity_refusal(route, refusal),
        }
    }
}

/// The answers of the `identity` part's refusals: the app's own `401`/`403`, or `503`.
fn identity_refusal(route: &RoutePolicy, refusal: ScopeRefusal) -> http::Response<GatewayBody> {
    match refusal {
        ScopeRefusal::IdentityRefused(answer) => {
            count(route, Outcome::IdentityRefused);
            let (mut parts, body) = (*answer).into_parts();
            crate::headers::strip_hop_by_hop(&mut parts.headers);
            parts.headers.remove(http::header::CONTENT_LENGTH);
            http::Response::from_parts(parts, crate::full(body))
        }
        ScopeRefusal::NoResolver => {
            tracing::error!(route = route.path.as_str(), "the route's scope has identity but no resolver");
            count(route, Outcome::IdentityUnavailable);
            Problem::Internal.answer("the route's identity endpoint is not configured")
        }
        other => {
            let why = match other {
                ScopeRefusal::IdentityUnavailable(why) => why,
                _ => String::new(),
            };
            count(route, Outcome::IdentityUnavailable);
            tracing::warn!(route = route.path.as_str(), error = %why, "the app's identity endpoint could not say who is calling");
            Problem::IdentityUnavailable.retry_after(
                "the app could not say who is calling (its identity endpoint did not answer in time, or not \
                 as expected); nothing was forwarded, retry shortly",
                crate::identity::RETRY_AFTER.as_secs(),
            )
        }
    }
}

fn missing_detail(scope: &[ScopePart]) -> String {
    let parts: Vec<String> = scope.iter().map(ToString::to_string).collect();
    format!(
        "this route tells callers' keys apart by {}, and the request carries none of them; nothing was forwarded. \
         Send one, or change the route's scope in idem's config (scope = [] if the route has no callers to tell apart)",
        parts.join(", ")
    )
}

/// The values of the route's scope parts for this request, in the route's order: what its key id
/// hashes. `Err` when it carries none of them, or its bearer token does not verify.
pub(crate) async fn scope_of(route: &RoutePolicy, request: &Request<Bytes>) -> Result<Vec<Vec<u8>>, ScopeRefusal> {
    let headers = request.headers();
    let claims = match route.scope.iter().any(|p| matches!(p, ScopePart::Jwt(_))) {
        true => verified_claims(route.jwt.as_ref(), headers).await?,
        false => None,
    };
    let caller = match route.scope.contains(&ScopePart::Identity) {
        true => Some(named_caller(route, headers).await?),
        false => None,
    };
    let mut values = Vec::with_capacity(route.scope.len());
    for part in &route.scope {
        let value = match part {
            ScopePart::Identity => caller.clone().unwrap_or_default(),
            _ => value_of(part, headers, claims.as_ref()).map_err(|()| ScopeRefusal::Empty(part.clone()))?,
        };
        values.push(value);
    }
    if !route.scope.is_empty() && values.iter().all(Vec::is_empty) {
        return Err(ScopeRefusal::Missing);
    }
    Ok(values)
}

/// The caller the app names; the request's credentials asked about and named nobody: empty.
async fn named_caller(route: &RoutePolicy, headers: &HeaderMap) -> Result<Vec<u8>, ScopeRefusal> {
    let resolver = route.identity.as_ref().ok_or(ScopeRefusal::NoResolver)?;
    match resolver.caller(headers).await {
        Ok(name) => Ok(name),
        Err(crate::identity::IdentityRefusal::Refused(answer)) => Err(ScopeRefusal::IdentityRefused(answer)),
        Err(crate::identity::IdentityRefusal::Unavailable(why)) => Err(ScopeRefusal::IdentityUnavailable(why)),
    }
}

/// The claims of the request's bearer token, verified; `None` when it has no bearer token.
async fn verified_claims(
    verifier: Option<&Arc<JwtVerifier>>,
    headers: &HeaderMap,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, ScopeRefusal> {
    let Some(token) = bearer_token(headers) else { return Ok(None) };
    let verifier = verifier.ok_or(ScopeRefusal::NoVerifier)?;
    verifier.verify(token).await.map(Some).map_err(ScopeRefusal::Token)
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case).
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// One part's value; empty when the request does not carry it. A header is its bytes, as before
/// cookies and JWTs (so that existing keys keep their ids); a cookie is each of its values, `;`
/// between (a cookie value cannot hold one); a claim is its JSON text (`"alice"`, `42`), so that
/// no two claims of different types read the same. `Err`: a claim that is there but empty (`""`):
/// a verified token that names no one.
fn value_of(
    part: &ScopePart,
    headers: &HeaderMap,
    claims: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<Vec<u8>, ()> {
    Ok(match part {
        ScopePart::Header(name) => headers.get(name).map_or_else(Vec::new, |v| v.as_bytes().to_vec()),
        ScopePart::Cookie(name) => cookie_values(headers, name),
        ScopePart::Jwt(claim) => match claims.and_then(|c| c.get(claim)) {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::String(s)) if s.trim().is_empty() => return Err(()),
            Some(value) => value.to_string().into_bytes(),
        },
        // Asked of the app, in `scope_of`.
        ScopePart::Identity => Vec::new(),
    })
}

/// Every value of cookie `name` in the request's `Cookie` headers, in order, `;` between: one
/// session cookie sent twice (two paths, say) is scoped by both, so that no choice between them
/// can differ from the upstream's.
fn cookie_values(headers: &HeaderMap, name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let pairs = headers.get_all(header::COOKIE).iter().flat_map(|v| v.as_bytes().split(|b| *b == b';'));
    for pair in pairs {
        let pair = pair.trim_ascii();
        let Some(at) = pair.iter().position(|b| *b == b'=') else { continue };
        let (key, value) = (pair[..at].trim_ascii(), pair[at + 1..].trim_ascii());
        if key == name.as_bytes() && !value.is_empty() {
            if !out.is_empty() {
                out.push(b';');
            }
            out.extend_from_slice(value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(http::HeaderName::from_bytes(name.as_bytes()).expect("name"), value.parse().expect("value"));
        }
        map
    }

    #[test]
    fn one_cookie_is_read_and_the_others_are_not() {
        let part = ScopePart::Cookie("session".into());
        let alice = headers(&[("cookie", "theme=dark; session=alice; _ga=1")]);
        let alice_later = headers(&[("cookie", "_ga=2;session=alice"), ("cookie", "theme=light")]);
        let read = |h: &HeaderMap| value_of(&part, h, None).expect("a cookie is never refused");
        assert_eq!(read(&alice), b"alice");
        assert_eq!(read(&alice_later), b"alice", "other cookies may change");
        assert_eq!(read(&headers(&[("cookie", "sessionx=alice; session=")])), b"");
        assert_eq!(read(&headers(&[("cookie", "session=a"), ("cookie", "session=b")])), b"a;b");
        assert_eq!(read(&headers(&[])), b"");
    }

    #[test]
    fn claims_read_as_json_text() {
        let claims: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"sub":"42","uid":42,"none":null,"empty":"","blank":" "}"#).expect("json");
        let read = |claim: &str| value_of(&ScopePart::Jwt(claim.into()), &HeaderMap::new(), Some(&claims));
        assert_eq!(read("sub"), Ok(br#""42""#.to_vec()));
        assert_eq!(read("uid"), Ok(b"42".to_vec()), "a number is not the string of its digits");
        assert_eq!((read("none"), read("absent")), (Ok(Vec::new()), Ok(Vec::new())));
        assert_eq!((read("empty"), read("blank")), (Err(()), Err(())), "a token that names no one names no caller");
    }

    #[test]
    fn bearer_tokens_are_read_in_any_case_of_the_scheme() {
        assert_eq!(bearer_token(&headers(&[("authorization", "Bearer a.b.c")])), Some("a.b.c"));
        assert_eq!(bearer_token(&headers(&[("authorization", "bearer  a.b.c ")])), Some("a.b.c"));
        assert_eq!(bearer_token(&headers(&[("authorization", "Basic YTpi")])), None);
        assert_eq!(bearer_token(&headers(&[("authorization", "Bearer ")])), None);
    }

    #[tokio::test]
    async fn a_keyed_request_must_carry_one_of_its_parts() {
        let mut route = RoutePolicy::new(idem_core::gateway::PathPattern::parse("/o").expect("valid"));
        route.scope = vec![ScopePart::Header(header::AUTHORIZATION), ScopePart::Cookie("session".into())];
        let request = |pairs: &[(&str, &str)]| {
            let mut request = Request::new(Bytes::new());
            *request.headers_mut() = headers(pairs);
            request
        };
        assert!(matches!(scope_of(&route, &request(&[])).await, Err(ScopeRefusal::Missing)));
        assert!(matches!(scope_of(&route, &request(&[("authorization", "")])).await, Err(ScopeRefusal::Missing)));
        let cookie = scope_of(&route, &request(&[("cookie", "session=bob")])).await.ok();
        assert_eq!(cookie, Some(vec![Vec::new(), b"bob".to_vec()]), "either part will do");
        route.scope.clear();
        assert_eq!(scope_of(&route, &request(&[])).await.ok(), Some(Vec::new()), "scope = [] asks for nothing");
    }
}
