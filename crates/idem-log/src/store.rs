//! The store the server holds: opening a log directory (its lock, recovery, the writer thread
//! and the compactor), the claim, key and lifecycle traits over the writer's commands and the
//! shared read path, and the tools (import, marks, compaction on demand).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use idem_core::request::{Begin, Forget, LeaseToken, NewRequest, RequestState};
use idem_core::{
    Beside, ClaimId, ClaimOutcome, ClaimRecord, ClaimStore, ClaimThen, ClaimUpdate, Clock, Namespace, NewClaim, Parts,
    RequestStore, StoreError, StoreLifecycle, Timestamp, UpdateOutcome,
};
use tokio::sync::{mpsc, oneshot};

use crate::disk::{self, LockGuard, LockKind};
use crate::record::{self, ClaimRec, NEVER, Record};
use crate::shared::{Shared, claim_record};
use crate::writer::{ClaimReply, Command};
use crate::{LogOptions, MIN_FREE_BYTES, OpenError, Space, compact, recover, writer};

pub struct LogStore {
    commands: mpsc::Sender<Command>,
    /// The writer thread's runtime ([`ClaimStore::run_beside`]).
    beside: tokio::runtime::Handle,
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    compactor: Mutex<Option<compact::Compactor>>,
    _lock: LockGuard,
}

impl LogStore {
    /// The directory's lock file.
    pub const LOCK_FILE: &'static str = "lock";

    /// Opens (creating if needed) the log in `dir`: replays it, then starts the writer and the
    /// compactor.
    pub fn open(dir: &Path, clock: Arc<dyn Clock>, options: LogOptions) -> Result<Self, OpenError> {
        let dir_error = |source| OpenError::Dir { dir: dir.to_owned(), source };
        let disk = Arc::clone(&options.disk);
        // A new directory's entry is data too: without syncing it a power cut could take the
        // whole log away after its first writes were acknowledged.
        disk::create_dir_durable(disk.as_ref(), dir).map_err(dir_error)?;
        let lock = match disk.lock(&dir.join(Self::LOCK_FILE), LockKind::Exclusive, false) {
            Ok(Some(lock)) => lock,
            Ok(None) => return Err(OpenError::Locked(dir.to_owned())),
            Err(source) => return Err(dir_error(source)),
        };
        let started = std::time::Instant::now();
        let (shared, active, manifest) = recover::open(dir, clock, &options)?;
        let shared = Arc::new(shared);
        let (claims, keys) = shared.index.counts();
        tracing::info!(
            dir = %dir.display(), claims, keys, seconds = started.elapsed().as_secs_f64(),
            "log replayed"
        );
        let (commands, queue) = mpsc::channel(8192);
        let writer = writer::Writer {
            shared: Arc::clone(&shared),
            queue,
            active,
            manifest,
            manifest_unsynced: false,
            max_group_items: options.max_group_items,
            segment_bytes: options.segment_bytes,
            sweep_cursor: 0,
            buf: Vec::new(),
        };
        let (writer, beside) = spawn_writer(writer).map_err(dir_error)?;
        let compactor = compact::Compactor::spawn(Arc::clone(&shared), commands.clone(), &options);
        let compactor = compactor.map_err(dir_error)?;
        Ok(Self {
            commands,
            beside,
            shared,
            writer: Mutex::new(Some(writer)),
            compactor: Mutex::new(Some(compactor)),
            _lock: lock,
        })
    }

    async fn send<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Command,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(make(tx)).await.map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Writes claims and completed keys' results as they are, keeping their times: how the claims
    /// and keys of an older store move into the log. Results are `(id, fingerprint, result,
    /// expires_at)`.
    pub async fn import(
        &self,
        claims: Vec<ClaimRecord>,
        results: Vec<(ClaimId, [u8; 32], Vec<u8>, Timestamp)>,
    ) -> Result<(), StoreError> {
        let mut records: Vec<Record> = claims
            .into_iter()
            .map(|c| {
                Record::Claim(ClaimRec {
                    ns: c.namespace.as_str().to_owned(),
                    id: c.id,
                    parts: c.parts.encode(),
                    data: c.data.map(|d| d.get().to_owned()),
                    created_at: c.created_at.millis(),
                    expires_at: c.expires_at.map_or(NEVER, Timestamp::millis),
                    client: None,
                })
            })
            .collect();
        records.extend(results.into_iter().map(|(id, fingerprint, body, until)| {
            Record::Request(record::RequestRec {
                id,
                fingerprint,
                completed: true,
                token: [0; 16],
                until: until.millis(),
                body,
                client: None,
                fence: 0,
            })
        }));
        self.send(|reply| Command::Import { records, reply }).await
    }

    /// Each segment's size and dead bytes.
    pub fn space(&self) -> BTreeMap<u32, Space> {
        self.shared.space.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Moves the manifest's mark up to everything acknowledged so far (the writer does so by
    /// itself every `mark_every`, and at a clean close).
    pub async fn mark(&self) -> Result<(), StoreError> {
        self.send(|reply| Command::Mark { reply: Some(reply) }).await
    }

    /// Compacts every sealed segment that is more than half dead now, instead of waiting for the
    /// compactor's next look.
    pub async fn compact_now(&self) -> Result<usize, StoreError> {
        let shared = Arc::clone(&self.shared);
        let commands = self.commands.clone();
        tokio::task::spawn_blocking(move || compact::compact_all(&shared, &commands))
            .await
            .map_err(|e| StoreError::Internal(e.to_string()))?
    }
}

/// Starts the writer on a thread of its own, with a runtime of its own for the tasks run beside it
/// ([`ClaimStore::run_beside`]), made and dropped on that thread: a runtime may not be dropped where
/// the caller may be, in a task.
fn spawn_writer(writer: writer::Writer) -> std::io::Result<(JoinHandle<()>, tokio::runtime::Handle)> {
    let (started, beside) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::Builder::new().name("idem-log-writer".into()).spawn(move || {
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => {
                let _ = started.send(Ok(runtime.handle().clone()));
                runtime.block_on(writer.run());
            }
            Err(e) => drop(started.send(Err(e))),
        }
    })?;
    let beside = beside.recv().unwrap_or_else(|_| Err(std::io::Error::other("the log writer's thread ended")))?;
    Ok((thread, beside))
}

#[async_trait]
impl ClaimStore for LogStore {
    async fn claim(&self, ns: &Namespace, items: Vec<NewClaim>) -> Result<Vec<ClaimOutcome>, StoreError> {
        // Keys all claimed already are answered from what is durable, without the writer: nothing
        // but the writer removes a live claim, so the answer is the one it would give now.
        let ids: Vec<ClaimId> = items.iter().map(|item| item.parts.id()).collect();
        if let Some(existing) = self.shared.all_claimed(ns, &items, &ids)? {
            return Ok(existing);
        }
        let ns = ns.clone();
        self.send(|reply| Command::Claim { ns, items, ids, reply: ClaimReply::Wait(reply) }).await
    }

    fn claim_then(
        &self,
        ns: &Namespace,
        items: Vec<NewClaim>,
        then: ClaimThen,
    ) -> Result<(), (Vec<NewClaim>, ClaimThen)> {
        let ids: Vec<ClaimId> = items.iter().map(|item| item.parts.id()).collect();
        if let Some(answer) = self.shared.all_claimed(ns, &items, &ids).transpose() {
            then(answer);
            return Ok(());
        }
        match self.commands.try_reserve() {
            Ok(permit) => permit.send(Command::Claim { ns: ns.clone(), items, ids, reply: ClaimReply::Then(then) }),
            Err(mpsc::error::TrySendError::Full(())) => return Err((items, then)),
            // The writer has stopped: answered as `claim` answers then.
            Err(mpsc::error::TrySendError::Closed(())) => then(Err(StoreError::Closed)),
        }
        Ok(())
    }

    /// Tasks run between the writer's groups; those still there when the store closes are dropped.
    fn run_beside(&self, task: Beside) -> Result<(), Beside> {
        drop(self.beside.spawn(task));
        Ok(())
    }

    async fn lookup(&self, ns: &Namespace, ids: &[ClaimId]) -> Result<Vec<Option<ClaimRecord>>, StoreError> {
        let now = self.shared.clock.now().millis();
        ids.iter()
            .map(|id| self.shared.live_claim(ns.as_str(), id, now)?.map(|rec| claim_record(ns, &rec)).transpose())
            .collect()
    }

    async fn prefix_exists(&self, ns: &Namespace, prefix: &Parts) -> Result<bool, StoreError> {
        self.shared.prefix_exists(ns.as_str(), prefix, self.shared.clock.now().millis())
    }

    async fn update(&self, ns: &Namespace, update: ClaimUpdate) -> Result<UpdateOutcome, StoreError> {
        let (ns, id) = (ns.clone(), update.parts.id());
        self.send(|reply| Command::Update { ns, id, update, reply }).await
    }

    async fn delete(&self, ns: &Namespace, id: &ClaimId) -> Result<bool, StoreError> {
        let (ns, id) = (ns.clone(), *id);
        self.send(|reply| Command::Delete { ns, id, reply }).await
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize, StoreError> {
        self.send(|reply| Command::SweepClaims { limit, reply }).await
    }

    async fn list(
        &self,
        ns: &Namespace,
        prefix: &Parts,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<ClaimRecord>, StoreError> {
        let now = self.shared.clock.now().millis();
        let found = self.shared.list(ns.as_str(), prefix, after, limit, now)?;
        found.iter().map(|rec| claim_record(ns, rec)).collect()
    }

    async fn delete_prefix(&self, ns: &Namespace, prefix: &Parts, limit: usize) -> Result<usize, StoreError> {
        let now = self.shared.clock.now().millis();
        let ids: Vec<ClaimId> = self.shared.list(ns.as_str(), prefix, None, limit, now)?.iter().map(|r| r.id).collect();
        if ids.is_empty() {
            return Ok(0);
        }
        let ns = ns.clone();
        self.send(|reply| Command::DeleteMany { ns, ids, reply }).await
    }

    /// Live claims per namespace, kept as claims come and go (no scan): exact to the second.
    async fn count_claims(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let now = self.shared.clock.now().millis();
        Ok(self.shared.counts.lock().unwrap_or_else(|e| e.into_inner()).live(now))
    }

    fn counts_are_live(&self) -> bool {
        true
    }
}

#[async_trait]
impl RequestStore for LogStore {
    async fn begin_request(&self, request: NewRequest) -> Result<Begin, StoreError> {
        // A key held or completed is answered from what is durable, without the writer (a replay
        // costs a hash probe and a read); only taking a free key needs the writer.
        if let Some(found) = self.shared.held_or_completed(&request)? {
            return Ok(found);
        }
        self.send(|reply| Command::Begin { request, reply }).await
    }

    async fn complete_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        result: &[u8],
        ttl: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        let (id, result) = (*id, result.to_vec());
        self.send(|reply| Command::Complete { id, token, result, ttl, reply }).await
    }

    async fn release_request(&self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError> {
        let id = *id;
        self.send(|reply| Command::Release { id, token, reply }).await
    }

    async fn extend_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        let id = *id;
        self.send(|reply| Command::Extend { id, token, lease, reply }).await
    }

    async fn peek_request(&self, id: &ClaimId) -> Result<Option<RequestState>, StoreError> {
        let now = self.shared.clock.now().millis();
        let Some((entry, rec)) = self.shared.live_request(id, now)? else { return Ok(None) };
        Ok(Some(if entry.completed {
            RequestState::Completed { fingerprint: rec.fingerprint, result: rec.body, expires_at: Timestamp(rec.until) }
        } else {
            RequestState::Held { fingerprint: rec.fingerprint, lease_until: Timestamp(rec.until), held: rec.body }
        }))
    }

    async fn forget_request(&self, id: &ClaimId) -> Result<Forget, StoreError> {
        let id = *id;
        self.send(|reply| Command::Forget { id, reply }).await
    }

    async fn sweep_requests(&self, limit: usize) -> Result<usize, StoreError> {
        self.send(|reply| Command::SweepRequests { limit, reply }).await
    }
}

#[async_trait]
impl StoreLifecycle for LogStore {
    /// Ready when the log's file system has at least [`MIN_FREE_BYTES`] free and a durable write
    /// goes through. (A bare probe write is a few bytes, which a nearly full disk still takes while
    /// every real write fails.)
    async fn check_ready(&self) -> Result<(), StoreError> {
        if let Some(free) = self.shared.segments.disk.free_bytes(&self.shared.segments.dir)
            && free < MIN_FREE_BYTES
        {
            return Err(StoreError::Unavailable(format!("the log's disk is full: {free} bytes free")));
        }
        self.send(|reply| Command::Probe { reply }).await
    }

    async fn close(&self) {
        let compactor = self.compactor.lock().ok().and_then(|mut c| c.take());
        let _ = tokio::task::spawn_blocking(move || drop(compactor)).await;
        let handle = self.writer.lock().ok().and_then(|mut w| w.take());
        let Some(handle) = handle else { return };
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Close { reply: tx }).await.is_ok() {
            let _ = rx.await;
        }
        let _ = tokio::task::spawn_blocking(move || handle.join()).await;
    }
}
