//! The embedded store: claims and leased keys (gateway keys, operations) in the log engine
//! (`idem-log`, in `DATA_DIR/log/`), events in SQLite (`DATA_DIR/idem.db`), where their queries
//! (listing, filtering, the job queue) need it.
//!
//! A data dir from before the log engine keeps its claims and keys: the first start with the log
//! copies them out of `idem.db` into a new log, which becomes the store only once whole. Everything
//! that knows the data dir's layout is here: opening it, that upgrade, and the command line's
//! [`tools`] (check, repair, backup, sizes).

pub mod tools;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use idem_core::{Clock, StoreError, StoreLifecycle, Stores};
use idem_log::disk::Disk;
use idem_log::{LogOptions, LogStore};
use idem_sqlite::{SqliteOptions, SqliteStore};

/// Why the embedded store did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot create the data dir {}: {source}", dir.display())]
    DataDir { dir: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Events(#[from] idem_sqlite::OpenError),
    #[error(transparent)]
    Log(#[from] idem_log::OpenError),
    /// `idem.db` could not say whether it holds an older idem's claims and keys.
    #[error(transparent)]
    Legacy(StoreError),
    #[error("moving claims into the log: {0}")]
    Moving(#[source] StoreError),
    #[error("cannot move the upgraded log into place: {0}")]
    Rename(#[source] std::io::Error),
    #[error("cannot make the upgraded log's place durable: {0}")]
    Sync(#[source] std::io::Error),
}

/// Where the log lives in a data dir.
pub fn log_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("log")
}

/// Opens both engines as the server's stores; moves the claims and keys of an older data dir into
/// the log first.
pub async fn open(data_dir: &Path, clock: Arc<dyn Clock>) -> Result<Stores, OpenError> {
    // A new data dir's entry in its parent is made durable before anything is acknowledged.
    idem_log::disk::create_dir_durable(&idem_log::disk::OsDisk, data_dir)
        .map_err(|source| OpenError::DataDir { dir: data_dir.to_owned(), source })?;
    let events = SqliteStore::open(data_dir, Arc::clone(&clock), SqliteOptions::default())?;
    let dir = log_dir(data_dir);
    if !dir.exists() {
        upgrade(&events, data_dir, &clock).await?;
    }
    let log = Arc::new(LogStore::open(&dir, clock, LogOptions::default())?);
    let events = Arc::new(events);
    let lifecycle = Arc::new(Both { log: Arc::clone(&log), events: Arc::clone(&events) });
    Ok(Stores { claims: log.clone(), requests: log, events, lifecycle })
}

/// Copies the claims and keys an older idem kept in SQLite into a new log, written beside the
/// final place and renamed into it once complete, then empties the old tables.
async fn upgrade(events: &SqliteStore, data_dir: &Path, clock: &Arc<dyn Clock>) -> Result<(), OpenError> {
    let (claims, keys) = events.legacy_counts().await.map_err(OpenError::Legacy)?;
    if claims == 0 && keys == 0 {
        return Ok(());
    }
    tracing::info!(claims, keys, "moving claims and keys from idem.db into the log (once)");
    let staging = data_dir.join("log.upgrading");
    let _ = std::fs::remove_dir_all(&staging);
    let log = LogStore::open(&staging, Arc::clone(clock), LogOptions::default())?;
    const PAGE: usize = 10_000;
    let fail = OpenError::Moving;
    let mut after = None;
    loop {
        let page = events.legacy_claims(after.take(), PAGE).await.map_err(fail)?;
        after = page.last().map(|c| (c.namespace.as_str().to_owned(), c.id));
        let done = page.len() < PAGE;
        log.import(page, Vec::new()).await.map_err(fail)?;
        if done {
            break;
        }
    }
    let mut after = None;
    loop {
        let page = events.legacy_results(after.take(), PAGE).await.map_err(fail)?;
        after = page.last().map(|r| r.id);
        let done = page.len() < PAGE;
        let results = page.into_iter().map(|r| (r.id, r.fingerprint, r.result, r.expires_at)).collect();
        log.import(Vec::new(), results).await.map_err(fail)?;
        if done {
            break;
        }
    }
    log.close().await;
    drop(log);
    std::fs::rename(&staging, log_dir(data_dir)).map_err(OpenError::Rename)?;
    // The rename is data too: lost to a power cut, the next start would upgrade again into a
    // fresh staging directory, deleting what is by then the live log.
    idem_log::disk::OsDisk.sync_dir(data_dir).map_err(OpenError::Sync)?;
    tracing::info!("claims and keys moved into the log; idem.db keeps its old copies (unused, in case of a downgrade)");
    Ok(())
}

/// Readiness and closing of both engines.
struct Both {
    log: Arc<LogStore>,
    events: Arc<SqliteStore>,
}

#[async_trait]
impl StoreLifecycle for Both {
    async fn check_ready(&self) -> Result<(), StoreError> {
        self.log.check_ready().await?;
        self.events.check_ready().await
    }

    async fn close(&self) {
        self.log.close().await;
        self.events.close().await;
    }
}
