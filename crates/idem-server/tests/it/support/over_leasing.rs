//! An event store that leases more jobs than it is asked for, as PostgreSQL did on some plans
//! (#42): asked for n, it leases every due job. It leases nothing until the test opens it, so
//! that a whole burst is due at the first lease; everything else goes to the store it wraps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use idem_core::event::{
    Accept, Job, NewEvent, QueueStats, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, ReplayBatch, Transition,
};
use idem_core::{EventStore, StoreError, Timestamp};

pub struct OverLeasing {
    inner: Arc<dyn EventStore>,
    open: AtomicBool,
    /// Jobs leased beyond what was asked, in all.
    pub beyond: AtomicUsize,
}

impl OverLeasing {
    pub fn new(inner: Arc<dyn EventStore>) -> Self {
        Self { inner, open: AtomicBool::new(false), beyond: AtomicUsize::new(0) }
    }

    /// From now on, leases take every due job.
    pub fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

#[async_trait]
impl EventStore for OverLeasing {
    async fn lease_jobs(&self, limit: usize, lease: Duration, busy: &[String]) -> Result<Vec<Job>, StoreError> {
        if !self.open.load(Ordering::SeqCst) {
            return Ok(Vec::new());
        }
        let jobs = self.inner.lease_jobs(100_000, lease, busy).await?;
        self.beyond.fetch_add(jobs.len().saturating_sub(limit), Ordering::SeqCst);
        Ok(jobs)
    }

    async fn accept_event(&self, event: NewEvent) -> Result<Accept, StoreError> {
        self.inner.accept_event(event).await
    }

    async fn release_jobs(&self, jobs: &[Job]) -> Result<usize, StoreError> {
        self.inner.release_jobs(jobs).await
    }

    async fn finish_job(&self, job: &Job, transition: Transition) -> Result<bool, StoreError> {
        self.inner.finish_job(job, transition).await
    }

    async fn get_receipt(&self, id: &ReceiptId) -> Result<Option<Receipt>, StoreError> {
        self.inner.get_receipt(id).await
    }

    async fn list_receipts(&self, filter: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError> {
        self.inner.list_receipts(filter).await
    }

    async fn count_matching(&self, filter: &ReceiptFilter) -> Result<u64, StoreError> {
        self.inner.count_matching(filter).await
    }

    async fn replay_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        self.inner.replay_receipt(id).await
    }

    async fn replay_matching(&self, filter: &ReceiptFilter) -> Result<ReplayBatch, StoreError> {
        self.inner.replay_matching(filter).await
    }

    async fn discard_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        self.inner.discard_receipt(id).await
    }

    async fn delete_ended_receipts(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
        self.inner.delete_ended_receipts(before, limit).await
    }

    async fn queue_stats(&self) -> Result<QueueStats, StoreError> {
        self.inner.queue_stats().await
    }

    async fn count_receipts(&self) -> Result<Vec<(String, ReceiptStatus, u64)>, StoreError> {
        self.inner.count_receipts().await
    }
}
