//! The idem server: HTTP API, dashboard, gateway proxy, background workers, configuration and
//! the command line (docs/architecture.md has the map).
//!
//! - [`router`]: the main listener's one router, [`api`] (the `/v1` route table, health, metrics,
//!   OpenAPI) beside [`ui`] (the dashboard), both on [`web`] (state, auth, problem+json,
//!   extractors) and [`actions`] (what both do to receipts);
//! - [`proxy`]: the `Idempotency-Key` reverse proxy on its own listener;
//! - [`worker`]: event delivery, the sweeper and the gauges sampled outside requests;
//! - [`config`]: the typed config, parsed once;
//! - [`embedded`]: the embedded store's data dir (open, upgrade, check, repair, backup);
//! - [`conn`] and [`tls`]: serving connections (limits, TLS handshakes) and the certificates, the
//!   listeners' (swapped on SIGHUP and when their files change) and the roots outbound `https://`
//!   is verified against; [`jwks`]: fetching `[gateway.jwt] jwks_url`; [`identity`]: asking
//!   `[gateway.identity]` who is calling;
//! - [`telemetry`]: logs, and the Prometheus recorder built from the `idem_metrics` catalogue;
//! - [`starting`]: what the API answers while the store cannot be reached yet at start-up;
//! - [`cli`]: the `idem` command line (`serve`, `health`, client verbs, `import`, `token new`).
//! - [`resp`]: the Redis protocol on its own listener (`[resp]`, #41);
//!
//! Dependencies run one way: `cli` → `run` → `router` → `api` / `ui` → `actions` → `web` →
//! `config`. [`run`] is the one way a server starts: the binary and every test call it with a
//! config, a store, a bound listener and a shutdown future.

pub mod actions;
pub mod api;
pub mod cli;
pub mod config;
pub mod conn;
pub mod embedded;
pub mod identity;
pub mod jwks;
pub mod proxy;
pub mod resp;
pub mod router;
pub mod starting;
pub mod telemetry;
pub mod tls;
pub mod ui;
pub mod web;
pub mod worker;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Clock, EventStore, StoreLifecycle, StoreSignal, Stores};
use idem_gateway::waiters::Waiters;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

pub use config::Config;
pub use router::app;
pub use web::AppState;

/// The sockets a server answers on, bound by the caller (so tests can bind port 0 first).
pub struct Listeners {
    /// The `/v1` API, health, metrics.
    pub api: TcpListener,
    /// The gateway proxy, when `[gateway]` is configured.
    pub gateway: Option<TcpListener>,
    /// The Redis protocol, when `[resp]` is configured.
    pub resp: Option<TcpListener>,
}

impl Listeners {
    /// Binds the addresses the config names; an error names the address ("cannot listen on
    /// 127.0.0.1:7070: address already in use").
    pub async fn bind(config: &Config) -> std::io::Result<Self> {
        let bind = |addr: std::net::SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))
        };
        let api = bind(config.listen).await?;
        let gateway = match &config.gateway {
            Some(g) => Some(bind(g.listen).await?),
            None => None,
        };
        let resp = match &config.resp {
            Some(r) => Some(bind(r.listen).await?),
            None => None,
        };
        Ok(Self { api, gateway, resp })
    }
}

/// Serves until `shutdown` resolves, then finishes in-flight requests, stops the background
/// workers and closes the store so that every acknowledged write is on disk.
pub async fn run(
    config: Config,
    stores: Stores,
    clock: Arc<dyn Clock>,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // The recorder first, so that what is registered next is kept.
    telemetry::metrics_handle();
    telemetry::register_configured(&config);
    let limits = conn::ConnLimits {
        max_connections: conn::fit_connections(config.limits.max_connections),
        header_read_timeout: config.limits.header_read_timeout.0,
        idle_timeout: config.limits.idle_timeout.0,
    };
    let mut tls = Tls::load(&config)?;
    let (stop, stopped) = watch::channel(false);
    let hangup = tls::Hangup::listen();
    let housekeeping = housekeeping(&config, &stores, &clock, &stopped);
    let wake = Arc::new(Notify::new());
    let describe = Listening::of(&config);
    let gateway_addr = listeners.gateway.as_ref().and_then(|l| l.local_addr().ok());
    let started = start_gateway(&config, &stores, &clock, &mut tls, listeners.gateway, limits, &stopped);
    let (engine, gateway) = started.unzip();
    let waiters = Arc::new(Waiters::default());
    forward_signals(stores.lifecycle.as_ref(), Arc::clone(&wake), engine, Arc::clone(&waiters));
    let delivery = start_delivery(&config, &stores.events, &clock, &wake, &stopped, &tls.client);
    let lifecycle = Arc::clone(&stores.lifecycle);
    let state = AppState::new(config, stores, clock, wake, waiters);
    let read_tokens = {
        let state = state.clone();
        move || read_tokens_again(&state)
    };
    let reloads = tokio::spawn(tls::watch(tls.certificates, hangup, read_tokens, stopped.clone()));
    let resp_addr = listeners.resp.as_ref().and_then(|l| l.local_addr().ok());
    let resp = start_resp(&state, listeners.resp, tls.api.clone(), limits.max_connections, &stopped);
    let router = app(state);
    let api_addr = listeners.api.local_addr()?;
    let api = conn::serve_tls(listeners.api, router, limits, tls.api, stopped);
    let trigger = tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    log_listening(&describe, api_addr, gateway_addr);
    if let Some(addr) = resp_addr {
        tracing::info!(addr = %addr, tls = describe.tls, "idem Redis protocol listening");
    }
    api.await;
    trigger.abort();
    // The API has drained: the rest stops, then the store closes with every write on disk.
    for task in [gateway, delivery, resp].into_iter().flatten().chain([housekeeping, reloads]) {
        let _ = task.await;
    }
    lifecycle.close().await;
    tracing::info!("idem stopped");
    Ok(())
}

/// The gateway's proxy, when `[gateway]` is configured, serving `listener` until `stopped`: its
/// engine (which store signals wake) and its task. The gateway's TLS acceptor is taken from `tls`.
fn start_gateway(
    config: &Config,
    stores: &Stores,
    clock: &Arc<dyn Clock>,
    tls: &mut Tls,
    listener: Option<TcpListener>,
    limits: conn::ConnLimits,
    stopped: &watch::Receiver<bool>,
) -> Option<(Arc<idem_gateway::Engine>, JoinHandle<()>)> {
    let (Some(gateway), Some(listener)) = (&config.gateway, listener) else { return None };
    let requests = Arc::clone(&stores.requests);
    let jwt = tls.jwt.clone();
    let proxy = proxy::Proxy::new(gateway, config.limits.max_body_bytes, requests, Arc::clone(clock), &tls.client, jwt);
    let engine = proxy.engine();
    Some((engine, tokio::spawn(proxy.serve(listener, limits, tls.gateway.take(), stopped.clone()))))
}

/// The Redis protocol's listener, when `[resp]` is configured, serving until `stopped` with the API
/// listener's TLS.
fn start_resp(
    state: &AppState,
    listener: Option<TcpListener>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    max_connections: usize,
    stopped: &watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    let (Some(config), Some(listener)) = (&state.config.resp, listener) else { return None };
    let shared = resp::Resp::new(
        Arc::clone(&state.stores.claims),
        Arc::clone(&state.tokens),
        config.namespace.clone(),
        Arc::clone(&state.clock),
        state.max_body_bytes,
    );
    Some(tokio::spawn(resp::serve(listener, Arc::new(shared), tls, max_connections, stopped.clone())))
}

/// An `https://` handler, result webhook or upstream with nothing to verify it against fails every
/// time: say so at start-up rather than at the first delivery.
fn warn_without_roots(config: &Config) {
    let https = |uri: &http::Uri| uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let sources = config
        .sources
        .iter()
        .flat_map(|s| std::iter::once(s.handler_url.uri()).chain(s.result_webhook_url.as_ref().map(|u| u.uri())));
    let any = sources.into_iter().any(https)
        || config.gateway.as_ref().is_some_and(|g| g.upstream.scheme == http::uri::Scheme::HTTPS);
    if any && config.tls.ca_file.is_none() && !tls::has_system_roots() {
        tracing::warn!(
            "https:// URLs are configured but no system root certificates were found (Debian: ca-certificates) \
             and [tls] ca_file is not set: they cannot be verified and every request to them will fail"
        );
    }
}

/// What the "listening" log lines say, taken from the config before `run` hands it over.
struct Listening {
    tls: bool,
    store: String,
    gateway: Option<(String, bool)>,
}

impl Listening {
    fn of(config: &Config) -> Self {
        let store = match &config.store {
            config::StoreConfig::Embedded {} => format!("embedded in {}", config.data_dir.display()),
            config::StoreConfig::Postgres { .. } => "postgres".to_owned(),
        };
        let gateway = config.gateway.as_ref().map(|g| (g.upstream.to_string(), g.tls.is_some()));
        Self { tls: config.tls.listener().is_some(), store, gateway }
    }
}

/// On SIGHUP: the config loaded again from the same file, variables and flags, and its `[auth]`
/// tokens taken in place of the running ones (docs/security.md#rotating-tokens). A config with
/// mistakes, or one that would switch between no tokens and tokens required, changes nothing and
/// says why. Nothing else is read again: every other setting takes effect at a restart.
fn read_tokens_again(state: &AppState) {
    let Some(loaded) = state.config.reload() else { return };
    let config = match loaded {
        Ok(config) => config,
        Err(e) => {
            tracing::error!("SIGHUP: the config was not read again, the tokens stay as they were: {e}");
            return;
        }
    };
    match state.tokens.replace(&config.auth) {
        Ok(count) => tracing::info!(
            tokens = count,
            "SIGHUP: [auth] tokens read again; every other setting takes effect at a restart"
        ),
        Err(why) => tracing::error!("SIGHUP: the tokens stay as they were: {why}"),
    }
}

/// Logged once everything is in place (SIGHUP is listened for, the listeners are bound), so that
/// whoever waits for "idem listening" may use idem at once.
fn log_listening(l: &Listening, api: std::net::SocketAddr, gateway: Option<std::net::SocketAddr>) {
    if let (Some((upstream, tls)), Some(addr)) = (&l.gateway, gateway) {
        tracing::info!(addr = %addr, upstream, tls, "idem gateway listening");
    }
    let scheme = if l.tls { "https" } else { "http" };
    tracing::info!(addr = %api, scheme, store = l.store, "idem listening");
}

/// The TLS a server runs with: its listeners' acceptors (none without `[tls]`), the certificates to
/// watch for renewal, and the outbound client's roots; and the gateway's JWT verifier, whose key
/// file is read at start-up as the certificates are (and whose JWKS is fetched over that client).
struct Tls {
    api: Option<tokio_rustls::TlsAcceptor>,
    gateway: Option<tokio_rustls::TlsAcceptor>,
    certificates: Vec<Arc<tls::Certificate>>,
    client: Arc<rustls::ClientConfig>,
    /// `[gateway.jwt]`'s verifier: its key file read, its JWKS client built on `client`.
    jwt: Option<Arc<idem_gateway::JwtVerifier>>,
}

impl Tls {
    fn load(config: &Config) -> std::io::Result<Self> {
        let certs = tls::ListenerCerts::load(config).map_err(std::io::Error::other)?;
        warn_without_roots(config);
        let client = tls::client_config(config.tls.ca_file.as_deref())
            .map_err(|e| std::io::Error::other(format!("tls.ca_file: {e}")))?;
        let acceptor = |cert: &Option<Arc<tls::Certificate>>| cert.as_ref().map(|c| c.acceptor()).transpose();
        let api = acceptor(&certs.api).map_err(std::io::Error::other)?;
        let gateway = acceptor(&certs.gateway).map_err(std::io::Error::other)?;
        let certificates = [certs.api, certs.gateway].into_iter().flatten().collect();
        let jwt = config.gateway.as_ref().and_then(|g| g.jwt.as_ref());
        let jwt = jwt.map(|j| jwks::verifier(j, &client).map(Arc::new)).transpose().map_err(std::io::Error::other)?;
        Ok(Self { api, gateway, certificates, client, jwt })
    }
}

/// The sweeper, the metrics' upkeep and the gauges, until `stopped`.
fn housekeeping(
    config: &Config,
    stores: &Stores,
    clock: &Arc<dyn Clock>,
    stopped: &watch::Receiver<bool>,
) -> JoinHandle<()> {
    let retention = config.events.retention.map(|r| r.0);
    let sweeper =
        worker::sweeper::run(stores.clone(), Arc::clone(clock), config.sweeper.clone(), retention, stopped.clone());
    let upkeep = metrics_upkeep(telemetry::metrics_handle(), stopped.clone());
    let data_dir = matches!(config.store, config::StoreConfig::Embedded {}).then(|| config.data_dir.clone());
    let gauges = worker::gauges::run(stores.clone(), data_dir, Arc::clone(clock), stopped.clone());
    tokio::spawn(async move {
        tokio::join!(sweeper, upkeep, gauges);
    })
}

/// Changes other nodes make (a shared database) wake what waits here: no polling needed.
fn forward_signals(
    store: &dyn StoreLifecycle,
    wake: Arc<Notify>,
    engine: Option<Arc<idem_gateway::Engine>>,
    operations: Arc<Waiters>,
) {
    store.on_signal(Box::new(move |signal| match signal {
        StoreSignal::JobsQueued => wake.notify_one(),
        StoreSignal::RequestDone(id) => {
            if let Some(engine) = &engine {
                engine.wake(&id);
            }
            operations.wake(&id);
        }
    }));
}

/// The delivery worker, when any source is configured.
fn start_delivery(
    config: &Config,
    events: &Arc<dyn EventStore>,
    clock: &Arc<dyn Clock>,
    wake: &Arc<Notify>,
    stopped: &watch::Receiver<bool>,
    tls: &Arc<rustls::ClientConfig>,
) -> Option<JoinHandle<()>> {
    if config.sources.is_empty() {
        return None;
    }
    let delivery =
        worker::delivery::Delivery::new(&config.sources, Arc::clone(events), Arc::clone(clock), Arc::clone(wake), tls);
    Some(tokio::spawn(Arc::new(delivery).run(stopped.clone())))
}

/// Histograms kept by the recorder must be drained now and then when nothing scrapes them.
async fn metrics_upkeep(
    handle: &'static metrics_exporter_prometheus::PrometheusHandle,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => handle.run_upkeep(),
            _ = stop.changed() => return,
        }
    }
}
