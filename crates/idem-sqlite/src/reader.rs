//! Reads: a pool of read-only connections used from blocking threads. WAL lets them read the last
//! committed state while the writer commits, so reads never queue behind writes.

use std::path::PathBuf;
use std::sync::Mutex;

use idem_core::StoreError;
use rusqlite::Connection;

use crate::row::store_error;
use crate::schema;

/// Read connections, at most: reads beyond this many wait for one instead of opening a new
/// connection (which would parse the schema and map the file afresh, cold, for one query).
const MAX_READERS: usize = 8;

pub struct ReaderPool {
    pub path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: tokio::sync::Semaphore,
}

impl ReaderPool {
    pub fn new(path: PathBuf) -> Self {
        Self { path, idle: Mutex::new(Vec::new()), permits: tokio::sync::Semaphore::new(MAX_READERS) }
    }

    /// Opens one connection and runs a trivial query: used when the store opens.
    pub fn check(&self) -> rusqlite::Result<()> {
        let conn = schema::open_reader(&self.path)?;
        ping(&conn).map_err(|_| rusqlite::Error::InvalidQuery)?;
        self.put(conn);
        Ok(())
    }

    /// Runs `f` on a pooled connection on a blocking thread.
    pub async fn run<T, F>(self: &std::sync::Arc<Self>, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let _permit = self.permits.acquire().await.map_err(|_| StoreError::Closed)?;
        let pool = std::sync::Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let conn = pool.take()?;
            let result = f(&conn);
            pool.put(conn);
            result
        })
        .await
        .map_err(|e| StoreError::Internal(format!("reader task failed: {e}")))?
    }

    fn take(&self) -> Result<Connection, StoreError> {
        let pooled = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        match pooled {
            Some(conn) => Ok(conn),
            None => schema::open_reader(&self.path).map_err(store_error),
        }
    }

    fn put(&self, conn: Connection) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_READERS
        {
            idle.push(conn);
        }
    }
}

pub fn ping(conn: &Connection) -> Result<(), StoreError> {
    conn.query_row("SELECT count(*) FROM meta", [], |_| Ok(())).map_err(store_error)
}
