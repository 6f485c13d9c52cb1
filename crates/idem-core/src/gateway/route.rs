//! Which requests the gateway guards: a route is a path pattern, a set of methods and a policy.
//! A pattern is exact (`/orders`) or has wildcard segments: `*` or `{name}` match exactly one
//! non-empty segment (`/orders/{id}/refund`). Patterns and paths are compared in normal form
//! ([`super::path`]): `/orders/`, `//orders` and `/%6Frders` match `/orders`. A route whose upstream
//! routes without regard to case (ASP.NET Core, IIS) matches ignoring ASCII case
//! ([`PathCase::Insensitive`]), so that `/Orders` cannot slip past it either.

/// Why a path pattern is refused; each names the pattern as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPattern {
    #[error("path {0:?} must start with '/'")]
    NotAbsolute(String),
    /// A `*` or `{name}` inside a segment (`/orders*`, `/o/{id}.json`).
    #[error("path {0:?}: '*' and '{{name}}' must be whole segments")]
    PartSegment(String),
}

/// Whether a matching request must carry an `Idempotency-Key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyPolicy {
    /// No key: 400.
    Required,
    /// No key: forwarded without idempotency.
    Optional,
}

/// What a duplicate that arrives while the first request is still running gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InFlightPolicy {
    /// 409 with `Retry-After`.
    Reject,
    /// Wait for the first request's response (up to `wait_timeout`, then 409).
    Wait,
}

/// Whether a route's path matches with regard to ASCII case: as the upstream's router does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathCase {
    /// `/Orders` is another path than `/orders` (most routers: Express, Go, Rails, axum).
    #[default]
    Sensitive,
    /// `/Orders` is `/orders` (ASP.NET Core, IIS); the fingerprint takes the path lower-cased.
    Insensitive,
}

impl PathCase {
    /// The path as this route fingerprints it: lower-cased when the route ignores case.
    pub fn fold<'a>(self, path: std::borrow::Cow<'a, str>) -> std::borrow::Cow<'a, str> {
        match self {
            PathCase::Insensitive if path.bytes().any(|b| b.is_ascii_uppercase()) => {
                std::borrow::Cow::Owned(path.to_ascii_lowercase())
            }
            _ => path,
        }
    }
}

#[derive(Debug, Clone)]
pub struct PathPattern {
    text: std::sync::Arc<str>,
    segments: Vec<Segment>,
}

/// Two patterns are equal when they match the same paths (`/orders` and `/orders/` do).
impl PartialEq for PathPattern {
    fn eq(&self, other: &Self) -> bool {
        self.segments == other.segments
    }
}

impl Eq for PathPattern {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Any,
}

/// In config files a pattern is checked on load.
impl<'de> serde::Deserialize<'de> for PathPattern {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for PathPattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl PathPattern {
    pub fn parse(text: &str) -> Result<Self, BadPattern> {
        if !text.starts_with('/') {
            return Err(BadPattern::NotAbsolute(text.to_owned()));
        }
        let normal = super::path::normalize(text);
        let segments = normal[1..]
            .split('/')
            .map(|s| match s {
                "*" => Ok(Segment::Any),
                s if s.starts_with('{') && s.ends_with('}') && s.len() > 2 => Ok(Segment::Any),
                s if s.contains(['*', '{', '}']) => Err(BadPattern::PartSegment(text.to_owned())),
                s => Ok(Segment::Literal(s.to_owned())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { text: text.into(), segments })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The pattern as shared text: a metrics label costs a reference count, not a copy.
    pub fn shared(&self) -> std::sync::Arc<str> {
        std::sync::Arc::clone(&self.text)
    }

    /// Whether a request path matches, in whatever spelling the client sent it.
    pub fn matches(&self, path: &str) -> bool {
        self.matches_normal(&super::path::normalize(path))
    }

    /// Whether a path already in normal form ([`super::path::normalize`]) matches: for a caller
    /// that normalises once and tries several patterns.
    pub fn matches_normal(&self, path: &str) -> bool {
        self.matches_normal_in(path, PathCase::Sensitive)
    }

    /// [`Self::matches_normal`], ignoring ASCII case when `case` says so.
    pub fn matches_normal_in(&self, path: &str, case: PathCase) -> bool {
        let Some(rest) = path.strip_prefix('/') else { return false };
        let same = |lit: &str, part: &str| match case {
            PathCase::Sensitive => lit == part,
            PathCase::Insensitive => lit.eq_ignore_ascii_case(part),
        };
        let mut parts = rest.split('/');
        for segment in &self.segments {
            match (segment, parts.next()) {
                (Segment::Literal(lit), Some(part)) if same(lit, part) => {}
                (Segment::Any, Some(part)) if !part.is_empty() => {}
                _ => return false,
            }
        }
        parts.next().is_none()
    }

    /// Whether the two patterns match the same paths once ASCII case is ignored.
    pub fn eq_ignoring_case(&self, other: &Self) -> bool {
        self.segments.len() == other.segments.len()
            && self.segments.iter().zip(&other.segments).all(|pair| match pair {
                (Segment::Literal(a), Segment::Literal(b)) => a.eq_ignore_ascii_case(b),
                (a, b) => a == b,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_wildcard_segments() {
        let exact = PathPattern::parse("/orders").expect("valid");
        assert!(exact.matches("/orders"));
        assert!(!exact.matches("/orders/1") && !exact.matches("/order") && !exact.matches("/orders/x/."));
        let param = PathPattern::parse("/orders/{id}/refund").expect("valid");
        assert!(param.matches("/orders/42/refund"));
        assert!(
            !param.matches("/orders//refund") && !param.matches("/orders/42") && !param.matches("/orders/4/2/refund")
        );
        let star = PathPattern::parse("/v1/*").expect("valid");
        assert!(star.matches("/v1/anything") && !star.matches("/v1/a/b"));
    }

    #[test]
    fn other_spellings_match_and_patterns_are_normalised_too() {
        let exact = PathPattern::parse("/orders").expect("valid");
        for spelling in ["/orders/", "//orders", "/x/../orders", "/%6Frders", "/orders/x/.."] {
            assert!(exact.matches(spelling), "{spelling:?}");
        }
        let written = PathPattern::parse("/orders//{id}/").expect("valid");
        assert!(written.matches("/orders/42") && written.matches("/orders/%34%32/"));
        assert_eq!(written.as_str(), "/orders//{id}/", "shown (and named in key ids) as written");
        assert_eq!(written, PathPattern::parse("/orders/*").expect("valid"), "equal: they match the same paths");
    }

    #[test]
    fn an_insensitive_route_matches_every_case_and_folds_its_fingerprint_path() {
        let orders = PathPattern::parse("/case-orders/{id}").expect("valid");
        for spelling in ["/CASE-orders/A1", "/Case-Orders/a1", "/case-orders/a1"] {
            assert!(orders.matches_normal_in(spelling, PathCase::Insensitive), "{spelling}");
        }
        assert!(!orders.matches_normal_in("/CASE-orders/a1", PathCase::Sensitive));
        assert!(!orders.matches_normal_in("/CASE-order/a1", PathCase::Insensitive));
        assert_eq!(PathCase::Insensitive.fold("/CASE-orders/A%2F".into()), "/case-orders/a%2f");
        assert_eq!(PathCase::Sensitive.fold("/CASE".into()), "/CASE");
        assert!(orders.eq_ignoring_case(&PathPattern::parse("/Case-Orders/*").expect("valid")));
        assert!(!orders.eq_ignoring_case(&PathPattern::parse("/case-orders").expect("valid")));
    }

    #[test]
    fn rejects_bad_patterns() {
        for bad in ["orders", "/ord*", "/a/{b", "/{}"] {
            assert!(PathPattern::parse(bad).is_err(), "{bad:?}");
        }
    }
}
