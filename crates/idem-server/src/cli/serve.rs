//! `idem serve`: load the config, choose the store once, bind, and run until SIGINT or SIGTERM.

use std::sync::Arc;

use idem_core::{Clock, Stores, SystemClock};
use idem_log::disk::OsDisk;
use idem_sqlite::SqliteStore;

use super::client::Failure;
use super::{ConfigArgs, ServeArgs};
use crate::Listeners;
use crate::config::{Config, Overrides, StoreConfig};

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
/// (the system's for the embedded store, the database's for PostgreSQL), which the rest of the
/// server must share.
pub async fn open_store(config: &Config) -> Result<(Stores, Arc<dyn Clock>), Failure> {
    match &config.store {
        StoreConfig::Embedded {} => {
            let clock: Arc<dyn Clock> = Arc::new(SystemClock);
            let stores = crate::embedded::open(&config.data_dir, Arc::clone(&clock)).await.map_err(Failure::runtime)?;
            Ok((stores, clock))
        }
        StoreConfig::Postgres { url, pool_size } => {
            let time = idem_postgres::TimeSource::Database { local: Arc::new(SystemClock) };
            let store = idem_postgres::PgStore::connect(url.expose(), *pool_size, time)
                .await
                .map_err(|e| Failure::runtime(e.to_string()))?;
            let clock = store.clock();
            Ok((Stores::of(Arc::new(store)), clock))
        }
    }
}

/// `idem check`: every log segment read and verified against the manifest, and SQLite's
/// `quick_check` of the events. Exit 1 on anything acknowledged that cannot be read.
pub(super) fn check(config: &Config) -> Result<(), Failure> {
    if !matches!(config.store, StoreConfig::Embedded {}) {
        return Err(Failure::usage("idem check verifies the embedded store; this config uses PostgreSQL"));
    }
    let dir = crate::embedded::log_dir(&config.data_dir);
    let mut damaged = false;
    if dir.exists() {
        let report = idem_log::check(&OsDisk, &dir).map_err(|e| Failure::runtime(format!("{}: {e}", dir.display())))?;
        println!("log: {} segments, {} bytes, {} records", report.segments, report.bytes, report.records);
        for damage in &report.damage {
            eprintln!("log: DAMAGED: {damage}");
        }
        if report.damage.is_empty() {
            println!("log: every segment the manifest lists is there and whole; every checksum good");
        }
        if let Some(torn) = report.torn {
            println!(
                "log: the last {} bytes of segment {} (from byte {}) are a group cut short by a crash (dropped at start-up; never acknowledged), or the group idem is writing right now",
                torn.bytes, torn.segment, torn.offset
            );
        }
        if !report.leftovers.is_empty() {
            println!(
                "log: segments {:?} are no longer part of the log (compacted); start-up deletes them",
                report.leftovers
            );
        }
        if report.without_manifest && report.damage.is_empty() {
            println!("log: written before idem kept a manifest; the next start writes one");
        }
        damaged = !report.damage.is_empty();
    } else {
        println!("log: none yet in {}", dir.display());
    }
    let db = config.data_dir.join(SqliteStore::FILE_NAME);
    if db.exists() {
        idem_sqlite::quick_check(&db).map_err(|e| Failure::runtime(format!("{}: {e}", db.display())))?;
        println!("events: {} passes SQLite's quick_check", db.display());
    }
    if damaged {
        let data_dir = config.data_dir.display();
        return Err(Failure::runtime(format!(
            "the log is damaged: acknowledged records cannot be read, and idem will not start on it. \
             `idem repair --data-dir {data_dir}` shows what it would drop; with --yes it drops that and \
             keeps every intact record. Or restore the data dir from a backup (`idem backup`)."
        )));
    }
    Ok(())
}

/// `idem repair`: what a damaged log would lose to start again; with `yes`, does it.
pub(super) fn repair(config: &Config, yes: bool) -> Result<(), Failure> {
    if !matches!(config.store, StoreConfig::Embedded {}) {
        return Err(Failure::usage("idem repair mends the embedded store; this config uses PostgreSQL"));
    }
    let dir = crate::embedded::log_dir(&config.data_dir);
    if !dir.exists() {
        println!("log: none in {}; nothing to repair", dir.display());
        return Ok(());
    }
    let report = idem_log::repair(&OsDisk, &dir, yes).map_err(|e| Failure::runtime(e.to_string()))?;
    if report.damage.is_empty() {
        println!("log: nothing to repair: every segment the manifest lists is there and whole");
        return Ok(());
    }
    println!("log: damaged:");
    for damage in &report.damage {
        println!("  - {damage}");
    }
    println!("{}", if yes { "done:" } else { "idem repair --yes would:" });
    for action in &report.actions {
        println!("  - {action}");
    }
    let uncounted = match report.uncounted {
        0 => String::new(),
        n => format!(", plus {n} damaged stretch(es) whose records could not be counted"),
    };
    let verb = if yes { "dropped" } else { "to drop" };
    println!("acknowledged records {verb}: {}{uncounted}", report.lost_records);
    if yes {
        for saved in &report.saved {
            println!("the file as it was before: {}", saved.display());
        }
        println!("idem can start on {} again", config.data_dir.display());
    } else {
        println!(
            "nothing was changed; run `idem repair --yes --data-dir {}` to do it (each file changed is copied to {} first)",
            config.data_dir.display(),
            dir.join("damaged").display()
        );
    }
    Ok(())
}

/// `idem backup DIR`: the log copied at one instant (compaction pauses meanwhile), and the events
/// through SQLite's `VACUUM INTO`, while idem serves.
pub(super) async fn backup(config: &Config, to: &std::path::Path) -> Result<(), Failure> {
    if !matches!(config.store, StoreConfig::Embedded {}) {
        return Err(Failure::usage("idem backup copies the embedded store; back PostgreSQL up with its own tools"));
    }
    let from = config.data_dir.clone();
    let target = to.to_owned();
    let to = target.clone();
    tokio::task::spawn_blocking(move || {
        let log_from = crate::embedded::log_dir(&from);
        if log_from.exists() {
            let report = idem_log::backup(&OsDisk, &log_from, &crate::embedded::log_dir(&to))
                .map_err(|e| format!("log: {e}"))?;
            println!("log: {} segments, {} bytes, {} records", report.segments, report.bytes, report.records);
        }
        let db = from.join(SqliteStore::FILE_NAME);
        if db.exists() {
            idem_sqlite::backup(&db, &to.join(SqliteStore::FILE_NAME)).map_err(|e| format!("events: {e}"))?;
            println!("events: {}", to.join(SqliteStore::FILE_NAME).display());
        }
        Ok::<(), String>(())
    })
    .await
    .map_err(|e| Failure::runtime(e.to_string()))?
    .map_err(Failure::runtime)?;
    eprintln!("idem: backup written to {}", target.display());
    Ok(())
}

pub(super) async fn serve(args: ServeArgs) -> Result<(), Failure> {
    let config = load_config(&args.config)?;
    crate::telemetry::init_logging(&config.log);
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    config.check_exposure(args.insecure_no_auth).map_err(Failure::usage)?;
    if let Err(warning) = config.check_transport() {
        tracing::warn!("{warning}");
    }
    let (store, clock) = open_store(&config).await?;
    let listeners = Listeners::bind(&config).await.map_err(|e| Failure::runtime(e.to_string()))?;
    crate::run(config, store, clock, listeners, shutdown_signal()).await.map_err(|e| Failure::runtime(e.to_string()))
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
