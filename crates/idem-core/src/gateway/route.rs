//! Which requests the gateway guards: a route is a path pattern, a set of methods and a policy.
//! A pattern is exact (`/orders`) or has wildcard segments: `*` or `{name}` match exactly one
//! non-empty segment (`/orders/{id}/refund`). Patterns and paths are compared in normal form
//! ([`super::path`]): `/orders/`, `//orders` and `/%6Frders` match `/orders`.

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
    pub fn parse(text: &str) -> Result<Self, String> {
        if !text.starts_with('/') {
            return Err(format!("path {text:?} must start with '/'"));
        }
        let normal = super::path::normalize(text);
        let segments = normal[1..]
            .split('/')
            .map(|s| match s {
                "*" => Ok(Segment::Any),
                s if s.starts_with('{') && s.ends_with('}') && s.len() > 2 => Ok(Segment::Any),
                s if s.contains(['*', '{', '}']) => {
                    Err(format!("path {text:?}: '*' and '{{name}}' must be whole segments"))
                }
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
        let Some(rest) = path.strip_prefix('/') else { return false };
        let mut parts = rest.split('/');
        for segment in &self.segments {
            match (segment, parts.next()) {
                (Segment::Literal(lit), Some(part)) if lit == part => {}
                (Segment::Any, Some(part)) if !part.is_empty() => {}
                _ => return false,
            }
        }
        parts.next().is_none()
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
    fn rejects_bad_patterns() {
        for bad in ["orders", "/ord*", "/a/{b", "/{}"] {
            assert!(PathPattern::parse(bad).is_err(), "{bad:?}");
        }
    }
}
