//! Route policies: which requests are guarded and how. A request matches the first route whose
//! method list and path pattern both match, the path taken in normal form (`/orders/`, `//orders`,
//! `/x/../orders` and `/%6Frders` are all `/orders`), so that no other spelling of a guarded path
//! slips past its route; requests that match no route pass straight through.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use idem_core::gateway::{InFlightPolicy, KeyPolicy, PathCase, PathPattern};

use crate::identity::IdentityResolver;
use crate::jwt::JwtVerifier;
use crate::problem::ErrorShape;
pub use crate::scope::ScopePart;

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
