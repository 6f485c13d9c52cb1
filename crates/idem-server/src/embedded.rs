//! The embedded store: claims and leased keys (gateway keys, operations) in the log engine
//! (`idem-log`, in `DATA_DIR/log/`), events in SQLite (`DATA_DIR/idem.db`), where their queries
//! (listing, filtering, the job queue) need it.
//!
//! A data dir from before the log engine keeps its claims and keys: the first start with the log
//! copies them out of `idem.db` into a new log, which becomes the store only once whole.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idem_core::event::{
    Accept, Job, NewEvent, QueueStats, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, ReplayBatch, Transition,
};
use idem_core::request::{Begin, Forget, LeaseToken, NewRequest, RequestState};
use idem_core::{
    ClaimId, ClaimOutcome, ClaimRecord, ClaimStore, Clock, EventStore, Namespace, NewClaim, Parts, RequestStore,
    StoreError, StoreLifecycle, Timestamp,
};
use idem_log::disk::Disk;
use idem_log::{LogOptions, LogStore};
use idem_sqlite::{SqliteOptions, SqliteStore};

pub struct EmbeddedStore {
    log: LogStore,
    events: SqliteStore,
}

/// Where the log lives in a data dir.
pub fn log_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("log")
}

impl EmbeddedStore {
    /// Opens both parts; moves claims and keys of an older data dir into the log first.
    pub async fn open(data_dir: &Path, clock: Arc<dyn Clock>) -> Result<Self, String> {
        // A new data dir's entry in its parent is made durable before anything is acknowledged.
        idem_log::disk::create_dir_durable(&idem_log::disk::OsDisk, data_dir)
            .map_err(|e| format!("cannot create the data dir {}: {e}", data_dir.display()))?;
        let events =
            SqliteStore::open(data_dir, Arc::clone(&clock), SqliteOptions::default()).map_err(|e| e.to_string())?;
        let dir = log_dir(data_dir);
        if !dir.exists() {
            upgrade(&events, data_dir, &clock).await?;
        }
        let log = LogStore::open(&dir, clock, LogOptions::default()).map_err(|e| e.to_string())?;
        Ok(Self { log, events })
    }
}

/// Copies the claims and keys an older idem kept in SQLite into a new log, written beside the
/// final place and renamed into it once complete, then empties the old tables.
async fn upgrade(events: &SqliteStore, data_dir: &Path, clock: &Arc<dyn Clock>) -> Result<(), String> {
    let (claims, keys) = events.legacy_counts().await.map_err(|e| e.to_string())?;
    if claims == 0 && keys == 0 {
        return Ok(());
    }
    tracing::info!(claims, keys, "moving claims and keys from idem.db into the log (once)");
    let staging = data_dir.join("log.upgrading");
    let _ = std::fs::remove_dir_all(&staging);
    let log = LogStore::open(&staging, Arc::clone(clock), LogOptions::default()).map_err(|e| e.to_string())?;
    const PAGE: usize = 10_000;
    let fail = |e: StoreError| format!("moving claims into the log: {e}");
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
    std::fs::rename(&staging, log_dir(data_dir))
        .map_err(|e| format!("cannot move the upgraded log into place: {e}"))?;
    // The rename is data too: lost to a power cut, the next start would upgrade again into a
    // fresh staging directory, deleting what is by then the live log.
    idem_log::disk::OsDisk
        .sync_dir(data_dir)
        .map_err(|e| format!("cannot make the upgraded log's place durable: {e}"))?;
    tracing::info!("claims and keys moved into the log; idem.db keeps its old copies (unused, in case of a downgrade)");
    Ok(())
}

#[async_trait]
impl ClaimStore for EmbeddedStore {
    async fn claim(&self, ns: &Namespace, items: Vec<NewClaim>) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.log.claim(ns, items).await
    }

    async fn lookup(&self, ns: &Namespace, ids: &[ClaimId]) -> Result<Vec<Option<ClaimRecord>>, StoreError> {
        self.log.lookup(ns, ids).await
    }

    async fn prefix_exists(&self, ns: &Namespace, prefix: &Parts) -> Result<bool, StoreError> {
        self.log.prefix_exists(ns, prefix).await
    }

    async fn delete(&self, ns: &Namespace, id: &ClaimId) -> Result<bool, StoreError> {
        self.log.delete(ns, id).await
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize, StoreError> {
        self.log.sweep_expired(limit).await
    }

    async fn count_claims(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.log.count_claims().await
    }

    fn counts_are_live(&self) -> bool {
        self.log.counts_are_live()
    }
}

#[async_trait]
impl RequestStore for EmbeddedStore {
    async fn begin_request(&self, request: NewRequest) -> Result<Begin, StoreError> {
        self.log.begin_request(request).await
    }

    async fn complete_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        result: &[u8],
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.log.complete_request(id, token, result, ttl).await
    }

    async fn release_request(&self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError> {
        self.log.release_request(id, token).await
    }

    async fn extend_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        self.log.extend_request(id, token, lease).await
    }

    async fn peek_request(&self, id: &ClaimId) -> Result<Option<RequestState>, StoreError> {
        self.log.peek_request(id).await
    }

    async fn forget_request(&self, id: &ClaimId) -> Result<Forget, StoreError> {
        self.log.forget_request(id).await
    }

    async fn sweep_requests(&self, limit: usize) -> Result<usize, StoreError> {
        self.log.sweep_requests(limit).await
    }
}

#[async_trait]
impl EventStore for EmbeddedStore {
    async fn accept_event(&self, event: NewEvent) -> Result<Accept, StoreError> {
        self.events.accept_event(event).await
    }

    async fn lease_jobs(&self, limit: usize, lease: Duration, busy_sources: &[String]) -> Result<Vec<Job>, StoreError> {
        self.events.lease_jobs(limit, lease, busy_sources).await
    }

    async fn finish_job(&self, job: &Job, transition: Transition) -> Result<bool, StoreError> {
        self.events.finish_job(job, transition).await
    }

    async fn get_receipt(&self, id: &ReceiptId) -> Result<Option<Receipt>, StoreError> {
        self.events.get_receipt(id).await
    }

    async fn count_matching(&self, filter: &ReceiptFilter) -> Result<u64, StoreError> {
        self.events.count_matching(filter).await
    }

    async fn replay_matching(&self, filter: &ReceiptFilter) -> Result<ReplayBatch, StoreError> {
        self.events.replay_matching(filter).await
    }

    async fn discard_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        self.events.discard_receipt(id).await
    }

    async fn delete_ended_receipts(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
        self.events.delete_ended_receipts(before, limit).await
    }

    async fn list_receipts(&self, filter: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError> {
        self.events.list_receipts(filter).await
    }

    async fn replay_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        self.events.replay_receipt(id).await
    }

    async fn queue_stats(&self) -> Result<QueueStats, StoreError> {
        self.events.queue_stats().await
    }

    async fn count_receipts(&self) -> Result<Vec<(String, ReceiptStatus, u64)>, StoreError> {
        self.events.count_receipts().await
    }
}

#[async_trait]
impl StoreLifecycle for EmbeddedStore {
    async fn check_ready(&self) -> Result<(), StoreError> {
        self.log.check_ready().await?;
        self.events.check_ready().await
    }

    async fn close(&self) {
        self.log.close().await;
        self.events.close().await;
    }
}
