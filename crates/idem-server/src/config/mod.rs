//! The one typed config, loaded in layers: compiled-in defaults, then the TOML file, then `IDEM_`
//! environment variables (`__` for nesting), then command-line flags. Every value is parsed into
//! the type the code uses as it is read (durations, URLs, secrets, event-id rules, route
//! policies), and checked once, at load: an unknown key or a bad value is an error that names it
//! (every one at once: [`collect`]; a file that is not valid TOML is read past its bad lines:
//! [`syntax`]), and nothing downstream can fail on config. Which `IDEM_`
//! variables are config is [`env`]'s rule. Secrets never appear in `Debug` or in
//! `idem config check`. Loading has no side effects.

mod access;
mod collect;
mod env;
mod errors;
mod gateway;
mod identity;
mod jwt;
mod locate;
mod resp;
mod source;
mod syntax;
mod value;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use idem_core::Namespace;
use serde::{Deserialize, Serialize};

pub use access::{AuthConfig, Can, HttpConfig, ListenerTls, TlsConfig, TokenConfig, TokenDigest, token_digest};
pub use env::TOP_LEVEL_KEYS;
use env::set_path;
pub use errors::{ErrorStyle, TemplateFile};
pub use gateway::{GatewayConfig, Route, Upstream};
pub use identity::IdentityConfig;
pub use jwt::JwtConfig;
pub use resp::RespConfig;
pub use source::SourceConfig;
pub use value::{ConfigDuration, HttpUrl, Secret};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the `/v1` API, health and metrics.
    #[serde(deserialize_with = "value::listen_addr")]
    pub listen: SocketAddr,
    /// Where the embedded store keeps its file.
    pub data_dir: PathBuf,
    pub store: StoreConfig,
    pub auth: AuthConfig,
    /// What the API listener accepts from browsers (`allowed_hosts`).
    pub http: HttpConfig,
    /// TLS on the API listener, and the extra CAs trusted for idem's own `https://` requests.
    pub tls: TlsConfig,
    pub limits: LimitsConfig,
    pub sweeper: SweeperConfig,
    pub events: EventsConfig,
    pub log: LogConfig,
    pub namespaces: NamespacesConfig,
    /// The Idempotency-Key reverse proxy; absent: not started.
    pub gateway: Option<GatewayConfig>,
    /// The Redis protocol on the claims of one namespace; absent: not started.
    pub resp: Option<RespConfig>,
    /// Inbound event sources, each delivered to its handler.
    pub sources: Vec<SourceConfig>,
    /// What loading noticed without refusing: `IDEM_` variables that are not config. Logged by
    /// `idem serve` once logging starts; printed by `idem config check`.
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// How this config was loaded, to load it again the same way (SIGHUP reads `[auth]` again).
    #[serde(skip)]
    pub origin: Origin,
}

/// The layers a config was loaded from: its file, the `IDEM_` variables, the flags. Its `Debug`
/// names the file only: the variables may hold tokens.
#[derive(Clone, Default)]
pub struct Origin(Option<Arc<Layers>>);

struct Layers {
    file: Option<PathBuf>,
    env: Vec<(String, String)>,
    overrides: Overrides,
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = self.0.as_ref().and_then(|l| l.file.as_ref());
        f.debug_struct("Origin").field("file", &file).finish_non_exhaustive()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            data_dir: PathBuf::from("./idem-data"),
            store: StoreConfig::Embedded {},
            auth: AuthConfig::default(),
            http: HttpConfig::default(),
            tls: TlsConfig::default(),
            limits: LimitsConfig::default(),
            sweeper: SweeperConfig::default(),
            events: EventsConfig::default(),
            log: LogConfig::default(),
            namespaces: NamespacesConfig::default(),
            gateway: None,
            resp: None,
            sources: Vec::new(),
            warnings: Vec::new(),
            origin: Origin::default(),
        }
    }
}

/// Which store backs this node. A tagged enum, so that a PostgreSQL URL cannot be given to the
/// embedded store by mistake.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum StoreConfig {
    /// The embedded store under `data_dir`: claims and keys in the log engine (`log/`), events in
    /// SQLite (`idem.db`). `type = "sqlite"`, its old name, still means it (with a warning).
    #[serde(alias = "sqlite")]
    Embedded {},
    /// A PostgreSQL database shared by several nodes.
    Postgres {
        /// `postgres://user:password@host:port/db`, with several hosts for a replicated
        /// PostgreSQL (`postgres://h1:5432,h2:5432/db`); never printed.
        url: Secret,
        /// Connections this node keeps to the database, at most.
        #[serde(default = "default_pool_size")]
        pool_size: usize,
        /// How long connecting to one host may take, all of it (TCP, startup, authentication).
        #[serde(default = "default_connect_timeout")]
        connect_timeout: ConfigDuration,
        /// How long one store call may take, from asking for a connection to its answer; past it
        /// the request is answered 503 and the connection discarded.
        #[serde(default = "default_call_timeout")]
        call_timeout: ConfigDuration,
        /// What stands between idem and PostgreSQL: `"none"`, `"session"` (a pooler that keeps
        /// each client on one server session: nothing changes) or `"transaction"` (PgBouncer in
        /// transaction mode, RDS Proxy: no prepared statements, no session state).
        #[serde(default)]
        pooler: Pooler,
        /// A URL that reaches PostgreSQL past the pooler, for what needs a session of its own:
        /// the listening connection (notifications) and migrations; never printed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        direct_url: Option<Secret>,
    },
}

/// `[store] pooler`: what stands between idem and PostgreSQL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooler {
    /// A direct connection, or a TCP proxy (HAProxy).
    #[default]
    None,
    /// A pooler that keeps each client on one server session (PgBouncer's session mode).
    Session,
    /// A pooler that hands each transaction any server connection (PgBouncer's transaction mode,
    /// RDS Proxy).
    Transaction,
}

impl Pooler {
    /// The store's terms: only a transaction pooler changes what it does.
    pub fn for_store(self) -> idem_postgres::Pooler {
        match self {
            Pooler::None | Pooler::Session => idem_postgres::Pooler::None,
            Pooler::Transaction => idem_postgres::Pooler::Transaction,
        }
    }
}

fn default_pool_size() -> usize {
    idem_postgres::PgOptions::default().pool_size
}

fn default_connect_timeout() -> ConfigDuration {
    ConfigDuration(idem_postgres::PgOptions::default().connect_timeout)
}

fn default_call_timeout() -> ConfigDuration {
    ConfigDuration(idem_postgres::PgOptions::default().call_timeout)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request body accepted, in bytes; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Largest request header block on the API listener, in bytes; larger get 431.
    pub max_header_bytes: usize,
    /// How long a client may take to send a request's headers, from its first byte (or from
    /// connecting, for the first request); then the connection is closed.
    pub header_read_timeout: ConfigDuration,
    /// How long a kept-alive connection may sit idle between requests before it is closed.
    pub idle_timeout: ConfigDuration,
    /// Open connections per listener at most; more wait to be accepted. At start-up it is lowered
    /// to fit the process's open-file limit (raised to its hard limit first).
    pub max_connections: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: idem_gateway::DEFAULT_MAX_BODY_BYTES,
            max_header_bytes: 16 * 1024,
            header_read_timeout: ConfigDuration(Duration::from_secs(10)),
            idle_timeout: ConfigDuration(Duration::from_secs(60)),
            max_connections: 10_000,
        }
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

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EventsConfig {
    /// How long ended, handled receipts (`completed`, `discarded`) are kept after their last
    /// change; the sweeper deletes older ones with their attempts. `dead` receipts are kept until
    /// replayed or discarded. Absent: kept forever.
    pub retention: Option<ConfigDuration>,
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

/// `[namespaces]`: `strict`, and a table per configured namespace (so no namespace can be named
/// `strict`). Derefs to those tables.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NamespacesConfig {
    /// Refuse (404) claims and operations in a namespace that has no table here, so that a typo'd
    /// namespace cannot silently create records that never expire.
    pub strict: bool,
    #[serde(flatten)]
    pub named: BTreeMap<String, NamespaceConfig>,
}

/// Read key by key, so that an error inside a namespace's table names it (`namespaces.a.ttl`).
impl<'de> Deserialize<'de> for NamespacesConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Tables;
        impl<'de> serde::de::Visitor<'de> for Tables {
            type Value = NamespacesConfig;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`strict = true|false` and a table per namespace")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<NamespacesConfig, A::Error> {
                let mut config = NamespacesConfig::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "strict" {
                        config.strict = map.next_value()?;
                    } else {
                        let table = map.next_value()?;
                        config.named.insert(key, table);
                    }
                }
                Ok(config)
            }
        }
        d.deserialize_map(Tables)
    }
}

impl std::ops::Deref for NamespacesConfig {
    type Target = BTreeMap<String, NamespaceConfig>;

    fn deref(&self) -> &Self::Target {
        &self.named
    }
}

impl std::ops::DerefMut for NamespacesConfig {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.named
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NamespaceConfig {
    /// TTL of claims that do not give `ttl_seconds`; absent means never expire.
    pub default_ttl: Option<ConfigDuration>,
}

/// Command-line values that override every other layer.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub store: Option<String>,
    pub database_url: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("config key `{key}`: {message}")]
    Key { key: String, message: String },
    /// A [`ConfigError::Key`] with where the key is in the file.
    #[error("config key `{key}` ({at}): {message}")]
    Placed { key: String, at: String, message: String },
    /// Every mistake found, each naming its key, so that one run shows them all.
    #[error("{} mistakes in the config:\n{}", .0.len(), .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Many(Vec<ConfigError>),
}

impl ConfigError {
    /// This error with where its key is in the file `text` (read from `path`), when it is there:
    /// `config key `sources[0].max_attempts` (idem.toml line 12, column 1): …`.
    fn placed(self, path: &Path, text: &str) -> Self {
        match self {
            ConfigError::Key { key, message } => match locate::locate(text, &key) {
                Some((line, column)) => {
                    let file = path
                        .file_name()
                        .map_or_else(|| path.display().to_string(), |f| f.to_string_lossy().into_owned());
                    ConfigError::Placed { key, at: format!("{file} line {line}, column {column}"), message }
                }
                None => ConfigError::Key { key, message },
            },
            other => other,
        }
    }

    /// One error as itself; several as [`ConfigError::Many`]; none as `None`.
    fn gather(mut errors: Vec<ConfigError>) -> Option<ConfigError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ConfigError::Many(errors)),
        }
    }
}

impl Config {
    /// Loads every layer: defaults, `file`, `env` (the process environment in production), flags.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let env: Vec<(String, String)> = env.into_iter().filter(|(name, _)| name.starts_with("IDEM_")).collect();
        let origin = Origin(Some(Arc::new(Layers {
            file: file.map(Path::to_path_buf),
            env: env.clone(),
            overrides: overrides.clone(),
        })));
        let FileLayer { mut tree, text, mistakes: mut errors, skipped } = match file {
            Some(path) => read_file(path)?,
            None => FileLayer::default(),
        };
        let mut warnings = env::apply(&mut tree, env)?;
        apply_overrides(&mut tree, overrides)?;
        warnings.extend(old_store_name(&tree));
        let read = collect::read(tree, plain);
        errors.extend(read.errors.into_iter().filter(|e| !left_out(e, &skipped)));
        if let Some(config) = &read.config {
            // Values that stood in for missing ones, or moved, are not the file's: not judged.
            let sure = |e: &ConfigError| match e {
                ConfigError::Key { key, .. } => !read.unsure.iter().any(|u| key.starts_with(u.as_str())),
                _ => true,
            };
            errors.extend(config.validate(errors.is_empty()).into_iter().filter(sure));
        }
        if let Some(path) = file {
            errors = errors.into_iter().map(|e| e.placed(path, &text)).collect();
        }
        match (ConfigError::gather(errors), read.config) {
            (None, Some(config)) => {
                warnings.extend(config.gateway.iter().flat_map(GatewayConfig::warnings));
                Ok(Config { warnings, origin, ..config })
            }
            (Some(error), _) => Err(error),
            (None, None) => Err(ConfigError::Key { key: String::new(), message: "cannot be read".into() }),
        }
    }

    /// This config loaded again from the same layers (its file read afresh); `None` for one made
    /// in code rather than loaded.
    pub fn reload(&self) -> Option<Result<Config, ConfigError>> {
        let layers = self.origin.0.as_ref()?;
        Some(Config::load(layers.file.as_deref(), layers.env.clone(), &layers.overrides))
    }

    /// Every mistake serde cannot see, each naming its key. `whole`: the config is the file's,
    /// with nothing taken out, so references between tables can be judged too.
    fn validate(&self, whole: bool) -> Vec<ConfigError> {
        let key_error = |key: String, message: &str| ConfigError::Key { key, message: message.to_owned() };
        let mut errors = Vec::new();
        for (name, ns) in self.namespaces.iter() {
            if let Err(e) = Namespace::new(name) {
                errors.push(key_error(format!("namespaces.{name}"), &e.message));
            }
            if ns.default_ttl.is_some_and(|t| t.0.is_zero()) {
                errors.push(key_error(format!("namespaces.{name}.default_ttl"), "must be longer than zero"));
            }
        }
        errors.extend(self.validate_access(whole));
        let limits = &self.limits;
        for (key, zero) in [
            ("limits.max_body_bytes", limits.max_body_bytes == 0),
            ("limits.max_header_bytes", limits.max_header_bytes == 0),
            ("limits.max_connections", limits.max_connections == 0),
            ("limits.header_read_timeout", limits.header_read_timeout.0.is_zero()),
            ("limits.idle_timeout", limits.idle_timeout.0.is_zero()),
        ] {
            if zero {
                errors.push(key_error(key.into(), "must be greater than zero"));
            }
        }
        if self.sweeper.batch == 0 || self.sweeper.interval.0.is_zero() {
            errors.push(key_error("sweeper".into(), "interval and batch must be greater than zero"));
        }
        if let Some(gateway) = &self.gateway {
            errors.extend(gateway.mistakes(self.listen).into_iter().map(|(key, message)| key_error(key, &message)));
        }
        if let Some(resp) = &self.resp {
            let mut others = vec![("listen", self.listen)];
            others.extend(self.gateway.as_ref().map(|g| ("gateway.listen", g.listen)));
            errors.extend(resp.mistakes(&others).into_iter().map(|(key, message)| key_error(key, &message)));
        }
        for (i, source) in self.sources.iter().enumerate() {
            if let Err((field, message)) = source.validate() {
                errors.push(key_error(format!("sources[{i}].{field}"), message));
            }
            if self.sources[..i].iter().any(|other| other.name == source.name) {
                errors.push(key_error(format!("sources[{i}].name"), "another source has this name"));
            }
        }
        errors
    }

    /// `[auth]`, `[http]` and `[tls]`: tokens that can be presented and are told apart, sources that
    /// exist, certificate files given in pairs.
    fn validate_access(&self, whole: bool) -> Vec<ConfigError> {
        let key_error = |key: String, message: &str| ConfigError::Key { key, message: message.to_owned() };
        let mut errors = Vec::new();
        for (i, token) in self.auth.tokens.iter().enumerate() {
            if let Err(m) = access::check_secret(token.expose()) {
                errors.push(key_error(format!("auth.tokens[{i}]"), m));
            }
        }
        let mut digests: Vec<[u8; 32]> = self.auth.tokens.iter().map(|t| token_digest(t.expose())).collect();
        for (i, token) in self.auth.token.iter().enumerate() {
            let at = |field: &str| format!("auth.token[{i}].{field}");
            if let Err((field, message)) = token.validate() {
                errors.push(key_error(at(field), &message));
                continue;
            }
            if self.auth.token[..i].iter().any(|other| other.name == token.name) {
                errors.push(key_error(at("name"), "another [[auth.token]] has this name"));
            }
            // A source taken out for its own mistakes would show up here as unknown: judged only
            // on the whole file.
            let unknown = token.sources.iter().flatten().find(|s| self.source(s.as_str()).is_none());
            if let Some(source) = unknown.filter(|_| whole) {
                errors
                    .push(key_error(at("sources"), &format!("names {source}, which no [[sources]] table configures")));
            }
            let digest = token.digest().unwrap_or_default();
            if digests.contains(&digest) {
                errors.push(key_error(at("sha256"), "is the same token as another one: each token must differ"));
            }
            digests.push(digest);
        }
        if let Err(m) = self.http.validate() {
            errors.push(key_error("http.allowed_hosts".into(), &m));
        }
        if let Err((field, m)) = self.tls.validate() {
            errors.push(key_error(format!("tls.{field}"), m));
        }
        if let Some(tls) = self.gateway.as_ref().and_then(|g| g.tls.as_ref())
            && tls.watch_interval.0.is_zero()
        {
            errors.push(key_error("gateway.tls.watch_interval".into(), "must be longer than zero"));
        }
        errors
    }

    /// The listeners that take idem's tokens: `listen`, and `[resp] listen` (its clients' `AUTH`).
    fn token_listeners(&self) -> impl Iterator<Item = (&'static str, SocketAddr)> + '_ {
        std::iter::once(("listen", self.listen)).chain(self.resp.as_ref().map(|r| ("[resp] listen", r.listen)))
    }

    /// Refuses a non-loopback `listen` (or `[resp] listen`) with no tokens (anyone who can reach
    /// it could claim and delete keys), unless the operator said `--insecure-no-auth`.
    pub fn check_exposure(&self, insecure_no_auth: bool) -> Result<(), String> {
        if self.auth.is_on() || insecure_no_auth {
            return Ok(());
        }
        let Some((key, addr)) = self.token_listeners().find(|(_, addr)| !addr.ip().is_loopback()) else {
            return Ok(());
        };
        let which = if key == "listen" { String::new() } else { format!(" ({key})") };
        Err(format!(
            "refusing to listen on {addr}{which} with no [auth] tokens: anyone who can reach it could claim and \
             delete keys. Set [auth] tokens in the config file or the environment variable IDEM_AUTH__TOKENS='[\"…\"]' \
             (a list of admin tokens; `idem token new` makes one), listen on a loopback address, or pass \
             --insecure-no-auth"
        ))
    }

    /// Refuses a non-loopback `listen` (or `[resp] listen`) that serves in clear: tokens would
    /// cross the network in clear. `[tls] cert`/`key` or `[tls] terminated_by_proxy = true` (a
    /// proxy in front does TLS) answers it. `idem config check` enforces this; `idem serve` warns.
    pub fn check_transport(&self) -> Result<(), String> {
        if self.tls.listener().is_some() || self.tls.terminated_by_proxy {
            return Ok(());
        }
        let Some((key, addr)) = self.token_listeners().find(|(_, addr)| !addr.ip().is_loopback()) else {
            return Ok(());
        };
        Err(format!(
            "{key} = {addr} is not a loopback address and [tls] has no cert and key: tokens and what they carry \
             would cross the network in clear. Set [tls] cert and key, or [tls] terminated_by_proxy = true when a \
             proxy in front of idem terminates TLS"
        ))
    }

    /// The effective config as TOML, secrets redacted: what `idem config check` prints.
    pub fn to_redacted_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }

    /// The source of that name, if one is configured.
    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name.as_str() == name)
    }

    /// The TTL a claim gets when it does not give one.
    pub fn default_ttl(&self, ns: &str) -> Option<Duration> {
        self.namespaces.get(ns).and_then(|n| n.default_ttl).map(|d| d.0)
    }
}

/// The deserializer's words for types, in the words of someone writing a config file.
fn plain(message: &str) -> String {
    [
        ("expected usize", "expected a whole number ≥ 0"),
        ("expected u64", "expected a whole number ≥ 0"),
        ("expected u32", "expected a whole number ≥ 0"),
        ("expected u16", "expected a whole number ≥ 0"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected a boolean", "expected true or false"),
        ("expected a string", "expected a string in quotes"),
    ]
    .iter()
    .fold(message.to_owned(), |m, (rust, plain)| m.replace(rust, plain))
}

/// The config file's layer: its tree, read past its syntax mistakes ([`syntax`]), and the text as
/// read (where each key's place is looked up).
#[derive(Default)]
struct FileLayer {
    tree: toml::Table,
    text: String,
    /// Its syntax mistakes, each one error.
    mistakes: Vec<ConfigError>,
    /// Keys of the lines left out for a syntax mistake.
    skipped: Vec<String>,
}

/// Reads the file; an error when it cannot be read, or not past a syntax mistake.
fn read_file(path: &Path) -> Result<FileLayer, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    let read = syntax::read(&text);
    let syntax_error = |message| ConfigError::Syntax { path: path.to_owned(), message };
    let mistakes: Vec<ConfigError> = read.mistakes.into_iter().map(syntax_error).collect();
    match read.tree {
        Some(tree) => Ok(FileLayer { tree, text: read.text, mistakes, skipped: read.skipped }),
        None => Err(ConfigError::gather(mistakes).expect("a file that does not read has a syntax mistake")),
    }
}

/// A field missing only because its line was left out for a syntax mistake: already told.
fn left_out(error: &ConfigError, skipped: &[String]) -> bool {
    let ConfigError::Key { message, .. } = error else { return false };
    skipped.iter().any(|key| message.starts_with(&format!("missing field `{key}`")))
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

/// `[store] type = "sqlite"` (or `--store sqlite`), the embedded store's old name: still read,
/// with a word on its new one.
fn old_store_name(tree: &toml::Table) -> Option<String> {
    let kind = tree.get("store")?.get("type")?.as_str()?;
    (kind == "sqlite").then(|| {
        "[store] type = \"sqlite\" is the embedded store's old name (claims live in its log now, events in SQLite); write \"embedded\"".to_owned()
    })
}

#[cfg(test)]
mod tests;
