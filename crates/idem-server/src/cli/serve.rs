//! `idem serve`: load the config, choose the store once, bind, and run until SIGINT or SIGTERM.

use std::sync::Arc;

use idem_core::{Clock, SteadyClock, Stores, SystemTicks};

use super::client::Failure;
use super::{ConfigArgs, ServeArgs};
use crate::Listeners;
use crate::config::{Config, Overrides, StoreConfig};
use crate::starting::Attempt;

pub fn load_config(args: &ConfigArgs) -> Result<Config, Failure> {
    let overrides = Overrides {
        listen: args.listen.clone(),
        data_dir: args.data_dir.clone(),
        store: args.store.clone(),
        database_url: args.database_url.clone(),
    };
    Config::load(args.config.as_deref(), std::env::vars(), &overrides).map_err(|e| Failure::usage(e.to_string()))
}

/// Chooses the backend, once, for the whole process; answers it with the clock it keeps time by
/// (for the embedded store the system's, steadied: it does not jump when the wall clock is stepped;
/// for PostgreSQL the database's, followed on the monotonic clock), which the rest of the server
/// must share.
pub async fn open_store(config: &Config) -> Result<(Stores, Arc<dyn Clock>), Failure> {
    try_open_store(config).await.map_err(|attempt| match attempt {
        Attempt::Retry(why) => Failure::runtime(why),
        Attempt::Fail(failure) => failure,
    })
}

/// As [`open_store`], once; a database that cannot be reached is worth trying again.
async fn try_open_store(config: &Config) -> Result<(Stores, Arc<dyn Clock>), Attempt<Failure>> {
    match &config.store {
        StoreConfig::Embedded {} => {
            let clock: Arc<dyn Clock> = Arc::new(SteadyClock::system());
            let stores = crate::embedded::open(&config.data_dir, Arc::clone(&clock))
                .await
                .map_err(|e| Attempt::Fail(Failure::runtime(e.to_string())))?;
            Ok((stores, clock))
        }
        StoreConfig::Postgres { url, pool_size, connect_timeout, call_timeout, pooler, direct_url } => {
            let time = idem_postgres::TimeSource::Database { ticks: Arc::new(SystemTicks::default()) };
            let options = idem_postgres::PgOptions {
                pool_size: *pool_size,
                connect_timeout: connect_timeout.0,
                call_timeout: call_timeout.0,
                pooler: pooler.for_store(),
                direct_url: direct_url.as_ref().map(|url| url.expose().to_owned()),
            };
            let store = idem_postgres::PgStore::connect(url.expose(), &options, time).await.map_err(|e| match e {
                idem_postgres::OpenError::Connect(_) => Attempt::Retry(e.to_string()),
                idem_postgres::OpenError::Url(_) => Attempt::Fail(Failure::runtime(e.to_string())),
            })?;
            let clock = store.clock();
            Ok((Stores::of(Arc::new(store)), clock))
        }
    }
}

/// `idem check`, `idem repair` and `idem backup` work on the embedded store's files only.
fn embedded_only(config: &Config, verb: &str) -> Result<(), Failure> {
    match config.store {
        StoreConfig::Embedded {} => Ok(()),
        StoreConfig::Postgres { .. } => Err(Failure::usage(format!(
            "idem {verb} works on the embedded store's files; this config uses PostgreSQL (use its own tools)"
        ))),
    }
}

pub(super) fn check(config: &Config) -> Result<(), Failure> {
    embedded_only(config, "check")?;
    crate::embedded::tools::check(&config.data_dir).map_err(|e| Failure::runtime(e.to_string()))
}

pub(super) fn repair(config: &Config, yes: bool) -> Result<(), Failure> {
    embedded_only(config, "repair")?;
    crate::embedded::tools::repair(&config.data_dir, yes).map_err(|e| Failure::runtime(e.to_string()))
}

pub(super) async fn backup(config: &Config, to: &std::path::Path) -> Result<(), Failure> {
    embedded_only(config, "backup")?;
    let (from, to) = (config.data_dir.clone(), to.to_owned());
    tokio::task::spawn_blocking(move || crate::embedded::tools::backup(&from, &to))
        .await
        .map_err(|e| Failure::runtime(e.to_string()))?
        .map_err(|e| Failure::runtime(e.to_string()))
}

pub(super) async fn serve(args: ServeArgs) -> Result<(), Failure> {
    let config = load_config(&args.config)?;
    crate::telemetry::init_logging(&config.log);
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    config.check_exposure(args.insecure_no_auth).map_err(Failure::usage)?;
    super::data_dir::check(&config)?;
    if let Err(warning) = config.check_transport() {
        tracing::warn!("{warning}");
    }
    // The store first, so that whoever finds the port open finds idem whole; a database not up
    // yet is waited for, answering health checks meanwhile (crate::starting).
    let first = match try_open_store(&config).await {
        Err(Attempt::Fail(failure)) => return Err(failure),
        other => other,
    };
    let listeners = Listeners::bind(&config).await.map_err(|e| Failure::runtime(e.to_string()))?;
    let (store, clock) = match first {
        Ok(opened) => opened,
        Err(_) => match wait_for_store(&config, &listeners).await? {
            Some(opened) => opened,
            None => return Ok(()),
        },
    };
    crate::run(config, store, clock, listeners, shutdown_signal()).await.map_err(|e| Failure::runtime(e.to_string()))
}

/// Tries the store until it opens, answering health checks on `listeners` meanwhile; `None`: told
/// to stop first.
async fn wait_for_store(config: &Config, listeners: &Listeners) -> Result<Option<(Stores, Arc<dyn Clock>)>, Failure> {
    let opening = crate::starting::retrying(async || try_open_store(config).await);
    let opened = tokio::select! {
        opened = crate::starting::serve_until(config, listeners, opening) => opened,
        () = shutdown_signal() => return Ok(None),
    };
    opened.map_err(|e| Failure::runtime(e.to_string()))?.map(Some)
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
    tracing::info!("shutting down: finishing in-flight requests");
}
