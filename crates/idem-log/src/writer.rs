//! The single writer and its group commit.
//!
//! The writer thread takes one command, then every command already waiting (up to a bound), and
//! decides them all in order against the index plus what earlier commands of the same group
//! changed (the group's overlay). Their records go into one buffer, ended by a commit frame,
//! written with one `pwrite` and made durable with one `fdatasync`. Only then is the index updated
//! and is any caller answered. If the write or the sync fails (disk full, I/O error), the file is
//! cut back to where the group began and every command of the group is answered with the error:
//! none was acknowledged, so nothing acknowledged is lost and nothing is half applied.

use std::collections::HashMap;
use std::fs::File;
use std::hash::BuildHasherDefault;
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idem_core::request::{Begin, Forget, LeaseToken, NewRequest};
use idem_core::{ClaimId, ClaimOutcome, ClaimRecord, Namespace, NewClaim, Parts, StoreError, Timestamp};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use crate::index::{ClaimEntry, Expired, RequestEntry, SHARDS, Slot, TagHasher, claim_tag};
use crate::record::{self, ClaimFields, Gone, Loc, NEVER, Record, RequestRec};
use crate::segment;
use crate::{Shared, io_error};

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub enum Command {
    Claim {
        ns: Namespace,
        items: Vec<NewClaim>,
        reply: Reply<Vec<ClaimOutcome>>,
    },
    Delete {
        ns: Namespace,
        id: ClaimId,
        reply: Reply<bool>,
    },
    SweepClaims {
        limit: usize,
        reply: Reply<usize>,
    },
    Begin {
        request: NewRequest,
        reply: Reply<Begin>,
    },
    Complete {
        id: ClaimId,
        token: LeaseToken,
        result: Vec<u8>,
        ttl: Duration,
        reply: Reply<bool>,
    },
    Release {
        id: ClaimId,
        token: LeaseToken,
        reply: Reply<bool>,
    },
    Extend {
        id: ClaimId,
        token: LeaseToken,
        lease: Duration,
        reply: Reply<Option<Timestamp>>,
    },
    Forget {
        id: ClaimId,
        reply: Reply<Forget>,
    },
    SweepRequests {
        limit: usize,
        reply: Reply<usize>,
    },
    /// Compaction: rewrite these records of an old segment at the head, those still live.
    Relocate {
        records: Vec<(Loc, Record)>,
        reply: Reply<usize>,
    },
    /// Records written as they are (moving an older store's claims and results into the log).
    Import {
        records: Vec<Record>,
        reply: Reply<()>,
    },
    /// Compaction: forget a segment whose live records were all relocated.
    Retire {
        segment: u32,
        reply: Reply<()>,
    },
    /// A durable write of nothing: readiness.
    Probe {
        reply: Reply<()>,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

impl Command {
    fn weight(&self) -> usize {
        match self {
            Command::Claim { items, .. } => items.len().max(1),
            Command::Relocate { records, .. } => records.len().max(1),
            Command::Import { records, .. } => records.len().max(1),
            Command::SweepClaims { limit, .. } | Command::SweepRequests { limit, .. } => *limit,
            _ => 1,
        }
    }
}

/// The segment being appended to.
pub struct Active {
    pub number: u32,
    pub file: Arc<File>,
    /// Where its last group ends: the next one is written here.
    pub len: u64,
    /// How far the file is zero-filled ([`segment::preallocate`]); at least `len`.
    pub allocated: u64,
}

pub struct Writer {
    pub shared: Arc<Shared>,
    pub queue: mpsc::Receiver<Command>,
    pub active: Active,
    pub max_group_items: usize,
    pub segment_bytes: u64,
    pub sweep_cursor: usize,
    /// The group buffer, kept between groups so that it is not grown afresh each time.
    pub buf: Vec<u8>,
}

/// What the group knows of a claim's current record.
struct Current {
    entry: ClaimEntry,
    created_at: i64,
    data: Option<Box<RawValue>>,
}

/// A claim key the group has touched: how the index had it, and how the group leaves it.
struct TouchedClaim {
    ns: Rc<str>,
    id: ClaimId,
    before: Option<ClaimEntry>,
    slot: Slot,
    current: Option<Current>,
    /// The encoded parts (the same for every record of a key); empty until known.
    parts: Vec<u8>,
}

impl TouchedClaim {
    /// The current record as the domain has it.
    fn record(&self, ns: &Namespace, current: &Current) -> Result<ClaimRecord, StoreError> {
        let parts = Parts::decode(&self.parts)
            .map_err(|e| StoreError::Internal(format!("claim {}: bad parts: {e}", self.id)))?;
        let expires_at = current.entry.expires_at();
        Ok(ClaimRecord {
            namespace: ns.clone(),
            id: self.id,
            parts,
            data: current.data.clone(),
            created_at: Timestamp(current.created_at),
            expires_at: (expires_at != NEVER).then_some(Timestamp(expires_at)),
        })
    }
}

type TagMap<V> = HashMap<u64, V, BuildHasherDefault<TagHasher>>;

struct TouchedRequest {
    before: Option<RequestEntry>,
    current: Option<RequestEntry>,
    record: Option<RequestRec>,
}

type Pending = Box<dyn FnOnce(Option<&StoreError>) + Send>;

fn pending<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> Pending {
    Box::new(move |failure| {
        let _ = reply.send(match failure {
            Some(e) => Err(e.clone()),
            None => result,
        });
    })
}

/// One group being decided: its buffer and overlay.
struct Group<'a> {
    shared: &'a Shared,
    now: i64,
    segment: u32,
    base: u64,
    buf: Vec<u8>,
    records: u32,
    claims: TagMap<TouchedClaim>,
    /// Touched claims whose tag another touched claim has.
    collided: HashMap<(String, ClaimId), TouchedClaim>,
    requests: HashMap<ClaimId, TouchedRequest>,
    garbage: Vec<(u32, u64)>,
    /// Write (a bare commit frame) even if nothing changed: a readiness probe asked.
    force: bool,
}

impl Writer {
    pub fn run(mut self) {
        let mut commands = Vec::new();
        while let Some(first) = self.queue.blocking_recv() {
            let mut weight = first.weight();
            commands.push(first);
            while weight < self.max_group_items {
                let Ok(next) = self.queue.try_recv() else { break };
                weight += next.weight();
                commands.push(next);
            }
            if let Some(close) = self.commit_group(&mut commands) {
                self.queue.close();
                let _ = close.send(());
                break;
            }
        }
        tracing::debug!("log writer stopped");
    }

    fn commit_group(&mut self, commands: &mut Vec<Command>) -> Option<oneshot::Sender<()>> {
        let started = Instant::now();
        let count = commands.len();
        let shared = Arc::clone(&self.shared);
        let now = shared.clock.now().millis();
        let mut group = Group {
            shared: &shared,
            now,
            segment: self.active.number,
            base: self.active.len,
            buf: std::mem::take(&mut self.buf),
            records: 0,
            claims: TagMap::default(),
            collided: HashMap::new(),
            requests: HashMap::new(),
            garbage: Vec::new(),
            force: false,
        };
        let mut close = None;
        let mut retire = Vec::new();
        let mut done: Vec<Pending> = Vec::with_capacity(count);
        let mut failure = None;
        for command in commands.drain(..) {
            match command {
                Command::Close { reply } => close = Some(reply),
                Command::Retire { segment, reply } => retire.push((segment, reply)),
                command if failure.is_some() => done.push(abandon(command)),
                command => {
                    let (p, error) = group.execute(command, &mut self.sweep_cursor);
                    done.push(p);
                    failure = error;
                }
            }
        }
        let failure = failure.or_else(|| write(&mut self.active, &shared, &mut group).err());
        let items = group.records;
        let mut buf = std::mem::take(&mut group.buf);
        buf.clear();
        if buf.capacity() <= 64 << 20 {
            self.buf = buf;
        }
        match &failure {
            None => group.apply(),
            Some(e) => {
                tracing::warn!(error = %e, commands = count, "store write failed; the group was dropped whole");
                metrics::counter!("idem_store_commit_errors_total").increment(1);
            }
        }
        done.into_iter().for_each(|p| p(failure.as_ref()));
        for (segment, reply) in retire {
            self.shared.segments.remove(segment);
            self.shared.space.lock().unwrap_or_else(|e| e.into_inner()).remove(&segment);
            let _ = reply.send(Ok(()));
        }
        if failure.is_none() && self.active.len >= self.segment_bytes {
            self.roll();
        }
        metrics::histogram!("idem_store_commit_batch_commands").record(count as f64);
        metrics::histogram!("idem_store_commit_batch_items").record(f64::from(items));
        metrics::histogram!("idem_store_commit_seconds").record(started.elapsed().as_secs_f64());
        close
    }

    /// Starts the next segment once this one is full. On failure (disk full) the current one keeps
    /// growing, and the next group tries again.
    fn roll(&mut self) {
        // The segment is sealed without its zeroed tail, durably before the next one exists:
        // only the newest segment may end in zeros.
        let sealed = self.active.file.set_len(self.active.len).and_then(|()| self.active.file.sync_all());
        if let Err(e) = sealed {
            tracing::warn!(error = %e, "could not seal the log segment; it grows on");
            return;
        }
        self.active.allocated = self.active.len;
        let number = self.active.number + 1;
        match segment::create(&self.shared.segments.dir, number) {
            Ok(file) => {
                let file = Arc::new(file);
                self.shared.segments.insert(number, Arc::clone(&file));
                let mut space = self.shared.space.lock().unwrap_or_else(|e| e.into_inner());
                space.entry(number).or_default().size = segment::SEGMENT_HEADER as u64;
                let len = segment::SEGMENT_HEADER as u64;
                self.active = Active { number, file, len, allocated: len };
                self.shared.head.store(number, Ordering::Release);
            }
            Err(e) => tracing::warn!(error = %e, "could not start a new log segment; the current one grows"),
        }
    }
}

/// Writes the group's records and its commit frame, and syncs; on failure cuts the file back.
fn write(active: &mut Active, shared: &Shared, group: &mut Group<'_>) -> Result<(), StoreError> {
    if group.buf.is_empty() && !group.force {
        return Ok(());
    }
    let commit = Record::Commit { count: group.records }.encode_into(&mut group.buf);
    group.garbage.push((active.number, commit as u64));
    let end = active.len + group.buf.len() as u64;
    let result = shared.fault.before_write(&active.file, active.len, &group.buf).and_then(|()| {
        active.file.write_all_at(&group.buf, active.len)?;
        if end > active.allocated {
            active.allocated = segment::preallocate(&active.file, end);
        }
        shared.fault.before_sync()?;
        active.file.sync_data()
    });
    match result {
        Ok(()) => {
            active.len += group.buf.len() as u64;
            let mut space = shared.space.lock().unwrap_or_else(|e| e.into_inner());
            space.entry(active.number).or_default().size = active.len;
            Ok(())
        }
        Err(e) => {
            // Whatever part of the group reached the file is cut off again; should even that
            // fail, the frames left behind have no commit frame and recovery drops them.
            if let Err(cut) = active.file.set_len(active.len) {
                tracing::error!(error = %cut, "could not cut a failed group off the log");
            }
            active.allocated = active.len;
            Err(io_error(&e))
        }
    }
}

impl Group<'_> {
    fn execute(&mut self, command: Command, sweep_cursor: &mut usize) -> (Pending, Option<StoreError>) {
        fn ran<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> (Pending, Option<StoreError>) {
            let error = result.as_ref().err().cloned();
            (pending(reply, result), error)
        }
        match command {
            Command::Claim { ns, items, reply } => {
                let shared_ns: Rc<str> = Rc::from(ns.as_str());
                let result = items.into_iter().map(|item| self.claim(&ns, &shared_ns, item)).collect();
                ran(reply, result)
            }
            Command::Delete { ns, id, reply } => ran(reply, self.delete(&Rc::from(ns.as_str()), &id)),
            Command::SweepClaims { limit, reply } => ran(reply, self.sweep_claims(limit, sweep_cursor)),
            Command::Begin { request, reply } => ran(reply, self.begin(request)),
            Command::Complete { id, token, result, ttl, reply } => ran(reply, self.complete(&id, token, result, ttl)),
            Command::Release { id, token, reply } => ran(reply, self.release(&id, token)),
            Command::Extend { id, token, lease, reply } => ran(reply, self.extend(&id, token, lease)),
            Command::Forget { id, reply } => ran(reply, self.forget(&id)),
            Command::SweepRequests { limit, reply } => ran(reply, self.sweep_requests(limit)),
            Command::Relocate { records, reply } => ran(reply, self.relocate(records)),
            Command::Import { records, reply } => ran(reply, self.import(records)),
            Command::Probe { reply } => {
                // A commit frame with nothing before it: a durable write that changes nothing.
                self.force = true;
                ran(reply, Ok(()))
            }
            command @ (Command::Retire { .. } | Command::Close { .. }) => (abandon(command), None),
        }
    }

    /// Appends a record; answers where it starts and its frame length.
    fn append(&mut self, record: &Record) -> (Loc, u32) {
        let offset = self.base + self.buf.len() as u64;
        let len = record.encode_into(&mut self.buf) as u32;
        self.records += 1;
        (Loc { segment: self.segment, offset: offset as u32 }, len)
    }

    fn dead(&mut self, loc: Loc, len: u32) {
        self.garbage.push((loc.segment, u64::from(len)));
    }

    fn touch_claim(&mut self, ns: &Rc<str>, id: &ClaimId) -> Result<&mut TouchedClaim, StoreError> {
        let tag = claim_tag(ns, id);
        let collided = match self.claims.get(&tag) {
            Some(t) => !(t.id == *id && *t.ns == **ns),
            None => {
                let loaded = load_claim(self.shared, ns, id)?;
                self.claims.insert(tag, loaded);
                false
            }
        };
        if !collided {
            return self.claims.get_mut(&tag).ok_or_else(|| StoreError::Internal("claim overlay lost a key".into()));
        }
        let key = (ns.to_string(), *id);
        if !self.collided.contains_key(&key) {
            let loaded = load_claim(self.shared, ns, id)?;
            self.collided.insert(key.clone(), loaded);
        }
        self.collided.get_mut(&key).ok_or_else(|| StoreError::Internal("claim overlay lost a key".into()))
    }

    fn claim(&mut self, ns: &Namespace, shared_ns: &Rc<str>, item: NewClaim) -> Result<ClaimOutcome, StoreError> {
        let now = self.now;
        let id = item.parts.id();
        let touched = self.touch_claim(shared_ns, &id)?;
        if let Some(current) = touched.current.as_ref().filter(|c| c.entry.is_live(now)) {
            return Ok(ClaimOutcome { claimed: false, record: touched.record(ns, current)? });
        }
        let old = touched.current.take().map(|c| c.entry);
        let parts = match std::mem::take(&mut touched.parts) {
            known if !known.is_empty() => known,
            _ => item.parts.encode(),
        };
        let expires_at = item.ttl.map_or(NEVER, |ttl| Timestamp(now).plus(ttl).millis());
        let fields = ClaimFields {
            ns: shared_ns,
            id: &id,
            parts: &parts,
            data: item.data.as_deref().map(RawValue::get),
            created_at: now,
            expires_at,
        };
        let offset = self.base + self.buf.len() as u64;
        let len = record::encode_claim(&mut self.buf, fields) as u32;
        self.records += 1;
        let entry = ClaimEntry::new(Loc { segment: self.segment, offset: offset as u32 }, len, expires_at);
        if let Some(old) = old {
            self.dead(old.loc(), old.len());
        }
        let record = ClaimRecord {
            namespace: ns.clone(),
            id,
            parts: item.parts,
            data: item.data.clone(),
            created_at: Timestamp(now),
            expires_at: (expires_at != NEVER).then_some(Timestamp(expires_at)),
        };
        let touched = self.touch_claim(shared_ns, &id)?;
        touched.parts = parts;
        touched.current = Some(Current { entry, created_at: now, data: item.data });
        Ok(ClaimOutcome { claimed: true, record })
    }

    fn delete(&mut self, ns: &Rc<str>, id: &ClaimId) -> Result<bool, StoreError> {
        let now = self.now;
        let touched = self.touch_claim(ns, id)?;
        let Some(Current { entry, .. }) = touched.current.take() else { return Ok(false) };
        self.dead(entry.loc(), entry.len());
        if !entry.is_live(now) {
            // Expired: already dead on disk by its own time; nothing to write.
            return Ok(false);
        }
        let gone = Gone { target: entry.loc(), until: entry.expires_at() };
        let (loc, len) = self.append(&Record::ClaimGone { ns: ns.to_string(), id: *id, gone });
        self.dead(loc, len);
        Ok(true)
    }

    /// Forgets up to `limit` expired claims, one shard after another from where the last sweep
    /// stopped. Nothing is written: an expired record is dead on disk by its own time.
    fn sweep_claims(&mut self, limit: usize, cursor: &mut usize) -> Result<usize, StoreError> {
        let mut swept = 0;
        for _ in 0..SHARDS {
            if swept >= limit {
                break;
            }
            for (found, entry) in self.shared.index.expired_claims(*cursor, self.now, limit - swept) {
                let (ns, id) = match found {
                    Expired::Key(ns, id) => (ns, id),
                    Expired::Tag => match self.shared.segments.read(entry.loc())? {
                        (Record::Claim(rec), _) => (rec.ns, rec.id),
                        _ => return Err(StoreError::Internal("a claim entry points at another record".into())),
                    },
                };
                let now = self.now;
                let touched = self.touch_claim(&Rc::from(ns), &id)?;
                if touched.current.as_ref().is_some_and(|c| c.entry == entry && !entry.is_live(now)) {
                    touched.current = None;
                    self.dead(entry.loc(), entry.len());
                    swept += 1;
                }
            }
            if swept < limit {
                *cursor = (*cursor + 1) % SHARDS;
            }
        }
        Ok(swept)
    }

    fn touch_request(&mut self, id: &ClaimId) -> Result<&mut TouchedRequest, StoreError> {
        if !self.requests.contains_key(id) {
            let before = self.shared.index.request(id);
            self.requests.insert(*id, TouchedRequest { before, current: before, record: None });
        }
        self.requests.get_mut(id).ok_or_else(|| StoreError::Internal("request overlay lost a key".into()))
    }

    /// The current record of a leased key, read from the group or from disk.
    fn request_record(&mut self, id: &ClaimId) -> Result<Option<(RequestEntry, RequestRec)>, StoreError> {
        let touched = self.touch_request(id)?;
        let Some(entry) = touched.current else { return Ok(None) };
        if let Some(rec) = &touched.record {
            return Ok(Some((entry, rec.clone())));
        }
        match self.shared.segments.read(entry.loc)? {
            (Record::Request(rec), _) => Ok(Some((entry, rec))),
            _ => Err(StoreError::Internal(format!("request {id}: its entry points at another record"))),
        }
    }

    fn put_request(&mut self, rec: RequestRec) -> Result<RequestEntry, StoreError> {
        let (loc, len) = self.append(&Record::Request(rec.clone()));
        let entry = RequestEntry { loc, len, until: rec.until, completed: rec.completed, token: rec.token };
        let touched = self.touch_request(&rec.id)?;
        let old = touched.current.replace(entry);
        touched.record = Some(rec);
        if let Some(old) = old {
            self.dead(old.loc, old.len);
        }
        Ok(entry)
    }

    /// Removes a leased key; a live one gets a tombstone so that recovery does not bring it back.
    fn remove_request(&mut self, id: &ClaimId) -> Result<(), StoreError> {
        let now = self.now;
        let touched = self.touch_request(id)?;
        touched.record = None;
        let Some(entry) = touched.current.take() else { return Ok(()) };
        self.dead(entry.loc, entry.len);
        if entry.until > now {
            let gone = Gone { target: entry.loc, until: entry.until };
            let (loc, len) = self.append(&Record::RequestGone { id: *id, gone });
            self.dead(loc, len);
        }
        Ok(())
    }

    fn begin(&mut self, request: NewRequest) -> Result<Begin, StoreError> {
        let now = self.now;
        let existing = self.request_record(&request.id)?;
        if let Some((entry, rec)) = existing.as_ref().filter(|(e, _)| e.until > now) {
            let same_fingerprint = rec.fingerprint == request.fingerprint;
            return Ok(if entry.completed {
                Begin::Completed { same_fingerprint, result: rec.body.clone(), expires_at: Timestamp(entry.until) }
            } else {
                Begin::InFlight { same_fingerprint, lease_until: Timestamp(entry.until) }
            });
        }
        let token = LeaseToken::generate();
        let lease_until = Timestamp(now).plus(request.lease);
        self.put_request(RequestRec {
            id: request.id,
            fingerprint: request.fingerprint,
            completed: false,
            token: token.0,
            until: lease_until.millis(),
            body: request.held,
        })?;
        let lease_expired = existing.is_some_and(|(e, _)| !e.completed);
        Ok(Begin::Started { token, lease_until, lease_expired })
    }

    /// The record of a key that `token` holds right now.
    fn held_by(&mut self, id: &ClaimId, token: LeaseToken) -> Result<Option<RequestRec>, StoreError> {
        let now = self.now;
        Ok(self
            .request_record(id)?
            .filter(|(e, _)| !e.completed && e.token == token.0 && e.until > now)
            .map(|(_, rec)| rec))
    }

    fn complete(
        &mut self,
        id: &ClaimId,
        token: LeaseToken,
        result: Vec<u8>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let Some(held) = self.held_by(id, token)? else { return Ok(false) };
        let until = Timestamp(self.now).plus(ttl).millis();
        self.put_request(RequestRec { completed: true, token: [0; 16], until, body: result, ..held })?;
        Ok(true)
    }

    fn release(&mut self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError> {
        let held = self.request_record(id)?.is_some_and(|(e, _)| !e.completed && e.token == token.0);
        if held {
            self.remove_request(id)?;
        }
        Ok(held)
    }

    fn extend(&mut self, id: &ClaimId, token: LeaseToken, lease: Duration) -> Result<Option<Timestamp>, StoreError> {
        let Some(held) = self.held_by(id, token)? else { return Ok(None) };
        let until = Timestamp(self.now).plus(lease);
        self.put_request(RequestRec { until: until.millis(), ..held })?;
        Ok(Some(until))
    }

    fn forget(&mut self, id: &ClaimId) -> Result<Forget, StoreError> {
        let now = self.now;
        let Some((entry, _)) = self.request_record(id)?.filter(|(e, _)| e.until > now) else {
            return Ok(Forget::Absent);
        };
        if !entry.completed {
            return Ok(Forget::InFlight);
        }
        self.remove_request(id)?;
        Ok(Forget::Forgotten)
    }

    fn sweep_requests(&mut self, limit: usize) -> Result<usize, StoreError> {
        let mut swept = 0;
        for shard in 0..SHARDS {
            if swept >= limit {
                break;
            }
            for (id, entry) in self.shared.index.ended_requests(shard, self.now, limit - swept) {
                let touched = self.touch_request(&id)?;
                if touched.current == Some(entry) {
                    touched.current = None;
                    touched.record = None;
                    self.dead(entry.loc, entry.len);
                    swept += 1;
                }
            }
        }
        Ok(swept)
    }

    /// Rewrites at the head those of `records` still live (or, for tombstones, still needed).
    fn relocate(&mut self, records: Vec<(Loc, Record)>) -> Result<usize, StoreError> {
        let mut moved = 0;
        for (old, record) in records {
            match record {
                Record::Claim(rec) => {
                    let now = self.now;
                    let ns: Rc<str> = Rc::from(rec.ns.as_str());
                    let touched = self.touch_claim(&ns, &rec.id)?;
                    let Some(entry) =
                        touched.current.as_ref().map(|c| c.entry).filter(|e| e.loc() == old && e.is_live(now))
                    else {
                        continue;
                    };
                    let (loc, len) = self.append(&Record::Claim(rec.clone()));
                    self.dead(entry.loc(), entry.len());
                    if let Some(current) = self.touch_claim(&ns, &rec.id)?.current.as_mut() {
                        current.entry = ClaimEntry::new(loc, len, rec.expires_at);
                    }
                }
                Record::Request(rec) => {
                    let now = self.now;
                    let touched = self.touch_request(&rec.id)?;
                    if touched.current.is_none_or(|e| e.loc != old || e.until <= now) {
                        continue;
                    }
                    self.put_request(rec)?;
                }
                Record::ClaimGone { gone, .. } | Record::RequestGone { gone, .. } => {
                    if !(self.shared.segments.contains(gone.target.segment) && gone.until > self.now) {
                        continue;
                    }
                    let (loc, len) = self.append(&record);
                    self.dead(loc, len);
                }
                Record::Commit { .. } => continue,
            }
            moved += 1;
        }
        Ok(moved)
    }

    fn import(&mut self, records: Vec<Record>) -> Result<(), StoreError> {
        for record in records {
            match record {
                Record::Claim(rec) => {
                    let ns: Rc<str> = Rc::from(rec.ns.as_str());
                    let old = self.touch_claim(&ns, &rec.id)?.current.take();
                    if let Some(old) = old {
                        self.dead(old.entry.loc(), old.entry.len());
                    }
                    let (loc, len) = self.append(&Record::Claim(rec.clone()));
                    let data = rec.data.map(RawValue::from_string).transpose();
                    let data = data.map_err(|e| StoreError::Internal(format!("claim {}: bad data: {e}", rec.id)))?;
                    let touched = self.touch_claim(&ns, &rec.id)?;
                    touched.parts = rec.parts;
                    let entry = ClaimEntry::new(loc, len, rec.expires_at);
                    touched.current = Some(Current { entry, created_at: rec.created_at, data });
                }
                Record::Request(rec) => {
                    self.put_request(rec)?;
                }
                _ => return Err(StoreError::Internal("only claims and keys are imported".into())),
            }
        }
        Ok(())
    }

    /// After the group is durable: the index and the space accounting take its changes.
    fn apply(self) {
        let index = &self.shared.index;
        for touched in self.claims.into_values().chain(self.collided.into_values()) {
            let after = touched.current.map(|c| c.entry);
            index.update_claim(touched.slot, &touched.ns, &touched.id, &touched.parts, touched.before, after);
            match (touched.before, after) {
                (None, Some(_)) => self.shared.count_namespace(&touched.ns, 1),
                (Some(_), None) => self.shared.count_namespace(&touched.ns, -1),
                _ => {}
            }
        }
        for (id, touched) in self.requests {
            match touched.current {
                Some(entry) if touched.before != Some(entry) => index.set_request(&id, entry),
                None if touched.before.is_some() => index.remove_request(&id),
                _ => {}
            }
        }
        let mut space = self.shared.space.lock().unwrap_or_else(|e| e.into_inner());
        for (segment, bytes) in self.garbage {
            space.entry(segment).or_default().garbage += bytes;
        }
    }
}

/// A claim as the index and the disk have it, for the overlay.
fn load_claim(shared: &Shared, ns: &Rc<str>, id: &ClaimId) -> Result<TouchedClaim, StoreError> {
    let found = shared.find_claim(ns, id)?;
    Ok(match found.hit {
        Some((slot, entry, rec)) => {
            let data = rec.data.map(RawValue::from_string).transpose();
            let data = data.map_err(|e| StoreError::Internal(format!("claim {id}: bad data: {e}")))?;
            TouchedClaim {
                ns: Rc::clone(ns),
                id: *id,
                before: Some(entry),
                slot,
                current: Some(Current { entry, created_at: rec.created_at, data }),
                parts: rec.parts,
            }
        }
        None => TouchedClaim {
            ns: Rc::clone(ns),
            id: *id,
            before: None,
            slot: if found.main_taken { Slot::Overflow } else { Slot::Main },
            current: None,
            parts: Vec::new(),
        },
    })
}

/// A command left undecided because its group already failed.
fn abandon(command: Command) -> Pending {
    fn closed<T>() -> Result<T, StoreError> {
        Err(StoreError::Closed)
    }
    match command {
        Command::Claim { reply, .. } => pending(reply, closed()),
        Command::Delete { reply, .. } | Command::Release { reply, .. } | Command::Complete { reply, .. } => {
            pending(reply, closed())
        }
        Command::SweepClaims { reply, .. } | Command::SweepRequests { reply, .. } | Command::Relocate { reply, .. } => {
            pending(reply, closed())
        }
        Command::Begin { reply, .. } => pending(reply, closed()),
        Command::Extend { reply, .. } => pending(reply, closed()),
        Command::Forget { reply, .. } => pending(reply, closed()),
        Command::Retire { reply, .. } | Command::Probe { reply } | Command::Import { reply, .. } => {
            pending(reply, closed())
        }
        Command::Close { reply } => {
            let _ = reply.send(());
            Box::new(|_| ())
        }
    }
}
