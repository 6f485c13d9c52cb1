//! Connections to PostgreSQL, and what a fault does to them (docs/faults.md's "The rules" and
//! "Fault by fault"; docs/storage.md's "PostgreSQL with failover").
//!
//! - **Connecting** tries the URL's hosts, the one that last accepted writes first, then the others
//!   in the URL's order. Each host gets `connect_timeout` for the whole of it (TCP, startup,
//!   authentication) and must accept writes (`SHOW transaction_read_only` is `off`), so a standby
//!   is passed over as libpq's `target_session_attrs=read-write` does. A host that refuses passes
//!   to the next at once; one that says nothing for half a second keeps its time while the next is
//!   tried beside it, so a dead host that drops packets costs half a second, not
//!   `connect_timeout` per host one after the other. When no host will do, the error says host by
//!   host why.
//! - **A store call** has one deadline, `call_timeout` from when it asks for a connection: waiting
//!   for one, connecting, and running its statements. A connection still being made when its
//!   caller gives up goes on connecting, and joins the pool.
//! - **A fault** (the connection broken, the server shutting down, a read-only server, a call past
//!   its deadline) discards that connection and makes every connection made before it stale: the
//!   pool reuses none of them, so after a failover the next call connects afresh and finds the new
//!   primary. A connection is reused with no round trip to check it (a check per reuse would cost
//!   one per request): PostgreSQL cannot turn a primary into a standby without a restart, which
//!   ends its connections, and a server made read-only under open connections answers the first
//!   write with SQLSTATE 25006, a fault like the others. A statement refused for its own sake (a
//!   deadlock, a serialization failure, a server short of memory) is no fault of its connection:
//!   it goes back to the pool, and the others stay in use.
//! - **The log** tells each kind of fault (its SQLSTATE and the server's message, or what broke)
//!   at most once every 10 seconds, with how many more there were; never the URL's password.
//! - **A transaction pooler met without `[store] pooler = "transaction"`** ([`crate::pooler`])
//!   is not a fault of a connection: from then on every call is refused before it takes one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use deadpool_postgres::ClientWrapper;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use idem_core::StoreError;
use idem_core::throttle::Throttle;
use tokio::sync::mpsc;
use tokio_postgres::config::Host;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Notification};

use crate::pooler::Pooler;
use crate::sql::{Conn, Statements};

pub type Pool = managed::Pool<Manager>;
pub type Object = managed::Object<Manager>;

/// How a store connects and how long it waits. Its `Debug` never shows `direct_url`.
#[derive(Clone)]
pub struct PgOptions {
    /// Connections this node keeps, at most.
    pub pool_size: usize,
    /// How long connecting to one host may take, all of it.
    pub connect_timeout: Duration,
    /// How long one store call may take, from asking for a connection to its answer.
    pub call_timeout: Duration,
    /// What stands between idem and PostgreSQL.
    pub pooler: Pooler,
    /// A URL that reaches PostgreSQL past the pooler: the listening connection and migrations use
    /// it (they need a session of their own).
    pub direct_url: Option<String>,
}

impl Default for PgOptions {
    /// The defaults of `[store] pool_size`, `connect_timeout`, `call_timeout`, `pooler` and
    /// `direct_url`.
    fn default() -> Self {
        Self {
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(5),
            pooler: Pooler::None,
            direct_url: None,
        }
    }
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOptions")
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("pooler", &self.pooler)
            .field("direct_url", &self.direct_url.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// TCP keepalive on every connection: a peer gone silent is noticed within about 20 seconds
/// (10 s idle, then 3 probes 3 s apart) rather than the system's default two hours. It matters
/// where nothing else is waiting: the listening connection, an idle pooled one.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(3);
const KEEPALIVE_RETRIES: u32 = 3;

/// Why no host gave a writable connection: each host tried, and why it was not taken.
#[derive(Debug)]
pub struct ConnectError(Vec<(String, HostRefused)>);

/// Why one host was not taken.
#[derive(Debug, thiserror::Error)]
pub enum HostRefused {
    #[error("{}", describe(.0))]
    Driver(#[from] tokio_postgres::Error),
    /// A standby, or a primary whose sessions default to read-only.
    #[error("read-only (a standby, or default_transaction_read_only is on)")]
    ReadOnly,
    #[error("no answer within connect_timeout ({0:?})")]
    Timeout(Duration),
}

/// Why the pool could not be made.
#[derive(Debug, thiserror::Error)]
pub enum NoPool {
    #[error("the URL names no host")]
    NoHost,
    #[error(transparent)]
    Build(#[from] deadpool::managed::BuildError),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_slice() {
            [] => f.write_str("the URL names no host"),
            [(host, why)] => write!(f, "{host}: {why}"),
            all => {
                f.write_str("no host accepts writes: ")?;
                for (i, (host, why)) in all.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{host}: {why}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ConnectError {}

/// A driver error in words: the SQLSTATE and the server's message for an error the server sent,
/// else every cause of it (`error connecting to server: Connection refused`).
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("SQLSTATE {} ({}): {}", db.code().code(), db.severity(), db.message()),
        None => idem_core::error::chain(e),
    }
}

/// One config per host of `url`, each with the URL's other settings and idem's time limits.
pub fn per_host(config: &Config, connect_timeout: Duration) -> Vec<(String, Config)> {
    let hosts = config.get_hosts();
    let ports = config.get_ports();
    let addrs = config.get_hostaddrs();
    hosts
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = match ports {
                [] => 5432,
                [one] => *one,
                many => many.get(i).copied().unwrap_or(5432),
            };
            let mut one = Config::new();
            if let Some(user) = config.get_user() {
                one.user(user);
            }
            if let Some(password) = config.get_password() {
                one.password(password);
            }
            if let Some(dbname) = config.get_dbname() {
                one.dbname(dbname);
            }
            if let Some(options) = config.get_options() {
                one.options(options);
            }
            one.application_name(config.get_application_name().unwrap_or("idem"));
            one.ssl_mode(config.get_ssl_mode()).channel_binding(config.get_channel_binding());
            let name = match host {
                Host::Tcp(name) => {
                    one.host(name);
                    format!("{name}:{port}")
                }
                Host::Unix(path) => {
                    one.host_path(path);
                    format!("{}:{port}", path.display())
                }
            };
            if let Some(addr) = addrs.get(i) {
                one.hostaddr(*addr);
            }
            one.port(port)
                .connect_timeout(connect_timeout)
                .keepalives(true)
                .keepalives_idle(KEEPALIVE_IDLE)
                .keepalives_interval(KEEPALIVE_INTERVAL)
                .keepalives_retries(KEEPALIVE_RETRIES)
                .tcp_user_timeout(KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_RETRIES);
            (name, one)
        })
        .collect()
}

/// A writable connection: its client, its notifications, and the task that drives it.
pub struct Connected {
    pub client: Client,
    pub notifications: mpsc::UnboundedReceiver<Notification>,
    pub driver: tokio::task::JoinHandle<()>,
}

/// How long a connection waits on one host before it tries the next one as well: a dead host that
/// drops packets costs this, not `connect_timeout`.
const NEXT_HOST_AFTER: Duration = Duration::from_millis(500);

/// Which of the URL's hosts last accepted writes: the next connection tries it first.
#[derive(Debug, Default)]
pub struct Preferred(AtomicUsize);

/// Connects to the first of `hosts` (in the URL's order) that answers within `timeout` and
/// accepts writes.
pub async fn connect_writable(hosts: &[(String, Config)], timeout: Duration) -> Result<Connected, ConnectError> {
    connect_preferring(hosts, timeout, &Preferred::default()).await
}

/// Connects to a host of `hosts` that answers within `timeout` and accepts writes: the
/// `preferred` one first, then the others in the URL's order. A host that refuses (a standby, a
/// closed port) passes to the next at once; one that says nothing for [`NEXT_HOST_AFTER`] keeps
/// its `timeout` while the next is tried beside it, so hosts are not waited out one after the
/// other. The first writable connection wins; the others are dropped.
pub async fn connect_preferring(
    hosts: &[(String, Config)],
    timeout: Duration,
    preferred: &Preferred,
) -> Result<Connected, ConnectError> {
    let start = preferred.0.load(Ordering::Relaxed) % hosts.len().max(1);
    let mut order = (0..hosts.len()).map(|i| (start + i) % hosts.len());
    let attempt = |i: usize| async move { (i, tokio::time::timeout(timeout, connect_one(&hosts[i].1)).await) };
    let mut pending = FuturesUnordered::new();
    pending.extend(order.next().map(attempt));
    let mut failures = Vec::new();
    while !pending.is_empty() {
        let more = order.len() > 0;
        tokio::select! {
            Some((i, outcome)) = pending.next() => {
                match outcome {
                    Ok(Ok(connected)) => {
                        preferred.0.store(i, Ordering::Relaxed);
                        return Ok(connected);
                    }
                    Ok(Err(why)) => failures.push((hosts[i].0.clone(), why)),
                    Err(_) => failures.push((hosts[i].0.clone(), HostRefused::Timeout(timeout))),
                }
                if pending.is_empty() {
                    pending.extend(order.next().map(attempt));
                }
            }
            () = tokio::time::sleep(NEXT_HOST_AFTER), if more => pending.extend(order.next().map(attempt)),
        }
    }
    Err(ConnectError(failures))
}

async fn connect_one(config: &Config) -> Result<Connected, HostRefused> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (tx, notifications) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => drop(tx.send(n)),
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    let read_only = client
        .simple_query("SHOW transaction_read_only")
        .await?
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(|v| v == "on"),
            _ => None,
        })
        .unwrap_or(false);
    if read_only {
        driver.abort();
        return Err(HostRefused::ReadOnly);
    }
    Ok(Connected { client, notifications, driver })
}

/// What the pool knows of faults: since when its connections are stale, and what it has logged.
#[derive(Debug)]
pub struct Health {
    stale_before: Mutex<Option<std::time::Instant>>,
    log: Throttle,
}

impl Default for Health {
    fn default() -> Self {
        Self { stale_before: Mutex::new(None), log: Throttle::new(Duration::from_secs(10)) }
    }
}

impl Health {
    /// A fault was seen: no connection made before now is reused.
    pub fn fault(&self, what: &str) {
        *self.stale_before.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
        self.tell(what);
    }

    /// Logs `what` unless its kind (the text before its first `:`) was told in the last 10 s.
    pub fn tell(&self, what: &str) {
        let kind = what.split(':').next().unwrap_or(what);
        if let Some(skipped) = self.log.admit(kind, std::time::Instant::now()) {
            tracing::warn!(error = what, more_like_it = skipped, "PostgreSQL fault; the connection is discarded");
        }
    }

    /// Logs a statement the server refused, its connection kept, as [`Health::tell`] does.
    pub fn refused(&self, what: &str) {
        let kind = what.split(':').next().unwrap_or(what);
        if let Some(skipped) = self.log.admit(kind, std::time::Instant::now()) {
            tracing::warn!(
                error = what,
                more_like_it = skipped,
                "PostgreSQL refused a statement; the connection is kept"
            );
        }
    }

    fn is_stale(&self, created: std::time::Instant) -> bool {
        self.stale_before.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|before| created < before)
    }
}

/// deadpool's manager: makes writable connections that send statements as the store does, and
/// reuses only those made since the last fault that are still open.
pub struct Manager {
    hosts: Vec<(String, Config)>,
    connect_timeout: Duration,
    health: Arc<Health>,
    statements: Statements,
    /// The host that last accepted writes.
    preferred: Preferred,
}

impl managed::Manager for Manager {
    type Type = Conn;
    type Error = ConnectError;

    async fn create(&self) -> Result<Conn, ConnectError> {
        let connected = connect_preferring(&self.hosts, self.connect_timeout, &self.preferred).await?;
        Ok(Conn::new(ClientWrapper::new(connected.client, connected.driver), self.statements))
    }

    async fn recycle(&self, client: &mut Conn, metrics: &Metrics) -> RecycleResult<ConnectError> {
        if client.at_fault() {
            return Err(RecycleError::message("the connection is closed, or met a fault"));
        }
        if self.health.is_stale(metrics.created) {
            return Err(RecycleError::message("the connection was made before a fault"));
        }
        Ok(())
    }
}

/// The pool, its health, and the time limits of each call.
pub struct Db {
    pub pool: Pool,
    pub health: Arc<Health>,
    pub call_timeout: Duration,
    /// Set when a transaction pooler was met without the setting: every call is refused so.
    refused: std::sync::OnceLock<StoreError>,
}

impl Db {
    pub fn new(config: &Config, options: &PgOptions) -> Result<Self, NoPool> {
        let health = Arc::new(Health::default());
        let hosts = per_host(config, options.connect_timeout);
        if hosts.is_empty() {
            return Err(NoPool::NoHost);
        }
        // A connection may try every host; past that (and a second to spare) creating one has failed.
        let create = options.connect_timeout * hosts.len() as u32 + Duration::from_secs(1);
        let statements = options.pooler.statements();
        let manager = Manager {
            hosts,
            connect_timeout: options.connect_timeout,
            health: Arc::clone(&health),
            statements,
            preferred: Preferred::default(),
        };
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(deadpool::Runtime::Tokio1)
            .wait_timeout(Some(options.call_timeout))
            .create_timeout(Some(create))
            .recycle_timeout(Some(options.call_timeout))
            .build()?;
        Ok(Self { pool, health, call_timeout: options.call_timeout, refused: std::sync::OnceLock::new() })
    }

    /// From now on every call answers `error` ([`crate::pooler`]), before it takes a connection.
    pub fn refuse(&self, error: StoreError) {
        let _ = self.refused.set(error);
    }

    /// When a call starting now must have its answer.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.call_timeout
    }

    /// A connection by `deadline`. One still being made when the deadline passes goes on, in a
    /// task of its own, and joins the pool.
    pub async fn conn(&self, deadline: tokio::time::Instant) -> Result<Object, StoreError> {
        if let Some(refused) = self.refused.get() {
            return Err(refused.clone());
        }
        let pool = self.pool.clone();
        let getting = tokio::spawn(async move { pool.get().await });
        match tokio::time::timeout_at(deadline, getting).await {
            Ok(Ok(Ok(client))) => Ok(client),
            Ok(Ok(Err(managed::PoolError::Closed))) => Err(StoreError::Closed),
            Ok(Ok(Err(managed::PoolError::Backend(e)))) => {
                let what = format!("cannot connect: {e}");
                self.health.tell(&what);
                Err(StoreError::Unavailable(what))
            }
            Ok(Ok(Err(e))) => Err(StoreError::Unavailable(format!("no PostgreSQL connection: {e}"))),
            Ok(Err(e)) => Err(StoreError::Unavailable(format!("no PostgreSQL connection: {e}"))),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no PostgreSQL connection within call_timeout ({:?})",
                self.call_timeout
            ))),
        }
    }

    /// What a call on `client` ended with, given `answer` (`None`: its deadline passed). A fault
    /// discards the connection and makes every older one stale; anything else gives it back to
    /// the pool. A write past its deadline may have been applied: its outcome is unknown.
    pub fn settle<T>(
        &self,
        client: Object,
        answer: Option<Result<T, StoreError>>,
        write: bool,
    ) -> Result<T, StoreError> {
        let answered = answer.is_some();
        let error = match answer {
            Some(Ok(value)) => return Ok(value),
            Some(Err(e @ (StoreError::Internal(_) | StoreError::Closed))) => return Err(e),
            // A transaction pooler: the connection is not at fault (no other is made stale), but
            // its named statements may be another client's, so it goes.
            Some(Err(e @ StoreError::Misconfigured(_))) => {
                drop(Object::take(client));
                self.refuse(e.clone());
                return Err(e);
            }
            Some(Err(e)) => e,
            None => {
                let what = format!("no answer within call_timeout ({:?})", self.call_timeout);
                if write { StoreError::OutcomeUnknown(what) } else { StoreError::Unavailable(what) }
            }
        };
        let what = match &error {
            StoreError::Unavailable(what) | StoreError::OutcomeUnknown(what) => what.clone(),
            other => other.to_string(),
        };
        // Answered, but refused (a deadlock, a serialization failure, a server short of memory):
        // the connection is as good as it was, and so are the others.
        if answered && !client.at_fault() {
            self.health.refused(&what);
            return Err(error);
        }
        drop(Object::take(client));
        self.health.fault(&what);
        Err(error)
    }
}

/// Runs `$body` with `$client` bound to a connection, within one call's deadline, and settles the
/// connection as [`Db::settle`] does; `$write`: whether the call changes anything (then an answer
/// past the deadline is an unknown outcome).
macro_rules! with_conn {
    ($db:expr, $write:expr, |$client:ident| $body:expr) => {{
        let db: &$crate::pool::Db = &$db;
        let deadline = db.deadline();
        #[allow(unused_mut)]
        let mut $client = db.conn(deadline).await?;
        let answer = tokio::time::timeout_at(deadline, async { $body }).await.ok();
        db.settle($client, answer, $write)
    }};
}
pub(crate) use with_conn;
