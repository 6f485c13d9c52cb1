//! The embedded engine for claims and leased keys: an append-only log with an in-memory index.
//!
//! - **Writes** go to one writer thread ([`writer`]) that gathers every waiting command into one
//!   group, appends the group's records and a commit frame to the newest segment file with one
//!   `pwrite`, and makes them durable with one `fdatasync` before anyone is answered.
//! - **Reads** find a record's place in the index ([`index`]) and read it with `pread` (from the OS
//!   page cache, usually); they never wait for the writer.
//! - **Start-up** replays every segment the [`manifest`] lists; [`verify`] tells the group a crash
//!   cut short at the end (dropped: never acknowledged) from damage (acknowledged records missing:
//!   start-up stops, naming file, offset and records lost; [`repair`] fixes what it can).
//! - **Compaction** ([`compact`]) rewrites the live records of a segment that is more than half
//!   garbage at the head of the log, then retires and deletes it, without holding the writer for
//!   more than one group at a time.
//!
//! Every file operation goes through a [`disk::Disk`], so that tests run the engine on a simulated
//! disk ([`sim`]) that loses, tears and reorders what was not synced. A lock file keeps a second
//! process out of the directory. Events stay in SQLite; the server combines the two.

mod backup;
mod compact;
mod counts;
pub mod disk;
mod index;
mod manifest;
mod record;
mod recover;
mod repair;
mod segment;
pub mod sim;
mod verify;
mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use idem_core::request::{
    Begin, Decision, Forget, Found as KeyFound, LeaseToken, NewRequest, RequestState, decide_begin,
};
use idem_core::{
    ClaimId, ClaimOutcome, ClaimRecord, ClaimStore, Clock, Namespace, NewClaim, Parts, RequestStore, StoreError,
    StoreLifecycle, Timestamp,
};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

pub use backup::{BackupReport, backup};
pub use counts::counts_at;
pub use recover::{CheckReport, check};
pub use repair::{RepairReport, repair};
pub use segment::PREALLOCATE;
pub use verify::{Damage, Fix, Torn};

use counts::Counts;
use disk::{Disk, LockGuard, LockKind, OsDisk};
use index::{ClaimEntry, Index, Slot, claim_tag, prefix_tag};
use record::{ClaimRec, NEVER, Record, RequestRec};
use segment::Read;
use writer::Command;

/// How the engine is tuned; the defaults suit a small server.
#[derive(Clone)]
pub struct LogOptions {
    /// A segment is closed and a new one started once it is this long.
    pub segment_bytes: u64,
    /// Commands' items gathered into one group at most.
    pub max_group_items: usize,
    /// How often the compactor looks for a segment worth compacting.
    pub compact_every: Duration,
    /// How often the manifest's mark is moved up to what is acknowledged (when it moved at all);
    /// `None`: only at a clean close and when asked ([`LogStore::mark`]).
    pub mark_every: Option<Duration>,
    /// How far the newest segment is kept zero-filled beyond its last group (at most
    /// [`PREALLOCATE`], the default; 0: not at all).
    pub preallocate: u64,
    /// The file system: the real one, or a simulated disk in tests.
    pub disk: Arc<dyn Disk>,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 64 << 20,
            max_group_items: 20_000,
            compact_every: Duration::from_secs(1),
            mark_every: Some(Duration::from_secs(2)),
            preallocate: PREALLOCATE,
            disk: OsDisk::shared(),
        }
    }
}

/// Why the engine could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot use log dir {dir}: {source}")]
    Dir { dir: PathBuf, source: std::io::Error },
    #[error(
        "log dir {0} is in use by another idem process (its lock file is held); stop that process or choose another --data-dir"
    )]
    Locked(PathBuf),
    #[error(
        "the log is damaged, so idem will not start: {}. `idem check` reports it; `idem repair` shows what it would drop and with --yes keeps every intact record; or restore the data dir from a backup",
        list_damage(.0)
    )]
    Damaged(Vec<Damage>),
}

fn list_damage(damage: &[Damage]) -> String {
    damage.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// A segment's bytes, and how many of them are dead (superseded, deleted or expired records,
/// tombstones and commit frames).
#[derive(Debug, Default, Clone, Copy)]
pub struct Space {
    pub size: u64,
    pub garbage: u64,
}

/// What the writer, the compactor and readers share.
pub struct Shared {
    index: Index,
    segments: segment::Segments,
    clock: Arc<dyn Clock>,
    space: Mutex<BTreeMap<u32, Space>>,
    /// The segment being appended to; older ones are sealed.
    head: AtomicU32,
    /// Live claims per namespace.
    counts: Mutex<Counts>,
    /// Retired segments whose files could not be deleted yet (the compactor tries again).
    doomed: Mutex<Vec<u32>>,
    /// [`LogOptions::preallocate`].
    preallocate: u64,
    /// The last fencing number handed to a begin (see [`Shared::next_fence`]).
    last_fence: std::sync::atomic::AtomicU64,
}

/// What looking a claim up found.
pub struct Found {
    hit: Option<(Slot, ClaimEntry, ClaimRec)>,
    /// The tag's place in the main map belongs to another key (a new claim goes to the overflow).
    main_taken: bool,
}

impl Shared {
    /// A fencing number for a begin at `now` (milliseconds): greater than every one handed out
    /// since start-up and every one the log holds, and never below the clock in microseconds, so
    /// that it keeps growing across restarts too (where a key's records may have been swept).
    fn next_fence(&self, now: i64) -> u64 {
        use std::sync::atomic::Ordering;
        let floor = u64::try_from(now).unwrap_or(0).saturating_mul(1000);
        let mut last = self.last_fence.load(Ordering::Relaxed);
        loop {
            let next = floor.max(last + 1);
            match self.last_fence.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    /// The claim record an entry points at; `None` if its segment was retired meanwhile (the
    /// caller looks in the index again: the entry has moved or gone).
    fn read_claim(&self, entry: ClaimEntry) -> Result<Option<ClaimRec>, StoreError> {
        match self.segments.read(entry.loc())? {
            Read::Found(Record::Claim(rec), _) => Ok(Some(rec)),
            Read::Found(..) => Err(StoreError::Internal("a claim entry points at another kind of record".into())),
            Read::Gone => Ok(None),
        }
    }

    /// The index's entry for a claim, live or not, with its record.
    fn find_claim(&self, ns: &str, id: &ClaimId) -> Result<Found, StoreError> {
        for _ in 0..RETRIES {
            if let Some(found) = self.try_find_claim(ns, id)? {
                return Ok(found);
            }
        }
        Err(gone_again())
    }

    /// `None`: an entry's segment was retired while reading it.
    fn try_find_claim(&self, ns: &str, id: &ClaimId) -> Result<Option<Found>, StoreError> {
        let mut main_taken = false;
        if let Some(entry) = self.index.claim_by_tag(claim_tag(ns, id)) {
            let Some(rec) = self.read_claim(entry)? else { return Ok(None) };
            if rec.ns == ns && rec.id == *id {
                return Ok(Some(Found { hit: Some((Slot::Main, entry, rec)), main_taken: true }));
            }
            main_taken = true;
        }
        let hit = match self.index.claim_in_overflow(ns, id) {
            Some(entry) => match self.read_claim(entry)? {
                Some(rec) => Some((Slot::Overflow, entry, rec)),
                None => return Ok(None),
            },
            None => None,
        };
        Ok(Some(Found { hit, main_taken }))
    }

    /// A live claim's record. An expired entry is not even read.
    fn live_claim(&self, ns: &str, id: &ClaimId, now: i64) -> Result<Option<ClaimRec>, StoreError> {
        'again: for _ in 0..RETRIES {
            if let Some(entry) = self.index.claim_by_tag(claim_tag(ns, id)).filter(|e| e.is_live(now)) {
                let Some(rec) = self.read_claim(entry)? else { continue 'again };
                if rec.ns == ns && rec.id == *id {
                    return Ok(Some(rec));
                }
            }
            return match self.index.claim_in_overflow(ns, id).filter(|e| e.is_live(now)) {
                Some(entry) => match self.read_claim(entry)? {
                    Some(rec) => Ok(Some(rec)),
                    None => continue 'again,
                },
                None => Ok(None),
            };
        }
        Err(gone_again())
    }

    fn prefix_exists(&self, ns: &str, prefix: &Parts, now: i64) -> Result<bool, StoreError> {
        if self.live_claim(ns, &prefix.id(), now)?.is_some() {
            return Ok(true);
        }
        let encoded = prefix.encode();
        let under = |rec: &ClaimRec| rec.ns == ns && rec.parts.starts_with(&encoded);
        let tag = prefix_tag(ns, &encoded);
        // The first few live members nearly always settle it; all of them only if tags collided.
        for want in [16, usize::MAX] {
            let members = match self.index.prefix(tag, now, want) {
                index::PrefixAnswer::Yes => return Ok(true),
                index::PrefixAnswer::Candidates(members) => members,
            };
            for entry in &members {
                // A member whose segment was retired meanwhile was expired (live ones move first).
                if self.read_claim(*entry)?.is_some_and(|rec| under(&rec)) {
                    return Ok(true);
                }
            }
            if members.len() < want {
                break;
            }
        }
        for entry in self.index.live_overflow(now) {
            if self.read_claim(entry)?.is_some_and(|rec| under(&rec)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Live claims under `prefix` (at least one part), in the order of their encoded parts, after
    /// `after`, at most `limit`. The index lists every claim under its first part: those are read
    /// and kept when they are of this namespace and under the whole prefix; with the claim whose
    /// parts are the prefix itself and the (tiny) overflow. A page reads every claim under the
    /// prefix's first part.
    fn list(
        &self,
        ns: &str,
        prefix: &Parts,
        after: Option<&[u8]>,
        limit: usize,
        now: i64,
    ) -> Result<Vec<ClaimRec>, StoreError> {
        let encoded = prefix.encode();
        let first = match encoded.iter().position(|b| *b == 0) {
            Some(end) => &encoded[..=end],
            None => return Ok(Vec::new()),
        };
        let mut found: Vec<ClaimRec> = Vec::new();
        if let Some(exact) = self.live_claim(ns, &prefix.id(), now)? {
            found.push(exact);
        }
        let members = self.index.under_first_part(prefix_tag(ns, first), now);
        for entry in members.into_iter().chain(self.index.live_overflow(now)) {
            // A member whose segment was retired meanwhile was expired (live ones move first).
            if let Some(rec) = self.read_claim(entry)? {
                found.push(rec);
            }
        }
        found.retain(|rec| {
            rec.ns == ns && rec.parts.starts_with(&encoded) && after.is_none_or(|after| rec.parts.as_slice() > after)
        });
        found.sort_by(|a, b| a.parts.cmp(&b.parts));
        found.dedup_by(|a, b| a.id == b.id);
        found.truncate(limit);
        Ok(found)
    }

    /// Every item's live claim, or `None` as soon as one has none.
    fn all_claimed(&self, ns: &Namespace, items: &[NewClaim]) -> Result<Option<Vec<ClaimOutcome>>, StoreError> {
        let now = self.clock.now().millis();
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            match self.live_claim(ns.as_str(), &item.parts.id(), now)? {
                Some(rec) => {
                    let claimed = idem_core::ClientToken::same(rec.client.map(idem_core::ClientToken), item.client);
                    out.push(ClaimOutcome { claimed, record: claim_record(ns, &rec)? });
                }
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// A leased key's live entry and record, as of `now`.
    fn live_request(&self, id: &ClaimId, now: i64) -> Result<Option<(index::RequestEntry, RequestRec)>, StoreError> {
        for _ in 0..RETRIES {
            let Some(entry) = self.index.request(id).filter(|e| e.until > now) else { return Ok(None) };
            match self.segments.read(entry.loc)? {
                Read::Found(Record::Request(rec), _) => return Ok(Some((entry, rec))),
                Read::Found(..) => {
                    return Err(StoreError::Internal(format!("request {id}: its entry points at another record")));
                }
                Read::Gone => continue,
            }
        }
        Err(gone_again())
    }

    /// What a begin finds when the key is held or completed; `None` when it is free.
    fn held_or_completed(&self, request: &NewRequest) -> Result<Option<Begin>, StoreError> {
        let now = self.clock.now().millis();
        let found = self.live_request(&request.id, now)?.map(|(entry, rec)| found(&entry, rec));
        Ok(match decide_begin(found, &request.fingerprint, request.client, Timestamp(now)) {
            Decision::Answer(answer) => Some(answer),
            Decision::Take { .. } => None,
        })
    }
}

/// A leased key's record as a begin sees it.
fn found(entry: &index::RequestEntry, rec: RequestRec) -> KeyFound {
    let until = Timestamp(entry.until);
    if entry.completed {
        KeyFound::Completed { fingerprint: rec.fingerprint, until, result: rec.body }
    } else {
        KeyFound::Held {
            fingerprint: rec.fingerprint,
            until,
            token: idem_core::request::LeaseToken(rec.token),
            client: rec.client.map(idem_core::ClientToken),
            fence: rec.fence,
        }
    }
}

/// How often a reader looks again when the segment it was reading from was retired under it.
const RETRIES: usize = 8;

fn gone_again() -> StoreError {
    StoreError::Unavailable("the log was compacting under this read; try again".into())
}

/// A stored claim as the domain has it.
fn claim_record(ns: &Namespace, rec: &ClaimRec) -> Result<ClaimRecord, StoreError> {
    let parts =
        Parts::decode(&rec.parts).map_err(|e| StoreError::Internal(format!("claim {}: bad parts: {e}", rec.id)))?;
    let data = rec
        .data
        .clone()
        .map(RawValue::from_string)
        .transpose()
        .map_err(|e| StoreError::Internal(format!("claim {}: bad data: {e}", rec.id)))?;
    Ok(ClaimRecord {
        namespace: ns.clone(),
        id: rec.id,
        parts,
        data,
        created_at: Timestamp(rec.created_at),
        expires_at: (rec.expires_at != NEVER).then_some(Timestamp(rec.expires_at)),
    })
}

/// A failed write or sync: the store cannot write right now (disk full, read-only, I/O error);
/// nothing was changed, and the caller may retry.
fn io_error(e: &std::io::Error) -> StoreError {
    StoreError::Unavailable(format!("log write failed: {e}"))
}

/// Free space below which the store is not ready.
pub const MIN_FREE_BYTES: u64 = 256 * 1024;

pub struct LogStore {
    commands: mpsc::Sender<Command>,
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
        let writer = std::thread::Builder::new().name("idem-log-writer".into()).spawn(move || writer.run());
        let writer = writer.map_err(dir_error)?;
        let compactor = compact::Compactor::spawn(Arc::clone(&shared), commands.clone(), &options);
        let compactor = compactor.map_err(dir_error)?;
        Ok(Self {
            commands,
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

#[async_trait]
impl ClaimStore for LogStore {
    async fn claim(&self, ns: &Namespace, items: Vec<NewClaim>) -> Result<Vec<ClaimOutcome>, StoreError> {
        // Keys all claimed already are answered from what is durable, without the writer: nothing
        // but the writer removes a live claim, so the answer is the one it would give now.
        if let Some(existing) = self.shared.all_claimed(ns, &items)? {
            return Ok(existing);
        }
        let ns = ns.clone();
        self.send(|reply| Command::Claim { ns, items, reply }).await
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
            RequestState::InFlight { fingerprint: rec.fingerprint, lease_until: Timestamp(rec.until), held: rec.body }
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
