//! The storage boundary, one trait per domain, so that each user needs only the part it uses:
//!
//! - [`ClaimStore`]: claims, lookups by id and by prefix, delete, and sweeping expired claims.
//! - [`RequestStore`]: leased keys with a stored result (begin / complete / release / extend /
//!   peek / forget); the gateway, the tower layer and the operations API need only this.
//! - [`EventStore`]: receipts, the delivery job queue, attempts, replays and listing.
//! - [`StoreLifecycle`]: readiness, closing, and signals from other nodes.
//!
//! [`Stores`] holds one of each, chosen once at start-up; the server passes each part
//! (`Arc<dyn RequestStore>`, …) to whatever needs only that.
//! No driver type crosses these traits. Each trait has its own conformance suite
//! (`idem-conformance`), run on every backend.
//!
//! Invariants every backend keeps (the suites check each):
//! - of any number of concurrent claims of one key, exactly one answers `claimed: true`;
//! - an answer is given only once what it reports is durable;
//! - a claim whose `expires_at` is at or before now is absent for every operation, whether or not
//!   the sweeper has deleted it yet;
//! - of any number of concurrent `begin_request`s of one key, exactly one is `Started`; only the
//!   holder of its lease token can complete, release or extend it; once the lease runs out the
//!   key is free again, and the old token is worthless as soon as another begin takes it;
//! - an accepted event's receipt and first delivery job are committed together; a job is leased
//!   by one worker at a time, a lease takes at most the jobs it asked for, and only its lease
//!   holder can record the attempt's transition or release the job.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::event::{
    Accept, Job, NewEvent, QueueStats, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, ReplayBatch, Transition,
};
use crate::request::{Begin, Forget, LeaseToken, NewRequest, RequestState};
use crate::{
    ClaimId, ClaimOutcome, ClaimRecord, ClaimUpdate, Namespace, NewClaim, Parts, StoreError, Timestamp, UpdateOutcome,
};

/// What [`ClaimStore::claim_then`] calls with the outcome, once it is durable.
pub type ClaimThen = Box<dyn FnOnce(Result<Vec<ClaimOutcome>, StoreError>) + Send>;

/// A task a store may run on its own thread ([`ClaimStore::run_beside`]).
pub type Beside = Pin<Box<dyn Future<Output = ()> + Send>>;

#[async_trait]
pub trait ClaimStore: Send + Sync + 'static {
    /// Claims every item in order; within one call the first of two equal keys wins.
    async fn claim(&self, ns: &Namespace, items: Vec<NewClaim>) -> Result<Vec<ClaimOutcome>, StoreError>;

    /// Reads live claims by id, answering in request order.
    async fn lookup(&self, ns: &Namespace, ids: &[ClaimId]) -> Result<Vec<Option<ClaimRecord>>, StoreError>;

    /// Is there a live claim whose parts begin with `prefix`? Answered from an index.
    async fn prefix_exists(&self, ns: &Namespace, prefix: &Parts) -> Result<bool, StoreError>;

    /// Changes one key if the update's condition holds of it, atomically with every other claim,
    /// update and delete of that key ([`ClaimUpdate::decide`] says what is written).
    async fn update(&self, ns: &Namespace, update: ClaimUpdate) -> Result<UpdateOutcome, StoreError>;

    /// Deletes a claim; `false` when there was no live claim with that id.
    async fn delete(&self, ns: &Namespace, id: &ClaimId) -> Result<bool, StoreError>;

    /// Live claims whose parts begin with `prefix` (at least one part), in the order of their
    /// encoded parts ([`Parts::encode`]), after the claim whose encoded parts are `after` (the last
    /// of the previous page), at most `limit`. Read from an index of the namespace, never a scan
    /// of others.
    async fn list(
        &self,
        ns: &Namespace,
        prefix: &Parts,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<ClaimRecord>, StoreError>;

    /// Deletes up to `limit` live claims whose parts begin with `prefix`; says how many went.
    async fn delete_prefix(&self, ns: &Namespace, prefix: &Parts, limit: usize) -> Result<usize, StoreError>;

    /// Deletes up to `limit` expired claims and says how many went.
    async fn sweep_expired(&self, limit: usize) -> Result<usize, StoreError>;

    /// Stored claims per namespace. The embedded store keeps them counted (live claims, exact to
    /// the second); the SQL stores count the table, expired claims the sweeper has not deleted yet
    /// included (an estimate of what is live): call it now and then, not per request.
    async fn count_claims(&self) -> Result<Vec<(String, u64)>, StoreError>;

    /// Does `count_claims` cost nothing (counts kept as claims change) and stay exact, so that it
    /// can be read at every metrics scrape?
    fn counts_are_live(&self) -> bool {
        false
    }

    /// Claims like [`claim`](Self::claim), but hands the outcome to `then` on whichever thread
    /// learns it, without waking the caller: the embedded store calls it on its writer's thread
    /// right after the sync (or at once, on the caller's thread, when every key is claimed
    /// already), so that a caller who only has to write the answer somewhere (the Redis
    /// listener, onto its client's socket) saves two thread switches a request. `then` must be
    /// quick and must not block. `Err` gives both back untouched: this store cannot do it now (it
    /// does not at all, or its queue is full), and the caller awaits `claim` instead.
    fn claim_then(
        &self,
        _ns: &Namespace,
        items: Vec<NewClaim>,
        then: ClaimThen,
    ) -> Result<(), (Vec<NewClaim>, ClaimThen)> {
        Err((items, then))
    }

    /// Runs `task` on the thread that writes this store, between its writes, as Redis runs its
    /// clients and its `fsync`s on one thread: what the task asks of the store is handed over and
    /// answered without waking another thread, and what its clients send while a write is under
    /// way is read all at once after it. For the Redis listener's connections, whose every command
    /// is short; sockets it holds must be registered on that thread (made inside the task). `Err`
    /// gives it back: this store has no such thread, and the caller runs it where it would have.
    fn run_beside(&self, task: Beside) -> Result<(), Beside> {
        Err(task)
    }

    /// One claim by id.
    async fn get(&self, ns: &Namespace, id: &ClaimId) -> Result<Option<ClaimRecord>, StoreError> {
        let mut found = self.lookup(ns, std::slice::from_ref(id)).await?;
        Ok(found.pop().flatten())
    }
}

#[async_trait]
pub trait RequestStore: Send + Sync + 'static {
    /// Takes a key (atomic insert-if-absent, or take-over of an expired lease or result), or
    /// reports who has it.
    async fn begin_request(&self, request: NewRequest) -> Result<Begin, StoreError>;

    /// Stores the result of a key whose lease `token` is still the key's last (live, or ran out
    /// with no begin taking the key since: [`crate::request`]), kept for `ttl`; answers until when,
    /// as stored (what any later read of the key reports). `None`: the lease was lost (taken over,
    /// released, or swept [`crate::request::ENDED_LEASE_KEPT`] after it ended); nothing was changed.
    async fn complete_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        result: &[u8],
        ttl: Duration,
    ) -> Result<Option<Timestamp>, StoreError>;

    /// Frees a key held by `token` so that a retry executes again. `false`: not held by it.
    async fn release_request(&self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError>;

    /// Moves the end of the lease held by `token` to `lease` from now (a heartbeat for long work),
    /// also one that ran out while no begin took the key since, and answers the end as stored. It
    /// never moves the end earlier: an extension sent long ago (a call given up on a stalled path,
    /// applied when the path came back) may arrive after a newer one. `None`: the lease was lost;
    /// nothing was changed.
    async fn extend_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Option<Timestamp>, StoreError>;

    /// The live state of a key, if any.
    async fn peek_request(&self, id: &ClaimId) -> Result<Option<RequestState>, StoreError>;

    /// Deletes a completed result so that the key is free again; a held key is left alone.
    async fn forget_request(&self, id: &ClaimId) -> Result<Forget, StoreError>;

    /// Deletes up to `limit` keys that hold nothing any more: results past their TTL, and leases
    /// that ended [`crate::request::ENDED_LEASE_KEPT`] ago or longer ([`crate::request::kept_until`]).
    /// A store may leave a row until its begin's lease and `keep` have also passed (PostgreSQL
    /// does: it finds rows by that time): a row past its time reads as absent either way.
    async fn sweep_requests(&self, limit: usize) -> Result<usize, StoreError>;
}

#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// Stores a new receipt together with its first delivery job (one transaction), or reports
    /// the earlier receipt of the same (source, event id).
    async fn accept_event(&self, event: NewEvent) -> Result<Accept, StoreError>;

    /// Leases up to `limit` due jobs for `lease`, oldest due first, skipping `busy_sources` (those
    /// at their concurrency limit, so that one slow handler cannot hold every lease); never more
    /// than `limit`, whatever the database's plan. A job whose lease ran out is due again. A leased
    /// delivery job's receipt is `processing`.
    async fn lease_jobs(&self, limit: usize, lease: Duration, busy_sources: &[String]) -> Result<Vec<Job>, StoreError>;

    /// Ends the leases of `jobs` now, for a worker that holds jobs it will not attempt: each is due
    /// again, as if its lease had run out (a delivery's receipt stays `processing`, as it would
    /// then), its attempt still to come. A job whose lease its token no longer holds is left
    /// alone. Says how many were released.
    async fn release_jobs(&self, jobs: &[Job]) -> Result<usize, StoreError>;

    /// Persists what an attempt of `job` decided ([`crate::event::after_attempt`]), in one
    /// transaction. `false`: the lease was lost and nothing was changed.
    async fn finish_job(&self, job: &Job, transition: Transition) -> Result<bool, StoreError>;

    async fn get_receipt(&self, id: &ReceiptId) -> Result<Option<Receipt>, StoreError>;

    /// Newest first; attempts and bodies are not filled in.
    async fn list_receipts(&self, filter: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError>;

    /// How many receipts match `filter` (its `limit` is ignored).
    async fn count_matching(&self, filter: &ReceiptFilter) -> Result<u64, StoreError>;

    /// Replays a receipt as [`crate::event::replay`] decides. Answers the status it had (`None`: no
    /// such receipt).
    async fn replay_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError>;

    /// One step of a bulk replay, in one transaction: looks at up to `filter.limit` receipts
    /// matching `filter` (newest first, below `filter.before`) and replays each that still has the
    /// filter's status, which must be an ended one. A receipt another node replays at the same
    /// moment is replayed once: the status is checked under the row's lock.
    async fn replay_matching(&self, filter: &ReceiptFilter) -> Result<ReplayBatch, StoreError>;

    /// Marks a dead receipt as handled, as [`crate::event::discard`] decides. Answers the status
    /// it had (`None`: no such receipt).
    async fn discard_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError>;

    /// Retention: deletes up to `limit` receipts that [`crate::event::retention_may_delete`] and
    /// that were last updated before `before`, with their attempts; one with a job still queued
    /// (its result webhook) is kept until the job is done. Says how many went.
    async fn delete_ended_receipts(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError>;

    async fn queue_stats(&self) -> Result<QueueStats, StoreError>;

    /// Receipts per (source, status). A count over the whole table: call it now and then.
    async fn count_receipts(&self) -> Result<Vec<(String, ReceiptStatus, u64)>, StoreError>;
}

/// A change made through another node that this node may be waiting for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSignal {
    /// Delivery jobs were queued.
    JobsQueued,
    /// A leased key was completed or released.
    RequestDone(ClaimId),
}

/// Receives [`StoreSignal`]s.
pub type SignalHandler = Box<dyn Fn(StoreSignal) + Send + Sync>;

#[async_trait]
pub trait StoreLifecycle: Send + Sync + 'static {
    /// Succeeds when the store can be read and written right now.
    async fn check_ready(&self) -> Result<(), StoreError>;

    /// Finishes pending writes and releases the store. Later calls answer `StoreError::Closed`.
    async fn close(&self);

    /// Asks to hear of changes other nodes make (a shared database's notifications). A store that
    /// only one process uses has none to tell, and ignores this.
    fn on_signal(&self, _handler: SignalHandler) {}
}

/// The stores a server runs on, chosen once at start-up, each part as the trait its users need:
/// the embedded store is two engines (the log for claims and keys, SQLite for events), PostgreSQL
/// one database for all four.
#[derive(Clone)]
pub struct Stores {
    pub claims: Arc<dyn ClaimStore>,
    pub requests: Arc<dyn RequestStore>,
    pub events: Arc<dyn EventStore>,
    /// Readiness and closing of all of them, and signals from other nodes.
    pub lifecycle: Arc<dyn StoreLifecycle>,
}

impl Stores {
    /// Every part from one store that has them all.
    pub fn of<S: ClaimStore + RequestStore + EventStore + StoreLifecycle>(store: Arc<S>) -> Self {
        Self { claims: store.clone(), requests: store.clone(), events: store.clone(), lifecycle: store }
    }
}
