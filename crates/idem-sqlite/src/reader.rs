//! Reads: a pool of read-only connections used from blocking threads. WAL lets them read the last
//! committed state while the writer commits, so reads never queue behind writes.

use std::path::PathBuf;
use std::sync::Mutex;

use idem_core::{ClaimId, ClaimRecord, Namespace, Parts, StoreError, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};

use crate::row::{self, store_error};
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

/// Reads many ids in one snapshot.
pub fn lookup(
    conn: &Connection,
    ns: &Namespace,
    ids: &[ClaimId],
    now: Timestamp,
) -> Result<Vec<Option<ClaimRecord>>, StoreError> {
    let tx = conn.unchecked_transaction().map_err(store_error)?;
    let sql = format!(
        "SELECT {} FROM claims WHERE ns = ?1 AND id = ?2 AND (expires_at IS NULL OR expires_at > ?3)",
        row::COLUMNS
    );
    let mut stmt = tx.prepare_cached(&sql).map_err(store_error)?;
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by_key(|&i| ids[i]);
    let mut out: Vec<Option<ClaimRecord>> = (0..ids.len()).map(|_| None).collect();
    for i in order {
        let id = ids[i];
        let found = stmt
            .query_row(params![ns.as_str(), &id.0[..], now.millis()], |r| row::record(ns, id, r))
            .optional()
            .map_err(store_error)?;
        out[i] = found.transpose()?;
    }
    Ok(out)
}

/// A range scan of the parts index, stopping at the first live claim.
pub fn prefix_exists(conn: &Connection, ns: &Namespace, prefix: &Parts, now: Timestamp) -> Result<bool, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT 1 FROM claims INDEXED BY claims_by_parts
             WHERE ns = ?1 AND parts >= ?2 AND parts < ?3 AND (expires_at IS NULL OR expires_at > ?4)
             LIMIT 1",
        )
        .map_err(store_error)?;
    stmt.exists(params![ns.as_str(), prefix.encode(), prefix.prefix_upper_bound(), now.millis()]).map_err(store_error)
}

/// Claims per namespace, from the primary key's index.
pub fn count_claims(conn: &Connection) -> Result<Vec<(String, u64)>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT ns, count(*) FROM claims GROUP BY ns").map_err(store_error)?;
    stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))
        .and_then(|rows| rows.collect())
        .map_err(store_error)
}
