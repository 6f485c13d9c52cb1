//! The idem server: HTTP API, background workers, configuration and the command line.
//!
//! [`run`] is the one way a server starts: the binary and every test call it with a config, a
//! store, a bound listener and a shutdown future.

pub mod app;
pub mod auth;
pub mod claim;
pub mod cli;
pub mod client;
pub mod config;
pub mod delivery;
pub mod error;
pub mod event;
pub mod extract;
pub mod gateway;
pub mod health;
pub mod import;
pub mod openapi;
pub mod sweeper;
pub mod telemetry;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Clock, Store, StoreSignal};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use app::{AppState, app};
pub use config::Config;

/// The sockets a server answers on, bound by the caller (so tests can bind port 0 first).
pub struct Listeners {
    /// The `/v1` API, health, metrics.
    pub api: TcpListener,
    /// The gateway proxy, when `[gateway]` is configured.
    pub gateway: Option<TcpListener>,
}

impl Listeners {
    /// Binds the addresses the config names.
    pub async fn bind(config: &Config) -> std::io::Result<Self> {
        let api = TcpListener::bind(config.listen).await?;
        let gateway = match &config.gateway {
            Some(g) => Some(TcpListener::bind(g.listen).await?),
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
    let (stop, stopped) = watch::channel(false);
    let sweeper = tokio::spawn(sweeper::run(Arc::clone(&store), config.sweeper.clone(), stopped.clone()));
    let upkeep = tokio::spawn(metrics_upkeep(handle, stopped.clone()));
    let wake = Arc::new(tokio::sync::Notify::new());
    let mut engine = None;
    let gateway = match (&config.gateway, listeners.gateway) {
        (Some(gateway), Some(listener)) => {
            let proxy =
                gateway::Proxy::new(gateway, config.limits.max_body_bytes, Arc::clone(&store), Arc::clone(&clock))
                    .map_err(std::io::Error::other)?;
            engine = Some(proxy.engine());
            let stopped = stopped.clone();
            Some(tokio::spawn(
                axum::serve(listener, proxy.router()).with_graceful_shutdown(until_stopped(stopped)).into_future(),
            ))
        }
        _ => None,
    };
    // Changes other nodes make (a shared database) wake what waits here: no polling needed.
    let signal_wake = Arc::clone(&wake);
    store.on_signal(Box::new(move |signal| match signal {
        StoreSignal::JobsQueued => signal_wake.notify_one(),
        StoreSignal::RequestDone(id) => {
            if let Some(engine) = &engine {
                engine.wake(&id);
            }
        }
    }));
    let delivery = if config.sources.is_empty() {
        None
    } else {
        let delivery =
            delivery::Delivery::new(&config.sources, Arc::clone(&store), Arc::clone(&clock), Arc::clone(&wake))
                .map_err(std::io::Error::other)?;
        Some(tokio::spawn(Arc::new(delivery).run(stopped.clone())))
    };
    let router = app(AppState::new(config, Arc::clone(&store), wake));
    let api = axum::serve(listeners.api, router).with_graceful_shutdown(until_stopped(stopped));
    let trigger = tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let served = api.await;
    trigger.abort();
    if let Some(gateway) = gateway {
        let _ = gateway.await;
    }
    if let Some(delivery) = delivery {
        let _ = delivery.await;
    }
    let _ = tokio::join!(sweeper, upkeep);
    store.close().await;
    tracing::info!("idem stopped");
    served
}

async fn until_stopped(mut stopped: watch::Receiver<bool>) {
    while !*stopped.borrow() {
        if stopped.changed().await.is_err() {
            return;
        }
    }
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
