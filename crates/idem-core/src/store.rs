//! The storage boundary. Every backend implements [`Store`]; the server holds an `Arc<dyn Store>`
//! and never sees a driver type. The required surface is small: an atomic insert-if-absent
//! (`claim`), point and prefix reads, a delete, and the sweeper's bounded delete of expired rows.
//!
//! Invariants every backend keeps (the conformance suite checks each):
//! - of any number of concurrent claims of one key, exactly one answers `claimed: true`;
//! - an answer is given only once what it reports is durable;
//! - a claim whose `expires_at` is at or before now is absent for every operation, whether or not
//!   the sweeper has deleted it yet;
//! - of any number of concurrent `begin_request`s of one gateway key, exactly one is `Started`;
//!   only the holder of its lease token can complete or release it, and once the lease runs out the
//!   key is free again (and the old token is worthless).

use async_trait::async_trait;

use std::time::Duration;

use crate::event::{Accept, Job, JobOutcome, NewEvent, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus};
use crate::gateway::{Begin, LeaseToken, NewRequest, RequestState, StoredResponse};
use crate::{ClaimId, ClaimOutcome, ClaimRecord, Namespace, NewClaim, Parts, StoreError};

/// A change made through another node that this node may be waiting for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSignal {
    /// Delivery jobs were queued.
    JobsQueued,
    /// A gateway key was completed or released.
    RequestDone(ClaimId),
}

/// Receives [`StoreSignal`]s.
pub type SignalHandler = Box<dyn Fn(StoreSignal) + Send + Sync>;

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Claims every item in order; within one call the first of two equal keys wins.
    async fn claim(&self, ns: &Namespace, items: Vec<NewClaim>) -> Result<Vec<ClaimOutcome>, StoreError>;

    /// Reads live claims by id, answering in request order.
    async fn lookup(&self, ns: &Namespace, ids: &[ClaimId]) -> Result<Vec<Option<ClaimRecord>>, StoreError>;

    /// Is there a live claim whose parts begin with `prefix`? Answered from an index.
    async fn prefix_exists(&self, ns: &Namespace, prefix: &Parts) -> Result<bool, StoreError>;

    /// Deletes a claim; `false` when there was no live claim with that id.
    async fn delete(&self, ns: &Namespace, id: &ClaimId) -> Result<bool, StoreError>;

    /// Takes a gateway key for one request (atomic insert-if-absent, or take-over of an expired
    /// lease or completed record), or reports who has it.
    async fn begin_request(&self, request: NewRequest) -> Result<Begin, StoreError>;

    /// Stores the response of a request whose lease `token` still holds the key, kept for `ttl`.
    /// `false`: the lease was lost (expired and taken over, or released); nothing was changed.
    async fn complete_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        response: &StoredResponse,
        ttl: Duration,
    ) -> Result<bool, StoreError>;

    /// Frees a key held by `token` so that a retry executes again. `false`: not held by it.
    async fn release_request(&self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError>;

    /// The live state of a gateway key, if any.
    async fn peek_request(&self, id: &ClaimId) -> Result<Option<RequestState>, StoreError>;

    /// Stores a new receipt together with its first delivery job (one transaction), or reports
    /// the earlier receipt of the same (source, event id).
    async fn accept_event(&self, event: NewEvent) -> Result<Accept, StoreError>;

    /// Leases up to `limit` due jobs for `lease`, oldest due first, skipping `busy_sources` (those
    /// at their concurrency limit, so that one slow handler cannot hold every lease). A job whose
    /// lease ran out is due again.
    async fn lease_jobs(&self, limit: usize, lease: Duration, busy_sources: &[String]) -> Result<Vec<Job>, StoreError>;

    /// Records an attempt and moves the job on (done, rescheduled, or dead). A finished delivery
    /// with `result_body` also queues the result webhook, in the same transaction. `false`: the
    /// lease was lost and nothing was changed.
    async fn finish_job(
        &self,
        job: &Job,
        outcome: JobOutcome,
        result_body: Option<Vec<u8>>,
    ) -> Result<bool, StoreError>;

    async fn get_receipt(&self, id: &ReceiptId) -> Result<Option<Receipt>, StoreError>;

    /// Newest first; attempts are not filled in.
    async fn list_receipts(&self, filter: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError>;

    /// Queues a completed or dead receipt for delivery again from attempt 1. Answers the status it
    /// had (`None`: no such receipt); a receipt that is not terminal is left alone.
    async fn replay_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError>;

    /// Jobs due now (leased or not), and when the oldest of them fell due.
    async fn queue_stats(&self) -> Result<(u64, Option<crate::Timestamp>), StoreError>;

    /// Deletes up to `limit` expired claims and gateway records and says how many went.
    async fn sweep_expired(&self, limit: usize) -> Result<usize, StoreError>;

    /// Succeeds when the store can be read and written right now.
    async fn check_ready(&self) -> Result<(), StoreError>;

    /// Finishes pending writes and releases the store. Later calls answer `StoreError::Closed`.
    async fn close(&self);

    /// Asks to hear of changes other nodes make (a shared database's notifications). A store that
    /// only one process uses has none to tell, and ignores this.
    fn on_signal(&self, _handler: SignalHandler) {}

    /// One claim by id.
    async fn get(&self, ns: &Namespace, id: &ClaimId) -> Result<Option<ClaimRecord>, StoreError> {
        let mut found = self.lookup(ns, std::slice::from_ref(id)).await?;
        Ok(found.pop().flatten())
    }
}
