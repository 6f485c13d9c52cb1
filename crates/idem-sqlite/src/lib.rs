//! The embedded store's events: one SQLite file in WAL mode under the data dir (`idem.db`), where
//! their queries (listing and filtering receipts, the leased job queue) need a SQL engine. Claims
//! and leased keys live in the log engine (`idem-log`); the server combines the two.
//!
//! Writes go to a single writer thread that gathers every command waiting in its queue into one
//! transaction and one fsync (group commit), then answers them all: an event is acknowledged only
//! after its commit is durable, yet many concurrent intakes share each fsync. Reads run on a small
//! pool of read connections and never wait behind the writer (WAL readers see the last commit).
//!
//! It implements `EventStore` and `StoreLifecycle`, persisting the transitions the core lifecycle
//! decides. The claims and keys an idem before the log engine kept here are read out once, for the
//! move into the log ([`SqliteStore::legacy_claims`]).
//!
//! A lock file in the data dir keeps a second process from opening the same store.

mod checkpoint;
mod event;
mod legacy;
mod reader;
mod row;
mod schema;
mod writer;

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use async_trait::async_trait;
use std::time::Duration;

use idem_core::event::{
    Accept, Job, NewEvent, QueueStats, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, ReplayBatch, Transition,
};
use idem_core::{ClaimId, ClaimRecord, Clock, EventStore, StoreError, StoreLifecycle, Timestamp};
use tokio::sync::{mpsc, oneshot};

pub use crate::legacy::LegacyResult;
use crate::reader::ReaderPool;
use crate::writer::Command;

/// How the store is tuned; the defaults suit a small server.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Commands gathered into one transaction at most.
    pub max_batch_items: usize,
    /// Page cache of the writer connection, in KiB. Big enough for the interior pages of a large
    /// index (a 10-million-claim store has about 17 MiB of them), not bigger: SQLite walks the
    /// cache at every commit, and the OS page cache serves leaf pages well enough.
    pub writer_cache_kib: i64,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self { max_batch_items: 20_000, writer_cache_kib: 32 * 1024 }
    }
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot use data dir {dir}: {source}")]
    DataDir { dir: PathBuf, source: std::io::Error },
    #[error(
        "data dir {0} is in use by another idem process (its lock file is held); stop that process or choose another --data-dir"
    )]
    Locked(PathBuf),
    #[error("cannot open the store in {dir}: {message}")]
    Database { dir: PathBuf, message: String },
}

pub struct SqliteStore {
    commands: mpsc::Sender<Command>,
    readers: Arc<ReaderPool>,
    clock: Arc<dyn Clock>,
    writer: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Mutex<Option<checkpoint::Checkpointer>>,
    _lock: File,
}

impl SqliteStore {
    pub const FILE_NAME: &'static str = "idem.db";

    /// Opens (creating if needed) the store in `dir`, runs pending migrations and starts the writer.
    pub fn open(dir: &Path, clock: Arc<dyn Clock>, options: SqliteOptions) -> Result<Self, OpenError> {
        let dir_error = |source| OpenError::DataDir { dir: dir.to_owned(), source };
        std::fs::create_dir_all(dir).map_err(dir_error)?;
        let lock = lock_data_dir(dir)?;
        let path = dir.join(Self::FILE_NAME);
        let db_error = |e: rusqlite::Error| OpenError::Database { dir: dir.to_owned(), message: e.to_string() };
        let conn = schema::open_writer(&path, options.writer_cache_kib).map_err(db_error)?;
        schema::migrate(&conn).map_err(db_error)?;
        let readers = Arc::new(ReaderPool::new(path));
        readers.check().map_err(db_error)?;
        let (commands, queue) = mpsc::channel(8192);
        let writer = writer::spawn(conn, queue, Arc::clone(&clock), options.max_batch_items).map_err(dir_error)?;
        let checkpointer = checkpoint::Checkpointer::spawn(&readers.path).map_err(dir_error)?;
        Ok(Self {
            commands,
            readers,
            clock,
            writer: Mutex::new(Some(writer)),
            checkpointer: Mutex::new(Some(checkpointer)),
            _lock: lock,
        })
    }

    /// Claims and stored keys kept in this file by an idem from before the log engine.
    pub async fn legacy_counts(&self) -> Result<(u64, u64), StoreError> {
        self.readers.run(legacy::counts).await
    }

    /// A page of those claims, in (namespace, id) order after `after`.
    pub async fn legacy_claims(
        &self,
        after: Option<(String, ClaimId)>,
        limit: usize,
    ) -> Result<Vec<ClaimRecord>, StoreError> {
        self.readers.run(move |conn| legacy::claims(conn, after, limit)).await
    }

    /// A page of those completed keys' results, in id order after `after`.
    pub async fn legacy_results(&self, after: Option<ClaimId>, limit: usize) -> Result<Vec<LegacyResult>, StoreError> {
        self.readers.run(move |conn| legacy::results(conn, after, limit)).await
    }

    async fn send<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Command,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(make(tx)).await.map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

/// Why a store file does not pass `quick_check`.
#[derive(Debug, thiserror::Error)]
pub enum CheckFailed {
    /// The file could not be opened or asked.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// What `quick_check` reported instead of `ok`.
    #[error("{0}")]
    Damaged(String),
}

/// SQLite's `quick_check` of a store file, read-only (safe while idem runs).
pub fn quick_check(path: &Path) -> Result<(), CheckFailed> {
    let conn = schema::open_reader(path)?;
    let verdict: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
    if verdict == "ok" { Ok(()) } else { Err(CheckFailed::Damaged(verdict)) }
}

/// Why a backup of a store file was not written.
#[derive(Debug, thiserror::Error)]
pub enum BackupFailed {
    #[error("{} exists already; back up into an empty directory", .0.display())]
    Exists(PathBuf),
    /// `VACUUM INTO` takes the path as text.
    #[error("the backup path is not UTF-8")]
    NotUtf8,
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

/// A consistent copy of a store file while it is in use (`VACUUM INTO`, one read transaction).
pub fn backup(from: &Path, to: &Path) -> Result<(), BackupFailed> {
    if to.exists() {
        return Err(BackupFailed::Exists(to.to_owned()));
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // A plain connection: `VACUUM INTO` reads in one transaction and writes only the new file.
    let conn = rusqlite::Connection::open(from)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let target = to.to_str().ok_or(BackupFailed::NotUtf8)?;
    conn.execute("VACUUM INTO ?1", [target])?;
    Ok(())
}

fn lock_data_dir(dir: &Path) -> Result<File, OpenError> {
    let path = dir.join("idem.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| OpenError::DataDir { dir: dir.to_owned(), source })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpenError::Locked(dir.to_owned())),
        Err(std::fs::TryLockError::Error(source)) => Err(OpenError::DataDir { dir: dir.to_owned(), source }),
    }
}

#[async_trait]
impl EventStore for SqliteStore {
    async fn accept_event(&self, event: NewEvent) -> Result<Accept, StoreError> {
        self.send(|reply| Command::Accept { event, reply }).await
    }

    async fn lease_jobs(&self, limit: usize, lease: Duration, busy_sources: &[String]) -> Result<Vec<Job>, StoreError> {
        let busy = busy_sources.to_vec();
        self.send(|reply| Command::Lease { limit, lease, busy, reply }).await
    }

    async fn finish_job(&self, job: &Job, transition: Transition) -> Result<bool, StoreError> {
        let (job, transition) = (Box::new(job.clone()), Box::new(transition));
        self.send(|reply| Command::Finish { job, transition, reply }).await
    }

    async fn release_jobs(&self, jobs: &[Job]) -> Result<usize, StoreError> {
        let jobs = jobs.iter().map(|j| (j.id, j.token)).collect();
        self.send(|reply| Command::Release { jobs, reply }).await
    }

    async fn get_receipt(&self, id: &ReceiptId) -> Result<Option<Receipt>, StoreError> {
        let id = id.clone();
        self.readers.run(move |conn| event::get(conn, &id)).await
    }

    async fn list_receipts(&self, filter: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError> {
        let filter = filter.clone();
        self.readers.run(move |conn| event::list(conn, &filter)).await
    }

    async fn replay_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        let id = id.clone();
        self.send(|reply| Command::Replay { id, reply }).await
    }

    async fn count_matching(&self, filter: &ReceiptFilter) -> Result<u64, StoreError> {
        let filter = filter.clone();
        self.readers.run(move |conn| event::count_matching(conn, &filter)).await
    }

    async fn replay_matching(&self, filter: &ReceiptFilter) -> Result<ReplayBatch, StoreError> {
        let filter = Box::new(filter.clone());
        self.send(|reply| Command::ReplayMatching { filter, reply }).await
    }

    async fn discard_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        let id = id.clone();
        self.send(|reply| Command::Discard { id, reply }).await
    }

    async fn delete_ended_receipts(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
        self.send(|reply| Command::DeleteEnded { before, limit, reply }).await
    }

    async fn queue_stats(&self) -> Result<QueueStats, StoreError> {
        let now = self.clock.now();
        self.readers.run(move |conn| event::queue_stats(conn, now)).await
    }

    async fn count_receipts(&self) -> Result<Vec<(String, ReceiptStatus, u64)>, StoreError> {
        self.readers.run(event::count_receipts).await
    }
}

#[async_trait]
impl StoreLifecycle for SqliteStore {
    async fn check_ready(&self) -> Result<(), StoreError> {
        self.readers.run(reader::ping).await?;
        self.send(|reply| Command::Probe { reply }).await
    }

    async fn close(&self) {
        let checkpointer = self.checkpointer.lock().ok().and_then(|mut c| c.take());
        let _ = tokio::task::spawn_blocking(move || drop(checkpointer)).await;
        let handle = self.writer.lock().ok().and_then(|mut w| w.take());
        let Some(handle) = handle else { return };
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Close { reply: tx }).await.is_ok() {
            let _ = rx.await;
        }
        let _ = tokio::task::spawn_blocking(move || handle.join()).await;
    }
}
