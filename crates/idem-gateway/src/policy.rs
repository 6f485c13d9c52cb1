//! Route policies: which requests are guarded and how. A request matches the first route whose
//! method list and path pattern both match; requests that match no route pass straight through.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use idem_core::gateway::{InFlightPolicy, KeyPolicy, PathPattern};

/// One part of the request that separates one caller's keys from another's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopePart {
    /// The value of a request header (absent counts as empty).
    Header(http::HeaderName),
}

impl ScopePart {
    /// Parses `header:NAME`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.split_once(':') {
            Some(("header", name)) => http::HeaderName::from_bytes(name.trim().as_bytes())
                .map(ScopePart::Header)
                .map_err(|_| format!("scope {text:?}: {name:?} is not a header name")),
            _ => Err(format!("scope {text:?}: expected \"header:NAME\"")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RoutePolicy {
    pub path: PathPattern,
    pub methods: Vec<Method>,
    pub key: KeyPolicy,
    /// How long a completed response is replayed.
    pub ttl: Duration,
    pub scope: Vec<ScopePart>,
    pub in_flight: InFlightPolicy,
    /// How long a duplicate waits for the first request (with `in_flight = wait`).
    pub wait_timeout: Duration,
    /// How long a started request holds its key if idem dies or the upstream hangs; also the
    /// upstream's time limit for that request.
    pub lease: Duration,
    /// Keep and replay 5xx responses instead of releasing the key.
    pub store_5xx: bool,
}

impl RoutePolicy {
    /// The contract's defaults for a path: POST and PATCH, an optional key, 24 h TTL, scoped by
    /// `Authorization`, reject in-flight duplicates, 60 s lease, 5xx not stored.
    pub fn new(path: PathPattern) -> Self {
        Self {
            path,
            methods: vec![Method::POST, Method::PATCH],
            key: KeyPolicy::Optional,
            ttl: Duration::from_secs(24 * 3600),
            scope: vec![ScopePart::Header(http::header::AUTHORIZATION)],
            in_flight: InFlightPolicy::Reject,
            wait_timeout: Duration::from_secs(10),
            lease: Duration::from_secs(60),
            store_5xx: false,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Routes(pub Vec<Arc<RoutePolicy>>);

impl Routes {
    pub fn new(routes: impl IntoIterator<Item = RoutePolicy>) -> Self {
        Self(routes.into_iter().map(Arc::new).collect())
    }

    pub fn find(&self, method: &Method, path: &str) -> Option<&Arc<RoutePolicy>> {
        self.0.iter().find(|r| r.methods.contains(method) && r.path.matches(path))
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
    }

    #[test]
    fn scope_parts_parse() {
        assert_eq!(
            ScopePart::parse("header:X-Tenant"),
            Ok(ScopePart::Header(http::HeaderName::from_static("x-tenant")))
        );
        assert!(ScopePart::parse("cookie:a").is_err());
        assert!(ScopePart::parse("header:bad name").is_err());
    }
}
