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
pub mod error;
pub mod extract;
pub mod health;
pub mod import;
pub mod openapi;
pub mod sweeper;
pub mod telemetry;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_core::Store;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use app::{AppState, app};
pub use config::Config;

/// Serves the API on `listener` until `shutdown` resolves, then finishes in-flight requests, stops
/// the background workers and closes the store so that every acknowledged write is on disk.
pub async fn run(
    config: Config,
    store: Arc<dyn Store>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = telemetry::metrics_handle();
    let (stop, stopped) = watch::channel(false);
    let sweeper = tokio::spawn(sweeper::run(Arc::clone(&store), config.sweeper.clone(), stopped.clone()));
    let upkeep = tokio::spawn(metrics_upkeep(handle, stopped));
    let router = app(AppState::new(config, Arc::clone(&store)));
    let served = axum::serve(listener, router).with_graceful_shutdown(shutdown).await;
    let _ = stop.send(true);
    let _ = tokio::join!(sweeper, upkeep);
    store.close().await;
    tracing::info!("idem stopped");
    served
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
