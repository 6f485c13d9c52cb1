//! Route policies: which requests are guarded and how. A request matches the first route whose
//! method list and path pattern both match, the path taken in normal form (`/orders/`, `//orders`,
//! `/x/../orders` and `/%6Frders` are all `/orders`), so that no other spelling of a guarded path
//! slips past its route; requests that match no route pass straight through. A route's `scope`
//! says who is calling as the config writes it ([`ScopePart`]); [`crate::scope`] reads those parts
//! off each request.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use idem_core::gateway::{InFlightPolicy, KeyPolicy, PathCase, PathPattern};

use crate::identity::IdentityResolver;
use crate::jwt::JwtVerifier;
use crate::problem::ErrorShape;

/// The upstream timeout of a route that sets neither it nor its lease.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an upstream call may run at most, unless the route says otherwise: ten minutes.
pub const DEFAULT_MAX_CALL: Duration = Duration::from_secs(600);

#[derive(Debug, Clone)]
pub struct RoutePolicy {
    pub path: PathPattern,
    pub methods: Vec<Method>,
    pub key: KeyPolicy,
    /// How long a completed response is replayed.
    pub ttl: Duration,
    /// Who is calling ([`crate::scope`]): a keyed request must carry one of these parts, unless
    /// the list is empty (the route has no callers to tell apart).
    pub scope: Vec<ScopePart>,
    /// Verifies the bearer JWT that `jwt:` parts read; a route with such parts needs one.
    pub jwt: Option<Arc<JwtVerifier>>,
    /// Asks the app who is calling, for the `identity` part; a route with it needs one.
    pub identity: Option<Arc<IdentityResolver>>,
    /// Whether the path matches with regard to ASCII case (and is fingerprinted lower-cased).
    pub path_case: PathCase,
    pub in_flight: InFlightPolicy,
    /// How long a duplicate waits for the first request (with `in_flight = wait`).
    pub wait_timeout: Duration,
    /// How long the client waits for the upstream's answer; past it, `504`, and the call goes on
    /// in the background with the key held. Shorter than `lease` (the config insists); at most
    /// half of it (every default) and no request answered in time ever extends its lease.
    pub upstream_timeout: Duration,
    /// How long a started request holds its key if idem dies: extended while the upstream call
    /// runs, so it decides only when its holder is gone.
    pub lease: Duration,
    /// Keep and replay 5xx responses instead of releasing the key.
    pub store_5xx: bool,
    /// The longest an upstream call may run (from when it was sent): one still running then is
    /// abandoned, and its key left to its lease (no longer extended), so that an upstream that
    /// hangs does not hold a key forever. Longer than `upstream_timeout` (the config insists).
    pub max_call: Duration,
    /// The shape of idem's own answers on this route (the upstream's are never touched).
    pub errors: ErrorShape,
}

impl RoutePolicy {
    /// The contract's defaults for a path: POST and PATCH, an optional key, 24 h TTL, scoped by
    /// `Authorization`, reject in-flight duplicates, 30 s upstream timeout, 60 s lease, calls of
    /// 10 min at most, 5xx not stored, idem's own answers in problem+json.
    pub fn new(path: PathPattern) -> Self {
        Self {
            path,
            methods: vec![Method::POST, Method::PATCH],
            key: KeyPolicy::Optional,
            ttl: Duration::from_secs(24 * 3600),
            scope: vec![ScopePart::Header(http::header::AUTHORIZATION)],
            jwt: None,
            identity: None,
            path_case: PathCase::Sensitive,
            in_flight: InFlightPolicy::Reject,
            wait_timeout: Duration::from_secs(10),
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            lease: Duration::from_secs(60),
            store_5xx: false,
            max_call: DEFAULT_MAX_CALL,
            errors: ErrorShape::Problem,
        }
    }

    /// Sets the lease, and the upstream timeout to its default for that lease: 30 s, or half the
    /// lease when that is shorter (what a config that names only `lease` gets).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self.upstream_timeout = DEFAULT_UPSTREAM_TIMEOUT.min(lease / 2);
        self
    }

    /// The verifier of the bearer JWTs this route's `jwt:` scope parts read.
    pub fn with_jwt(mut self, verifier: Arc<JwtVerifier>) -> Self {
        self.jwt = Some(verifier);
        self
    }

    /// What asks the app who is calling, for this route's `identity` scope part.
    pub fn with_identity(mut self, resolver: Arc<IdentityResolver>) -> Self {
        self.identity = Some(resolver);
        self
    }
}

/// One part of the request that separates one caller's keys from another's, as written
/// (`header:NAME`, `cookie:NAME`, `jwt:CLAIM`, `identity`); read off a request by [`crate::scope`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopePart {
    /// The value of a request header (absent counts as empty).
    Header(http::HeaderName),
    /// The value of one cookie of the `Cookie` header.
    Cookie(String),
    /// A claim of the bearer JWT in `Authorization`, once the token verifies.
    Jwt(String),
    /// The caller the app names ([`crate::identity`]).
    Identity,
}

/// Why a scope part as written is refused; each names the text as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadScopePart {
    /// Not `header:`, `cookie:`, `jwt:` or `identity`.
    #[error("{0:?}: expected \"header:NAME\", \"cookie:NAME\", \"jwt:CLAIM\" or \"identity\"")]
    Kind(String),
    #[error("{text:?}: {name:?} is not a header name")]
    HeaderName { text: String, name: String },
    #[error("{text:?}: {name:?} is not a cookie name (letters, digits and !#$%&'*+-.^_`|~)")]
    CookieName { text: String, name: String },
    #[error("{0:?}: name a claim, such as \"jwt:sub\"")]
    Claim(String),
}

impl ScopePart {
    /// Parses `header:NAME`, `cookie:NAME`, `jwt:CLAIM` or `identity`.
    pub fn parse(text: &str) -> Result<Self, BadScopePart> {
        if text.trim() == "identity" {
            return Ok(ScopePart::Identity);
        }
        let Some((kind, name)) = text.split_once(':') else { return Err(BadScopePart::Kind(text.to_owned())) };
        let name = name.trim();
        let named = || (text.to_owned(), name.to_owned());
        match kind.trim() {
            "header" => http::HeaderName::from_bytes(name.as_bytes()).map(ScopePart::Header).map_err(|_| {
                let (text, name) = named();
                BadScopePart::HeaderName { text, name }
            }),
            "cookie" if is_cookie_name(name) => Ok(ScopePart::Cookie(name.to_owned())),
            "cookie" => {
                let (text, name) = named();
                Err(BadScopePart::CookieName { text, name })
            }
            "jwt" if !name.is_empty() && !name.chars().any(char::is_control) => Ok(ScopePart::Jwt(name.to_owned())),
            "jwt" => Err(BadScopePart::Claim(text.to_owned())),
            _ => Err(BadScopePart::Kind(text.to_owned())),
        }
    }
}

/// As written in a config file: `header:authorization`, `cookie:session`, `jwt:sub`.
impl fmt::Display for ScopePart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopePart::Header(name) => write!(f, "header:{name}"),
            ScopePart::Cookie(name) => write!(f, "cookie:{name}"),
            ScopePart::Jwt(claim) => write!(f, "jwt:{claim}"),
            ScopePart::Identity => write!(f, "identity"),
        }
    }
}

/// An RFC 6265 cookie name: an HTTP token.
fn is_cookie_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[derive(Debug, Clone, Default)]
pub struct Routes(pub Vec<Arc<RoutePolicy>>);

impl Routes {
    pub fn new(routes: impl IntoIterator<Item = RoutePolicy>) -> Self {
        Self(routes.into_iter().map(Arc::new).collect())
    }

    /// The route of a request, by its method and its path as the client sent it.
    pub fn find(&self, method: &Method, path: &str) -> Option<&Arc<RoutePolicy>> {
        let path = idem_core::gateway::normalize_path(path);
        self.0.iter().find(|r| r.methods.contains(method) && r.path.matches_normal_in(&path, r.path_case))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_matching_route_wins_and_others_pass() {
        let orders = RoutePolicy::new(PathPattern::parse("/orders").expect("valid"));
        let mut any = RoutePolicy::new(PathPattern::parse("/*").expect("valid"));
        any.methods = vec![Method::PUT];
        let routes = Routes::new([orders, any]);
        assert_eq!(routes.find(&Method::POST, "/orders").map(|r| r.path.as_str()), Some("/orders"));
        assert!(routes.find(&Method::GET, "/orders").is_none(), "GET is not guarded by default");
        assert_eq!(routes.find(&Method::PUT, "/x").map(|r| r.path.as_str()), Some("/*"));
        assert!(routes.find(&Method::POST, "/x").is_none());
        for spelling in ["/orders/", "//orders", "/x/../orders", "/%6Frders"] {
            assert_eq!(routes.find(&Method::POST, spelling).map(|r| r.path.as_str()), Some("/orders"), "{spelling}");
        }
    }

    #[test]
    fn parts_parse_and_print_as_written() {
        for text in ["header:x-tenant", "cookie:.AspNetCore.Cookies", "jwt:sub", "jwt:tenant_id", "identity"] {
            assert_eq!(ScopePart::parse(text).map(|p| p.to_string()).as_deref(), Ok(text));
        }
        assert_eq!(
            ScopePart::parse("header:X-Tenant"),
            Ok(ScopePart::Header(http::HeaderName::from_static("x-tenant")))
        );
        for bad in ["cookie:", "cookie:a b", "cookie:a=b", "jwt:", "header:bad name", "query:x", "sub", "identity:x"] {
            assert!(ScopePart::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_lease_alone_brings_its_upstream_timeout() {
        let route = |lease| RoutePolicy::new(PathPattern::parse("/o").expect("valid")).with_lease(lease);
        assert_eq!(route(Duration::from_secs(3)).upstream_timeout, Duration::from_millis(1500));
        assert_eq!(route(Duration::from_secs(600)).upstream_timeout, DEFAULT_UPSTREAM_TIMEOUT);
        let default = RoutePolicy::new(PathPattern::parse("/o").expect("valid"));
        assert!(default.upstream_timeout * 2 <= default.lease);
    }

    #[test]
    fn an_insensitive_route_takes_every_case_of_its_path() {
        let mut orders = RoutePolicy::new(PathPattern::parse("/orders").expect("valid"));
        orders.path_case = PathCase::Insensitive;
        let exact = RoutePolicy::new(PathPattern::parse("/refunds").expect("valid"));
        let routes = Routes::new([orders, exact]);
        for spelling in ["/Orders", "/ORDERS/", "/%4Frders"] {
            assert_eq!(routes.find(&Method::POST, spelling).map(|r| r.path.as_str()), Some("/orders"), "{spelling}");
        }
        assert!(routes.find(&Method::POST, "/Refunds").is_none(), "sensitive by default");
    }
}
