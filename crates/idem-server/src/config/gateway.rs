//! `[gateway]`: the `Idempotency-Key` proxy's listener, its upstream and its routes. Routes are
//! parsed into the engine's own [`RoutePolicy`] as the config is read; a route's defaults are
//! `RoutePolicy::new`'s and written nowhere else. `path_case` and `errors` (or `errors_template`,
//! [`super::errors`]) in `[gateway]` are every route's that does not set its own; `[gateway.jwt]`
//! verifies the tokens `jwt:` scope parts read.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use http::uri::{Authority, Scheme};
use idem_core::gateway::{InFlightPolicy, KeyPolicy, PathCase, PathPattern};
use idem_gateway::{EngineConfig, ErrorShape, IdentityResolver, JwtVerifier, RoutePolicy, Routes, ScopePart};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::errors::{self, ErrorStyle, TemplateFile};
use super::identity::IdentityConfig;
use super::jwt::JwtConfig;
use super::value::{BadUrl, ConfigDuration};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Where the proxy listens.
    #[serde(deserialize_with = "super::value::listen_addr")]
    pub listen: SocketAddr,
    /// The API behind it: `http://HOST:PORT` or `https://…`, optionally with a base path.
    pub upstream: Upstream,
    /// Largest response stored for replay; larger ones pass through and release their key.
    #[serde(default = "defaults::max_stored_response")]
    pub max_stored_response: usize,
    /// Memory for recently completed responses, so replays skip the store.
    #[serde(default = "defaults::cache_bytes")]
    pub cache_bytes: usize,
    /// Most upstream calls kept running after their client got a 504 (`upstream_timeout`), at once.
    #[serde(default = "defaults::max_background_calls")]
    pub max_background_calls: usize,
    /// Memory for responses kept until the store takes them (the store was unavailable when the
    /// upstream answered), at once.
    #[serde(default = "defaults::max_unstored_bytes")]
    pub max_unstored_bytes: usize,
    /// `insensitive`: every route that does not say otherwise matches its path ignoring ASCII case
    /// (for upstreams that route so: ASP.NET Core, IIS).
    #[serde(default)]
    pub path_case: PathCase,
    /// The shape of idem's own answers on every route that sets none, and on no route: `problem`
    /// (RFC 9457, the default) or `stripe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<ErrorStyle>,
    /// Instead of `errors`: a JSON file with placeholders that idem's own answers are written in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors_template: Option<TemplateFile>,
    /// The longest an upstream call may run on every route that sets none (default 10 minutes):
    /// past it the call is abandoned and its key left to its lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_call: Option<ConfigDuration>,
    #[serde(default)]
    pub routes: Vec<Route>,
    /// How the bearer JWTs that `jwt:` scope parts read are verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtConfig>,
    /// The app's endpoint that names the caller, for `identity` scope parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<IdentityConfig>,
    /// TLS on the gateway's listener: `cert` and `key` files, re-read on SIGHUP and on change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<super::ListenerTls>,
}

/// The engine's defaults, which are also the config's.
mod defaults {
    pub fn max_stored_response() -> usize {
        idem_gateway::EngineConfig::default().max_stored_response
    }
    pub fn cache_bytes() -> usize {
        idem_gateway::EngineConfig::default().cache_bytes
    }
    pub fn max_background_calls() -> usize {
        idem_gateway::EngineConfig::default().max_background_calls
    }
    pub fn max_unstored_bytes() -> usize {
        idem_gateway::EngineConfig::default().max_unstored_bytes
    }
}

impl GatewayConfig {
    /// The routes as the engine runs them: each with its path case (its own or the gateway's),
    /// when its scope reads `jwt:` claims the verifier, and when it has `identity` the resolver.
    pub fn routes(&self, jwt: Option<&Arc<JwtVerifier>>, identity: Option<&Arc<IdentityResolver>>) -> Routes {
        Routes::new(self.routes.iter().map(|route| {
            let mut policy = route.0.clone();
            policy.path_case = route.path_case(self.path_case);
            policy.errors = route.2.clone().unwrap_or_else(|| self.errors());
            policy.max_call = route.3.or(self.max_call.map(|d| d.0)).unwrap_or(policy.max_call);
            if policy.scope.iter().any(|p| matches!(p, ScopePart::Jwt(_))) {
                policy.jwt = jwt.cloned();
            }
            if policy.scope.contains(&ScopePart::Identity) {
                policy.identity = identity.cloned();
            }
            policy
        }))
    }

    /// Every mistake of `[gateway]` that no single value shows, as (key, message); `api` is the
    /// API's listen address.
    pub fn mistakes(&self, api: SocketAddr) -> Vec<(String, String)> {
        let mut errors = Vec::new();
        if self.listen == api {
            errors.push(("gateway.listen".into(), "must differ from listen".into()));
        }
        if let Some((i, other)) = self.duplicate_route() {
            let message = format!("matches the same requests as gateway.routes[{other}] (same path and method)");
            errors.push((format!("gateway.routes[{i}]"), message));
        }
        errors.extend(self.errors_mistake().map(|m| ("gateway.errors_template".to_owned(), m.to_owned())));
        if let Some(max_call) = self.max_call {
            let inheriting = self.routes.iter().filter(|route| route.3.is_none());
            if let Some(message) = inheriting.filter_map(|route| max_call_mistake(max_call.0, &route.0)).next() {
                errors.push(("gateway.max_call".into(), message));
            }
        }
        let table = |name: &str, field: &str| match field {
            "" => format!("gateway.{name}"),
            field => format!("gateway.{name}.{field}"),
        };
        errors.extend(self.jwt.iter().flat_map(JwtConfig::validate).map(|(f, m)| (table("jwt", f), m)));
        errors.extend(self.identity.iter().flat_map(IdentityConfig::validate).map(|(f, m)| (table("identity", f), m)));
        if let Some((i, j)) = self.unasked_identity_part() {
            let message = "asks the app who is calling: configure [gateway.identity] (url, and id_header or id_field)";
            errors.push((format!("gateway.routes[{i}].scope[{j}]"), message.to_owned()));
        }
        if let Some((i, j)) = self.unverified_jwt_part() {
            let message = "reads a claim of the bearer JWT, which must verify first: configure [gateway.jwt] \
                           (jwks_url, public_key_file or secret)";
            errors.push((format!("gateway.routes[{i}].scope[{j}]"), message.to_owned()));
        }
        errors
    }

    /// Where a route's `identity` part has no `[gateway.identity]` to ask: `(route, part)`.
    pub fn unasked_identity_part(&self) -> Option<(usize, usize)> {
        if self.identity.is_some() {
            return None;
        }
        self.routes
            .iter()
            .enumerate()
            .find_map(|(i, route)| route.0.scope.iter().position(|p| *p == ScopePart::Identity).map(|j| (i, j)))
    }

    /// The shape of idem's own answers on routes that set none, and on no route.
    pub fn errors(&self) -> ErrorShape {
        errors::shape(self.errors, self.errors_template.as_ref()).unwrap_or_default()
    }

    /// `[gateway]` sets both `errors` and `errors_template`: what it is told.
    pub fn errors_mistake(&self) -> Option<&'static str> {
        (self.errors.is_some() && self.errors_template.is_some()).then_some(errors::BOTH)
    }

    /// A route that can never match, because an earlier one takes the same requests (the same path
    /// pattern, in any case when the earlier one ignores case, and a common method): `(index,
    /// index of the earlier route)`.
    pub fn duplicate_route(&self) -> Option<(usize, usize)> {
        self.routes.iter().enumerate().find_map(|(i, route)| {
            self.routes[..i]
                .iter()
                .position(|earlier| {
                    let same_path = match earlier.path_case(self.path_case) {
                        PathCase::Sensitive => earlier.0.path == route.0.path,
                        PathCase::Insensitive => earlier.0.path.eq_ignoring_case(&route.0.path),
                    };
                    same_path && earlier.0.methods.iter().any(|m| route.0.methods.contains(m))
                })
                .map(|other| (i, other))
        })
    }

    /// Where a route's `jwt:` part has no `[gateway.jwt]` to verify its token: `(route, part)`.
    pub fn unverified_jwt_part(&self) -> Option<(usize, usize)> {
        if self.jwt.is_some() {
            return None;
        }
        self.routes
            .iter()
            .enumerate()
            .find_map(|(i, route)| route.0.scope.iter().position(|p| matches!(p, ScopePart::Jwt(_))).map(|j| (i, j)))
    }

    /// What `idem config check` and `idem serve` warn about: routes whose `scope = []` lets every
    /// caller share one key space.
    pub fn warnings(&self) -> Vec<String> {
        self.routes
            .iter()
            .enumerate()
            .filter(|(_, route)| route.0.scope.is_empty())
            .map(|(i, route)| {
                format!(
                    "gateway.routes[{i}] ({}): scope = [] lets every caller share one key space, so one caller's \
                     retry can replay another caller's response. Keep it only if the route has a single caller; \
                     otherwise say who is calling: \"header:authorization\", \"cookie:NAME\" or \"jwt:sub\"",
                    route.0.path.as_str()
                )
            })
            .collect()
    }

    /// What the engine runs with, given the server's request-body limit.
    pub fn engine_config(&self, max_body_bytes: usize) -> EngineConfig {
        EngineConfig {
            max_body_bytes,
            max_stored_response: self.max_stored_response,
            cache_bytes: self.cache_bytes,
            max_background_calls: self.max_background_calls,
            max_unstored_bytes: self.max_unstored_bytes,
        }
    }
}

/// The upstream's scheme and authority, and its base path (without a trailing slash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub scheme: Scheme,
    pub authority: Authority,
    /// The `Host` header requests to the upstream carry: its authority.
    pub host: HeaderValue,
    pub base_path: String,
}

impl Upstream {
    pub fn parse(text: &str) -> Result<Self, BadUrl> {
        let uri: http::Uri = text.parse().map_err(|_| BadUrl::NotUrl(text.to_owned()))?;
        let scheme = uri.scheme().cloned().filter(|s| *s == Scheme::HTTP || *s == Scheme::HTTPS);
        let (Some(scheme), Some(authority)) = (scheme, uri.authority().cloned()) else {
            return Err(BadUrl::NotHttp(text.to_owned()));
        };
        let host = HeaderValue::from_str(authority.as_str()).map_err(|_| BadUrl::UnusableHost(text.to_owned()))?;
        Ok(Self { scheme, authority, host, base_path: uri.path().trim_end_matches('/').to_owned() })
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

impl<'de> Deserialize<'de> for Upstream {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Upstream {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// One `[[gateway.routes]]` entry, parsed, and the `path_case`, `errors` shape and `max_call` it
/// sets (none: the gateway's).
#[derive(Debug, Clone)]
pub struct Route(pub RoutePolicy, pub Option<PathCase>, pub Option<ErrorShape>, pub Option<Duration>);

impl Route {
    fn path_case(&self, gateway: PathCase) -> PathCase {
        self.1.unwrap_or(gateway)
    }
}

impl From<RoutePolicy> for Route {
    /// A route with its own path case, errors shape and max_call: the policy's.
    fn from(policy: RoutePolicy) -> Self {
        let (case, errors, max_call) = (policy.path_case, policy.errors.clone(), policy.max_call);
        Self(policy, Some(case), Some(errors), Some(max_call))
    }
}

/// A scope part as written: `header:NAME`, `cookie:NAME` or `jwt:CLAIM`; read one by one, so that
/// a mistake names its place (`gateway.routes[0].scope[1]`).
struct ScopeSpec(ScopePart);

impl<'de> Deserialize<'de> for ScopeSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ScopePart::parse(&text).map(ScopeSpec).map_err(serde::de::Error::custom)
    }
}

impl Serialize for ScopeSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// A route as written in the file: every field but `path` optional.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteSpec {
    /// Exact (`/orders`) or with `*` / `{param}` segments (`/orders/{id}/refund`).
    path: PathPattern,
    methods: Option<Vec<String>>,
    /// `required` (no key: 400) or `optional` (no key: forwarded as is).
    key: Option<KeyPolicy>,
    /// How long a completed response is replayed.
    ttl: Option<ConfigDuration>,
    /// Request parts that separate one caller's keys from another's: `header:NAME`,
    /// `cookie:NAME`, `jwt:CLAIM`; `[]` when the route has no callers to tell apart.
    scope: Option<Vec<ScopeSpec>>,
    /// `sensitive` or `insensitive`; absent: `[gateway] path_case`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_case: Option<PathCase>,
    /// `reject` (409 + Retry-After) or `wait` (for the first request's response).
    in_flight: Option<InFlightPolicy>,
    wait_timeout: Option<ConfigDuration>,
    /// How long the client waits for the upstream (then 504; the call goes on, the key held).
    upstream_timeout: Option<ConfigDuration>,
    /// How long a started request holds its key if idem dies; longer than `upstream_timeout`.
    lease: Option<ConfigDuration>,
    /// The longest an upstream call may run; absent: `[gateway] max_call`, else 10 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_call: Option<ConfigDuration>,
    store_5xx: Option<bool>,
    /// `problem` or `stripe`; absent (and no `errors_template`): `[gateway]`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    errors: Option<ErrorStyle>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    errors_template: Option<TemplateFile>,
}

impl TryFrom<RouteSpec> for Route {
    type Error = String;

    fn try_from(spec: RouteSpec) -> Result<Self, String> {
        let mut policy = RoutePolicy::new(spec.path);
        if let Some(methods) = spec.methods {
            policy.methods = methods
                .iter()
                .map(|m| m.to_ascii_uppercase().parse().map_err(|_| format!("methods: {m:?} is not an HTTP method")))
                .collect::<Result<_, _>>()?;
        }
        if let Some(scope) = spec.scope {
            policy.scope = scope.into_iter().map(|part| part.0).collect();
        }
        policy.path_case = spec.path_case.unwrap_or_default();
        policy.key = spec.key.unwrap_or(policy.key);
        policy.ttl = spec.ttl.map_or(policy.ttl, |d| d.0);
        policy.in_flight = spec.in_flight.unwrap_or(policy.in_flight);
        policy.wait_timeout = spec.wait_timeout.map_or(policy.wait_timeout, |d| d.0);
        if let Some(lease) = spec.lease {
            policy = policy.with_lease(lease.0);
        }
        policy.upstream_timeout = spec.upstream_timeout.map_or(policy.upstream_timeout, |d| d.0);
        policy.store_5xx = spec.store_5xx.unwrap_or(policy.store_5xx);
        if spec.errors.is_some() && spec.errors_template.is_some() {
            return Err(errors::BOTH.into());
        }
        let errors = errors::shape(spec.errors, spec.errors_template.as_ref());
        policy.errors = errors.clone().unwrap_or_default();
        if policy.ttl.is_zero() || policy.lease.is_zero() || policy.upstream_timeout.is_zero() {
            return Err("ttl, lease and upstream_timeout must be longer than zero".into());
        }
        if policy.lease <= policy.upstream_timeout {
            return Err(format!(
                "lease ({}) must be longer than upstream_timeout ({}): the lease holds the key while idem \
                 waits for the upstream; raise lease or lower upstream_timeout",
                idem_core::format_duration(policy.lease),
                idem_core::format_duration(policy.upstream_timeout)
            ));
        }
        let max_call = spec.max_call.map(|d| d.0);
        if let Some(message) = max_call.and_then(|max_call| max_call_mistake(max_call, &policy)) {
            return Err(message);
        }
        Ok(Self(policy, spec.path_case, errors, max_call))
    }
}

/// Why a route's calls cannot be bounded by `max_call`: it must outlast `upstream_timeout`, since
/// the client waits that long for the call.
fn max_call_mistake(max_call: Duration, route: &RoutePolicy) -> Option<String> {
    (max_call <= route.upstream_timeout).then(|| {
        format!(
            "max_call ({}) must be longer than upstream_timeout ({}): a call is abandoned at max_call, and the \
             client waits upstream_timeout for it; raise max_call or lower upstream_timeout",
            idem_core::format_duration(max_call),
            idem_core::format_duration(route.upstream_timeout)
        )
    })
}

/// Printed with every value, defaults included: `idem config check` shows what is in force.
impl From<&Route> for RouteSpec {
    fn from(route: &Route) -> Self {
        let p = &route.0;
        let (errors, errors_template) = errors::keys(route.2.as_ref());
        RouteSpec {
            path: p.path.clone(),
            methods: Some(p.methods.iter().map(|m| m.to_string()).collect()),
            key: Some(p.key),
            ttl: Some(ConfigDuration(p.ttl)),
            scope: Some(p.scope.iter().cloned().map(ScopeSpec).collect()),
            path_case: route.1,
            in_flight: Some(p.in_flight),
            wait_timeout: Some(ConfigDuration(p.wait_timeout)),
            upstream_timeout: Some(ConfigDuration(p.upstream_timeout)),
            lease: Some(ConfigDuration(p.lease)),
            max_call: route.3.map(ConfigDuration),
            store_5xx: Some(p.store_5xx),
            errors,
            errors_template,
        }
    }
}

impl<'de> Deserialize<'de> for Route {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Route::try_from(RouteSpec::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Route {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RouteSpec::from(self).serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const GATEWAY: &str =
        "listen = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000\"\n\n[[routes]]\npath = \"/orders\"\n";

    /// The first route's (upstream_timeout, lease), or why the config is refused.
    fn route(extra: &str) -> Result<(Duration, Duration), String> {
        let config: GatewayConfig = toml::from_str(&format!("{GATEWAY}{extra}")).map_err(|e| e.to_string())?;
        let route = &config.routes[0].0;
        Ok((route.upstream_timeout, route.lease))
    }

    #[test]
    fn a_lease_alone_brings_its_upstream_timeout() {
        let secs = Duration::from_secs;
        assert_eq!(route(""), Ok((secs(30), secs(60))), "the defaults");
        assert_eq!(route("lease = \"5s\"\n"), Ok((Duration::from_millis(2500), secs(5))), "half the lease");
        assert_eq!(route("lease = \"10m\"\n"), Ok((secs(30), secs(600))), "30 s at most");
        assert_eq!(route("upstream_timeout = \"1s\"\nlease = \"3s\"\n"), Ok((secs(1), secs(3))));
    }

    #[test]
    fn max_call_outlasts_the_upstream_timeout_and_routes_inherit_the_gateways() {
        let gateway = |extra: &str, route: &str| -> Result<GatewayConfig, String> {
            let text = format!(
                "listen = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000\"\n{extra}\n[[routes]]\npath = \"/orders\"\n{route}"
            );
            toml::from_str(&text).map_err(|e| e.to_string())
        };
        let max_call = |g: &GatewayConfig| g.routes(None, None).0[0].max_call;
        assert_eq!(max_call(&gateway("", "").expect("valid")), Duration::from_secs(600), "the default");
        assert_eq!(max_call(&gateway("max_call = \"2m\"", "").expect("valid")), Duration::from_secs(120));
        let own = gateway("max_call = \"2m\"", "max_call = \"45s\"").expect("valid");
        assert_eq!(max_call(&own), Duration::from_secs(45), "a route's own wins");
        let err = gateway("", "max_call = \"30s\"").expect_err("not past the default upstream_timeout");
        assert!(err.contains("must be longer than upstream_timeout"), "{err}");
        let inherited = gateway("max_call = \"10s\"", "").expect("parses");
        let mistakes = inherited.mistakes("127.0.0.1:7070".parse().expect("addr"));
        assert!(
            mistakes.iter().any(|(key, m)| key == "gateway.max_call" && m.contains("upstream_timeout")),
            "{mistakes:?}"
        );
    }

    #[test]
    fn the_lease_must_outlast_the_upstream_timeout() {
        for bad in ["upstream_timeout = \"90s\"\n", "upstream_timeout = \"3s\"\nlease = \"3s\"\n"] {
            let err = route(bad).expect_err(bad);
            assert!(err.contains("must be longer than upstream_timeout"), "{bad}: {err}");
        }
        assert!(route("upstream_timeout = \"0s\"\n").is_err());
    }

    #[test]
    fn every_value_in_force_is_shown() {
        let config: GatewayConfig = toml::from_str(GATEWAY).expect("valid");
        let shown = toml::to_string(&config).expect("serialises");
        assert!(
            shown.contains("upstream_timeout = \"30s\"") && shown.contains("max_background_calls = 1000"),
            "{shown}"
        );
    }
}
