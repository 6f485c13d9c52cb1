//! The one typed config, loaded in layers: compiled-in defaults, then the TOML file, then `IDEM_`
//! environment variables (`__` for nesting), then command-line flags. It is validated once, at
//! load; an unknown key or a bad value is an error that names it. Secrets never appear in `Debug`
//! or in `idem config check`. Loading has no side effects.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idem_core::gateway::{InFlightPolicy, KeyPolicy, PathPattern};
use idem_core::{Namespace, format_duration, parse_duration};
use idem_gateway::{RoutePolicy, Routes, ScopePart};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the `/v1` API, health and metrics.
    pub listen: SocketAddr,
    /// Where the embedded store keeps its file.
    pub data_dir: PathBuf,
    pub store: StoreConfig,
    pub auth: AuthConfig,
    pub limits: LimitsConfig,
    pub sweeper: SweeperConfig,
    pub log: LogConfig,
    pub namespaces: BTreeMap<String, NamespaceConfig>,
    /// The Idempotency-Key reverse proxy; absent: not started.
    pub gateway: Option<GatewayConfig>,
    /// Inbound event sources, each delivered to its handler.
    pub sources: Vec<SourceConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            data_dir: PathBuf::from("./idem-data"),
            store: StoreConfig::Sqlite {},
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
            sweeper: SweeperConfig::default(),
            log: LogConfig::default(),
            namespaces: BTreeMap::new(),
            gateway: None,
            sources: Vec::new(),
        }
    }
}

/// Which store backs this node. A tagged enum, so that a PostgreSQL URL cannot be given to the
/// embedded store by mistake.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum StoreConfig {
    /// One SQLite file under `data_dir`.
    Sqlite {},
    /// A PostgreSQL database shared by several nodes.
    Postgres {
        /// `postgres://user:password@host:port/db`; never printed.
        url: Secret,
        /// Connections this node keeps to the database, at most.
        #[serde(default = "defaults::pool_size")]
        pool_size: usize,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Bearer tokens accepted on `/v1`. Empty: no auth, and only a loopback `listen` is allowed.
    pub tokens: Vec<Secret>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request body accepted, in bytes; larger bodies get 413.
    pub max_body_bytes: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self { max_body_bytes: 1024 * 1024 }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SweeperConfig {
    /// How often expired claims are deleted.
    pub interval: ConfigDuration,
    /// Rows deleted per transaction, so that sweeping never stalls writers for long.
    pub batch: usize,
}

impl Default for SweeperConfig {
    fn default() -> Self {
        Self { interval: ConfigDuration(Duration::from_secs(60)), batch: 1000 }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A filter such as `info` or `info,idem_server=debug`.
    pub level: String,
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { level: "info".into(), format: LogFormat::Text }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NamespaceConfig {
    /// TTL of claims that do not give `ttl_seconds`; absent means never expire.
    pub default_ttl: Option<ConfigDuration>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Where the proxy listens.
    pub listen: SocketAddr,
    /// The API behind it: `http://HOST:PORT`, optionally with a base path.
    pub upstream: String,
    /// Largest response stored for replay; larger ones pass through and release their key.
    #[serde(default = "defaults::max_stored_response")]
    pub max_stored_response: usize,
    /// Memory for recently completed responses, so replays skip the store.
    #[serde(default = "defaults::cache_bytes")]
    pub cache_bytes: usize,
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Exact (`/orders`) or with `*` / `{param}` segments (`/orders/{id}/refund`).
    pub path: String,
    #[serde(default = "defaults::methods")]
    pub methods: Vec<String>,
    /// `required` (no key: 400) or `optional` (no key: forwarded as is).
    #[serde(default = "defaults::key")]
    pub key: KeyPolicy,
    /// How long a completed response is replayed.
    #[serde(default = "defaults::ttl")]
    pub ttl: ConfigDuration,
    /// Request parts that separate one caller's keys from another's: `header:NAME`.
    #[serde(default = "defaults::scope")]
    pub scope: Vec<String>,
    /// `reject` (409 + Retry-After) or `wait` (for the first request's response).
    #[serde(default = "defaults::in_flight")]
    pub in_flight: InFlightPolicy,
    #[serde(default = "defaults::wait_timeout")]
    pub wait_timeout: ConfigDuration,
    /// How long a started request holds its key if idem dies or the upstream hangs.
    #[serde(default = "defaults::lease")]
    pub lease: ConfigDuration,
    #[serde(default)]
    pub store_5xx: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Appears in `POST /v1/sources/{name}/events`; 1-64 of `[a-z0-9_.-]`.
    pub name: String,
    /// Where each event is POSTed: `http://…`.
    pub handler_url: String,
    /// A JSON pointer into the body (`/external_event_id`) or `header:NAME`.
    pub event_id: String,
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: u32,
    #[serde(default = "defaults::attempt_timeout")]
    pub attempt_timeout: ConfigDuration,
    /// Waits before attempts 2, 3, …; the last one repeats.
    #[serde(default = "defaults::backoff")]
    pub backoff: Vec<ConfigDuration>,
    /// `whsec_` + base64 of 24-64 bytes: signs deliveries and result webhooks.
    pub signing_secret: Secret,
    /// When set, intake requires the sender's Standard Webhooks signature made with it.
    #[serde(default)]
    pub verify_secret: Option<Secret>,
    /// Receives `receipt.completed` / `receipt.dead` when a receipt ends.
    #[serde(default)]
    pub result_webhook_url: Option<String>,
    #[serde(default = "defaults::backoff")]
    pub result_backoff: Vec<ConfigDuration>,
    /// Deliveries to this source's handler at once, at most.
    #[serde(default = "defaults::concurrency")]
    pub concurrency: usize,
}

impl SourceConfig {
    fn validate(&self) -> Result<(), String> {
        Namespace::new(&self.name).map_err(|e| format!("name: {}", e.message))?;
        for url in std::iter::once(&self.handler_url).chain(self.result_webhook_url.iter()) {
            let uri: http::Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
            if uri.scheme_str() != Some("http") || uri.authority().is_none() {
                return Err(format!("{url:?} must be an http:// URL"));
            }
        }
        if !(self.event_id.starts_with('/') || self.event_id.strip_prefix("header:").is_some_and(|h| !h.is_empty())) {
            return Err("event_id must be a JSON pointer (\"/field\") or \"header:NAME\"".into());
        }
        idem_core::event::Secret::parse(self.signing_secret.expose()).map_err(|e| format!("signing_secret: {e}"))?;
        if let Some(verify) = &self.verify_secret {
            idem_core::event::Secret::parse(verify.expose()).map_err(|e| format!("verify_secret: {e}"))?;
        }
        if self.max_attempts == 0 || self.concurrency == 0 || self.backoff.is_empty() || self.result_backoff.is_empty()
        {
            return Err("max_attempts and concurrency must be at least 1, and backoff lists not empty".into());
        }
        Ok(())
    }
}

mod defaults {
    use super::ConfigDuration;
    use idem_core::gateway::{InFlightPolicy, KeyPolicy};
    use std::time::Duration;

    pub fn max_stored_response() -> usize {
        1 << 20
    }
    pub fn cache_bytes() -> usize {
        64 << 20
    }
    pub fn methods() -> Vec<String> {
        vec!["POST".into(), "PATCH".into()]
    }
    pub fn key() -> KeyPolicy {
        KeyPolicy::Optional
    }
    pub fn ttl() -> ConfigDuration {
        ConfigDuration(Duration::from_secs(24 * 3600))
    }
    pub fn scope() -> Vec<String> {
        vec!["header:authorization".into()]
    }
    pub fn in_flight() -> InFlightPolicy {
        InFlightPolicy::Reject
    }
    pub fn wait_timeout() -> ConfigDuration {
        ConfigDuration(Duration::from_secs(10))
    }
    pub fn lease() -> ConfigDuration {
        ConfigDuration(Duration::from_secs(60))
    }
    pub fn max_attempts() -> u32 {
        3
    }
    pub fn attempt_timeout() -> ConfigDuration {
        ConfigDuration(Duration::from_secs(120))
    }
    pub fn backoff() -> Vec<ConfigDuration> {
        [10, 60, 300].map(|s| ConfigDuration(Duration::from_secs(s))).to_vec()
    }
    pub fn concurrency() -> usize {
        16
    }
    pub fn pool_size() -> usize {
        16
    }
}

impl RouteConfig {
    /// A route config as for `path` with every default.
    pub fn new(path: &str) -> Self {
        Self {
            path: path.into(),
            methods: defaults::methods(),
            key: defaults::key(),
            ttl: defaults::ttl(),
            scope: defaults::scope(),
            in_flight: defaults::in_flight(),
            wait_timeout: defaults::wait_timeout(),
            lease: defaults::lease(),
            store_5xx: false,
        }
    }

    pub fn policy(&self) -> Result<RoutePolicy, String> {
        let mut policy = RoutePolicy::new(PathPattern::parse(&self.path)?);
        policy.methods = self
            .methods
            .iter()
            .map(|m| m.to_ascii_uppercase().parse::<http::Method>().map_err(|_| format!("{m:?} is not an HTTP method")))
            .collect::<Result<_, _>>()?;
        policy.key = self.key;
        policy.ttl = self.ttl.0;
        policy.scope = self.scope.iter().map(|s| ScopePart::parse(s)).collect::<Result<_, _>>()?;
        policy.in_flight = self.in_flight;
        policy.wait_timeout = self.wait_timeout.0;
        policy.lease = self.lease.0;
        policy.store_5xx = self.store_5xx;
        if policy.ttl.is_zero() || policy.lease.is_zero() {
            return Err("ttl and lease must be longer than zero".into());
        }
        Ok(policy)
    }
}

impl GatewayConfig {
    pub fn routes(&self) -> Result<Routes, String> {
        self.routes.iter().map(RouteConfig::policy).collect::<Result<Vec<_>, _>>().map(Routes::new)
    }

    /// The upstream's scheme and authority, and its base path (without a trailing slash).
    pub fn upstream_base(&self) -> Result<(http::uri::Scheme, http::uri::Authority, String), String> {
        let uri: http::Uri = self.upstream.parse().map_err(|_| format!("{:?} is not a URL", self.upstream))?;
        let scheme = uri.scheme().cloned().filter(|s| *s == http::uri::Scheme::HTTP);
        let (Some(scheme), Some(authority)) = (scheme, uri.authority().cloned()) else {
            return Err(format!("{:?} must be an http:// URL with a host", self.upstream));
        };
        Ok((scheme, authority, uri.path().trim_end_matches('/').to_owned()))
    }
}

/// A duration written as `"250ms"`, `"10s"`, `"5m"`, `"24h"` or `"90d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

impl Serialize for ConfigDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map(ConfigDuration).map_err(serde::de::Error::custom)
    }
}

/// A value that must never be printed: `Debug` and `Serialize` show `[redacted]`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("[redacted]")
    }
}

/// Command-line values that override every other layer.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub store: Option<String>,
    pub database_url: Option<String>,
}

/// Environment variables that belong to the command line, not to the config tree.
const NOT_CONFIG_ENV: &[&str] = &["IDEM_CONFIG", "IDEM_SERVER", "IDEM_TOKEN", "IDEM_DATABASE_URL"];
/// Variables of idem's own test suite (`IDEM_TEST_DATABASE_URL`), never config.
const TEST_ENV_PREFIX: &str = "IDEM_TEST_";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("config key `{key}`: {message}")]
    Key { key: String, message: String },
}

impl Config {
    /// Loads every layer: defaults, `file`, `env` (the process environment in production), flags.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let mut tree = match file {
            Some(path) => read_file(path)?,
            None => toml::Table::new(),
        };
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("IDEM_") else { continue };
            if NOT_CONFIG_ENV.contains(&name.as_str()) || name.starts_with(TEST_ENV_PREFIX) || rest.is_empty() {
                continue;
            }
            let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
            set_path(&mut tree, &path, env_value(&value))
                .map_err(|message| ConfigError::Key { key: name.clone(), message })?;
        }
        apply_overrides(&mut tree, overrides)?;
        let config: Config = serde_path_to_error::deserialize(toml::Value::Table(tree))
            .map_err(|e| ConfigError::Key { key: e.path().to_string(), message: e.into_inner().to_string() })?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let key_error = |key: String, message: &str| ConfigError::Key { key, message: message.to_owned() };
        for (name, ns) in &self.namespaces {
            Namespace::new(name).map_err(|e| key_error(format!("namespaces.{name}"), &e.message))?;
            if ns.default_ttl.is_some_and(|t| t.0.is_zero()) {
                return Err(key_error(format!("namespaces.{name}.default_ttl"), "must be longer than zero"));
            }
        }
        if self.auth.tokens.iter().any(|t| t.expose().is_empty()) {
            return Err(key_error("auth.tokens".into(), "tokens must not be empty strings"));
        }
        if self.limits.max_body_bytes == 0 {
            return Err(key_error("limits.max_body_bytes".into(), "must be at least 1"));
        }
        if self.sweeper.batch == 0 || self.sweeper.interval.0.is_zero() {
            return Err(key_error("sweeper".into(), "interval and batch must be greater than zero"));
        }
        if let Some(gateway) = &self.gateway {
            gateway.upstream_base().map_err(|e| key_error("gateway.upstream".into(), &e))?;
            for (i, route) in gateway.routes.iter().enumerate() {
                route.policy().map_err(|e| key_error(format!("gateway.routes[{i}]"), &e))?;
            }
            if gateway.listen == self.listen {
                return Err(key_error("gateway.listen".into(), "must differ from listen"));
            }
        }
        for (i, source) in self.sources.iter().enumerate() {
            source.validate().map_err(|e| key_error(format!("sources[{i}]"), &e))?;
            if self.sources[..i].iter().any(|other| other.name == source.name) {
                return Err(key_error(format!("sources[{i}].name"), "another source has this name"));
            }
        }
        Ok(())
    }

    /// The effective config as TOML, secrets redacted: what `idem config check` prints.
    pub fn to_redacted_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }

    /// The TTL a claim gets when it does not give one.
    pub fn default_ttl(&self, ns: &str) -> Option<Duration> {
        self.namespaces.get(ns).and_then(|n| n.default_ttl).map(|d| d.0)
    }
}

fn read_file(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    text.parse::<toml::Table>().map_err(|e| ConfigError::Syntax { path: path.to_owned(), message: e.to_string() })
}

/// An env value is read as a TOML value when it is one (`500`, `true`, `["a","b"]`), else as a
/// string, so `IDEM_LISTEN=0.0.0.0:7070` needs no quotes.
fn env_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

fn set_path(tree: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let (last, parents) = path.split_last().ok_or("empty key")?;
    let mut table = tree;
    for key in parents {
        let entry = table.entry(key.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry.as_table_mut().ok_or_else(|| format!("`{key}` is not a table"))?;
    }
    table.insert(last.clone(), value);
    Ok(())
}

fn apply_overrides(tree: &mut toml::Table, o: &Overrides) -> Result<(), ConfigError> {
    let mut set = |path: &[&str], value: toml::Value| {
        let path: Vec<String> = path.iter().map(|s| s.to_string()).collect();
        set_path(tree, &path, value).map_err(|message| ConfigError::Key { key: path.join("."), message })
    };
    if let Some(listen) = &o.listen {
        set(&["listen"], toml::Value::String(listen.clone()))?;
    }
    if let Some(dir) = &o.data_dir {
        set(&["data_dir"], toml::Value::String(dir.to_string_lossy().into_owned()))?;
    }
    if let Some(store) = &o.store {
        set(&["store", "type"], toml::Value::String(store.clone()))?;
    }
    if let Some(url) = &o.database_url {
        set(&["store", "url"], toml::Value::String(url.clone()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(toml: &str, env: &[(&str, &str)], o: &Overrides) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("idem.toml");
        std::fs::write(&path, toml).expect("write config");
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Config::load(Some(&path), env, o)
    }

    #[test]
    fn defaults_need_nothing() {
        let c = Config::load(None, Vec::new(), &Overrides::default()).expect("defaults");
        assert_eq!(c.listen.to_string(), "127.0.0.1:7070");
        assert_eq!(c.data_dir, PathBuf::from("./idem-data"));
        assert_eq!(c.store, StoreConfig::Sqlite {});
        assert_eq!(c.limits.max_body_bytes, 1 << 20);
    }

    #[test]
    fn layers_apply_in_order() {
        let file = "listen = \"127.0.0.1:1111\"\n[namespaces.notified_articles]\ndefault_ttl = \"90d\"\n";
        let env = [
            ("IDEM_LISTEN", "127.0.0.1:2222"),
            ("IDEM_SWEEPER__BATCH", "50"),
            ("IDEM_TOKEN", "client-only"),
            ("IDEM_TEST_DATABASE_URL", "postgres://for-the-test-suite"),
        ];
        let c = load(file, &env, &Overrides::default()).expect("load");
        assert_eq!(c.listen.to_string(), "127.0.0.1:2222", "env beats file");
        assert_eq!(c.sweeper.batch, 50);
        assert_eq!(c.default_ttl("notified_articles"), Some(Duration::from_secs(90 * 86_400)));
        let flags = Overrides { listen: Some("127.0.0.1:3333".into()), ..Overrides::default() };
        let c = load(file, &env, &flags).expect("load");
        assert_eq!(c.listen.to_string(), "127.0.0.1:3333", "flags beat env");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let err = load("[namespaces.a]\ndefualt_ttl = \"1d\"\n", &[], &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("namespaces.a") && err.to_string().contains("defualt_ttl"), "{err}");
        let err = load("[namespaces.a]\ndefault_ttl = \"5x\"\n", &[], &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("namespaces.a.default_ttl"), "{err}");
        let err = load("", &[("IDEM_LISTN", "x")], &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("listn"), "{err}");
        let err = load("[namespaces.Bad]\n", &[], &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("namespaces.Bad"), "{err}");
        let err = load("[store]\ntype = \"sqlite\"\nurl = \"postgres://x\"\n", &[], &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("url"), "{err}");
    }

    #[test]
    fn gateway_routes_take_the_contract_defaults() {
        let file = "[gateway]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000\"\n\n[[gateway.routes]]\npath = \"/orders\"\nkey = \"required\"\nttl = \"48h\"\n";
        let c = load(file, &[], &Overrides::default()).expect("load");
        let routes = c.gateway.as_ref().expect("gateway").routes().expect("routes");
        let orders = &routes.0[0];
        assert_eq!(orders.methods, vec![http::Method::POST, http::Method::PATCH]);
        assert_eq!(orders.key, KeyPolicy::Required);
        assert_eq!(orders.ttl, Duration::from_secs(48 * 3600));
        assert_eq!(orders.lease, Duration::from_secs(60));
        assert_eq!(orders.in_flight, InFlightPolicy::Reject);
        assert!(!orders.store_5xx);
        let bad = load(&file.replace("/orders", "orders"), &[], &Overrides::default()).unwrap_err();
        assert!(bad.to_string().contains("gateway.routes[0]"), "{bad}");
        let bad = load(&file.replace("http://127.0.0.1:3000", "ftp://x"), &[], &Overrides::default()).unwrap_err();
        assert!(bad.to_string().contains("gateway.upstream"), "{bad}");
        let bad =
            load(&file.replace("key = \"required\"", "key = \"sometimes\""), &[], &Overrides::default()).unwrap_err();
        assert!(bad.to_string().contains("gateway.routes[0].key"), "{bad}");
    }

    #[test]
    fn sources_take_the_contract_defaults_and_are_checked() {
        let file = "[[sources]]\nname = \"partner\"\nhandler_url = \"http://127.0.0.1:9000/handle\"\nevent_id = \"/external_event_id\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
        let c = load(file, &[], &Overrides::default()).expect("load");
        let source = &c.sources[0];
        assert_eq!((source.max_attempts, source.attempt_timeout.0), (3, Duration::from_secs(120)));
        assert_eq!(source.backoff.iter().map(|d| d.0.as_secs()).collect::<Vec<_>>(), [10, 60, 300]);
        assert!(!c.to_redacted_toml().contains("MfKQ9r8"), "the secret is redacted");
        let bad = load(&file.replace("whsec_MfKQ", "MfKQ"), &[], &Overrides::default()).unwrap_err();
        assert!(bad.to_string().contains("sources[0]") && bad.to_string().contains("signing_secret"), "{bad}");
        assert!(!bad.to_string().contains("MfKQ9r8"), "errors never repeat the secret: {bad}");
        let bad =
            load(&file.replace("/external_event_id", "external_event_id"), &[], &Overrides::default()).unwrap_err();
        assert!(bad.to_string().contains("event_id"), "{bad}");
    }

    #[test]
    fn secrets_never_print() {
        let c = load("[auth]\ntokens = [\"s3cret-token\"]\n", &[], &Overrides::default()).expect("load");
        assert_eq!(c.auth.tokens[0].expose(), "s3cret-token");
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(!c.to_redacted_toml().contains("s3cret"));
        assert!(c.to_redacted_toml().contains("[redacted]"));
    }
}
