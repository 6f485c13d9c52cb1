//! The idem server: HTTP API, background workers, configuration and the command line.
//!
//! - [`api`]: the `/v1` API, health, metrics and OpenAPI on the main listener;
//! - [`proxy`]: the `Idempotency-Key` reverse proxy on its own listener;
//! - [`worker`]: event delivery and the sweeper;
//! - [`config`]: the typed config, parsed once;
//! - [`cli`]: the `idem` command line (`serve`, client verbs, `import`).
//!
//! Dependencies run one way: `cli` → `run` → `api` / `proxy` / `worker` → `config`.
//! [`run`] is the one way a server starts: the binary and every test call it with a config, a
//! store, a bound listener and a shutdown future.

pub mod api;
pub mod cli;
pub mod config;
pub mod conn;
pub mod embedded;
pub mod proxy;
pub mod telemetry;
pub mod ui;
pub mod worker;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Clock, EventStore, RequestStore, Store, StoreSignal};
use idem_gateway::waiters::Waiters;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

pub use api::{AppState, app};
pub use config::Config;

/// The sockets a server answers on, bound by the caller (so tests can bind port 0 first).
pub struct Listeners {
    /// The `/v1` API, health, metrics.
    pub api: TcpListener,
    /// The gateway proxy, when `[gateway]` is configured.
    pub gateway: Option<TcpListener>,
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
        Ok(Self { api, gateway })
    }
}

/// Serves until `shutdown` resolves, then finishes in-flight requests, stops the background
/// workers and closes the store so that every acknowledged write is on disk.
pub async fn run(
    config: Config,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = telemetry::metrics_handle();
    telemetry::register_configured(&config);
    let limits = conn::ConnLimits {
        max_connections: conn::fit_connections(config.limits.max_connections),
        header_read_timeout: config.limits.header_read_timeout.0,
        idle_timeout: config.limits.idle_timeout.0,
    };
    let (stop, stopped) = watch::channel(false);
    let sweeper = tokio::spawn(worker::sweeper::run(
        Arc::clone(&store),
        config.sweeper.clone(),
        config.events.retention.map(|r| r.0),
        stopped.clone(),
    ));
    let upkeep = tokio::spawn(metrics_upkeep(handle, stopped.clone()));
    let data_dir = matches!(config.store, config::StoreConfig::Sqlite {}).then(|| config.data_dir.clone());
    let gauges = tokio::spawn(worker::gauges::run(Arc::clone(&store), data_dir, stopped.clone()));
    let wake = Arc::new(Notify::new());
    let (engine, gateway) = match (&config.gateway, listeners.gateway) {
        (Some(gateway), Some(listener)) => {
            let requests: Arc<dyn RequestStore> = store.clone();
            let proxy = proxy::Proxy::new(gateway, config.limits.max_body_bytes, requests, Arc::clone(&clock));
            let engine = proxy.engine();
            (Some(engine), Some(tokio::spawn(proxy.serve(listener, limits, stopped.clone()))))
        }
        _ => (None, None),
    };
    let waiters = Arc::new(Waiters::default());
    forward_signals(store.as_ref(), Arc::clone(&wake), engine, Arc::clone(&waiters));
    let delivery = start_delivery(&config, &store, &clock, &wake, &stopped);
    let router = app(AppState::new(config, Arc::clone(&store), clock, wake, waiters));
    let api = conn::serve(listeners.api, router, limits, stopped);
    let trigger = tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    api.await;
    trigger.abort();
    if let Some(gateway) = gateway {
        let _ = gateway.await;
    }
    if let Some(delivery) = delivery {
        let _ = delivery.await;
    }
    let _ = tokio::join!(sweeper, upkeep, gauges);
    store.close().await;
    tracing::info!("idem stopped");
    Ok(())
}

/// Changes other nodes make (a shared database) wake what waits here: no polling needed.
fn forward_signals(
    store: &dyn Store,
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
    store: &Arc<dyn Store>,
    clock: &Arc<dyn Clock>,
    wake: &Arc<Notify>,
    stopped: &watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    if config.sources.is_empty() {
        return None;
    }
    let events: Arc<dyn EventStore> = store.clone();
    let delivery = worker::delivery::Delivery::new(&config.sources, events, Arc::clone(clock), Arc::clone(wake));
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
