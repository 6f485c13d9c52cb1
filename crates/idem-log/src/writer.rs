//! The single writer and its group commit.
//!
//! The writer thread takes one command, then every command already waiting (up to a bound), and
//! decides them all in order against the index plus what earlier commands of the same group
//! changed (the group's overlay). Their records go into one buffer, ended by a commit frame,
//! written with one `pwrite` and made durable with one `fdatasync`. Only then is the index updated
//! and is any caller answered.
//!
//! A command that fails while it is decided (a record it needs cannot be read) is undone alone:
//! the group's overlay keeps a journal of what each command changed, so the others go on. If the
//! write or the sync fails (disk full, I/O error), the file is cut back to where the group began,
//! durably, and every command of the group is answered with the error: none was acknowledged, so
//! nothing acknowledged is lost and nothing is half applied. Until that cut is durable no further
//! group is written, so a failed group can never come back after a crash.
//!
//! The writer also keeps the manifest: it names a new segment when it starts one, forgets a
//! segment compaction retired, and moves the mark up to what is acknowledged.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idem_core::request::{Begin, Forget, LeaseToken, NewRequest};
use idem_core::{ClaimId, ClaimOutcome, ClaimRecord, Namespace, NewClaim, Parts, StoreError, Timestamp};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use crate::counts::Counts;
use crate::disk::FileRef;
use crate::index::{ClaimEntry, Expired, RequestEntry, SHARDS, Slot, TagHasher, claim_tag};
use crate::manifest::{Manifest, Mark, Sealed};
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
    /// Compaction: forget a segment whose live records were all relocated. `stale` are the index
    /// entries still pointing into it (expired claims and ended keys the sweeper has not reached):
    /// they go with it.
    Retire {
        segment: u32,
        stale: Vec<Stale>,
        reply: Reply<()>,
    },
    /// Move the manifest's mark up to what is acknowledged.
    Mark {
        reply: Option<Reply<()>>,
    },
    /// A durable write of nothing: readiness.
    Probe {
        reply: Reply<()>,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

/// An index entry that points into a segment being retired, and the record it points at.
#[derive(Debug, Clone)]
pub enum Stale {
    Claim { ns: String, id: ClaimId, parts: Vec<u8>, loc: Loc },
    Request { id: ClaimId, loc: Loc },
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
    pub file: FileRef,
    /// Where its last group ends: the next one is written here.
    pub len: u64,
    /// How far the file is zero-filled ([`segment::preallocate`]); at least `len`.
    pub allocated: u64,
    /// Records in it.
    pub records: u64,
    /// A failed group's bytes may still be in the file after `len` (cutting them off failed):
    /// no group is written until they are cut off durably.
    pub dirty: bool,
}

pub struct Writer {
    pub shared: Arc<Shared>,
    pub queue: mpsc::Receiver<Command>,
    pub active: Active,
    /// The manifest as last written.
    pub manifest: Manifest,
    pub max_group_items: usize,
    pub segment_bytes: u64,
    pub sweep_cursor: usize,
    /// The group buffer, kept between groups so that it is not grown afresh each time.
    pub buf: Vec<u8>,
}

/// What the group knows of a claim's current record.
#[derive(Clone)]
struct Current {
    entry: ClaimEntry,
    created_at: i64,
    data: Option<Box<RawValue>>,
}

/// A claim key the group has touched: how the index had it, and how the group leaves it.
#[derive(Clone)]
struct TouchedClaim {
    ns: Rc<str>,
    id: ClaimId,
    before: Option<ClaimEntry>,
    slot: Slot,
    current: Option<Current>,
    /// The encoded parts (the same for every record of a key); empty until known.
    parts: Vec<u8>,
    /// The command that last journaled this key (see [`Undo`]).
    epoch: u32,
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

#[derive(Clone)]
struct TouchedRequest {
    before: Option<RequestEntry>,
    current: Option<RequestEntry>,
    record: Option<RequestRec>,
    epoch: u32,
}

/// How to put back one key of the overlay as it was before the command being decided touched it
/// (`None`: the key was not in the overlay).
enum Undo {
    Claim(u64, Option<Box<TouchedClaim>>),
    Collided((String, ClaimId), Option<Box<TouchedClaim>>),
    Request(ClaimId, Option<Box<TouchedRequest>>),
}

/// Where the group stood before a command: what undoing it cuts back to.
struct Savepoint {
    buf: usize,
    records: u32,
    garbage: usize,
    journal: usize,
    force: bool,
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
    /// The command being decided (starting at 1), and how to undo what it changed so far.
    epoch: u32,
    journal: Vec<Undo>,
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
            epoch: 0,
            journal: Vec::new(),
        };
        let mut close = None;
        let (mut retire, mut marks) = (Vec::new(), Vec::new());
        let mut done: Vec<Pending> = Vec::with_capacity(count);
        for command in commands.drain(..) {
            match command {
                Command::Close { reply } => close = Some(reply),
                Command::Retire { segment, stale, reply } => retire.push((segment, stale, reply)),
                Command::Mark { reply } => marks.push(reply),
                command => {
                    let save = group.savepoint();
                    let (p, error) = group.execute(command, &mut self.sweep_cursor);
                    if let Some(e) = error {
                        // This command alone failed: what it changed is undone, the rest go on.
                        tracing::warn!(error = %e, "a store command failed; the rest of its group goes on");
                        metrics::counter!("idem_store_command_errors_total").increment(1);
                        group.rollback(save);
                    }
                    done.push(p);
                }
            }
        }
        let failure = write(&mut self.active, &shared, &mut group).err();
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
        for (segment, stale, reply) in retire {
            let _ = reply.send(self.retire(segment, &stale));
        }
        if failure.is_none() && self.active.len >= self.segment_bytes {
            self.roll();
        }
        if !marks.is_empty() || close.is_some() {
            let marked = self.mark();
            marks.into_iter().flatten().for_each(|reply| {
                let _ = reply.send(marked.clone());
            });
        }
        metrics::histogram!("idem_store_commit_batch_commands").record(count as f64);
        metrics::histogram!("idem_store_commit_batch_items").record(f64::from(items));
        metrics::histogram!("idem_store_commit_seconds").record(started.elapsed().as_secs_f64());
        close
    }

    /// Writes the manifest with `change` made to it; keeps it only once durable.
    fn write_manifest(&mut self, change: impl FnOnce(&mut Manifest)) -> Result<(), StoreError> {
        let mut next = self.manifest.clone();
        change(&mut next);
        if next == self.manifest {
            return Ok(());
        }
        let disk = &self.shared.segments.disk;
        next.write(disk.as_ref(), &self.shared.segments.dir).map_err(|e| io_error(&e))?;
        self.manifest = next;
        Ok(())
    }

    /// Moves the mark up to the end of the last durable group.
    fn mark(&mut self) -> Result<(), StoreError> {
        let mark = Mark { len: self.active.len, records: self.active.records };
        let marked = self.write_manifest(|m| m.mark = mark);
        if let Err(e) = &marked {
            tracing::warn!(error = %e, "could not move the log's mark; it is tried again");
        }
        marked
    }

    /// Forgets a segment compaction emptied: its stale entries leave the index, then the manifest
    /// stops listing it; only then do readers lose it (the compactor deletes the file after).
    fn retire(&mut self, segment: u32, stale: &[Stale]) -> Result<(), StoreError> {
        self.purge(stale);
        self.write_manifest(|m| m.sealed.retain(|s| s.number != segment))?;
        self.shared.segments.remove(segment);
        self.shared.space.lock().unwrap_or_else(|e| e.into_inner()).remove(&segment);
        Ok(())
    }

    /// Removes index entries that still point where `stale` says (nothing else moved them).
    fn purge(&self, stale: &[Stale]) {
        let index = &self.shared.index;
        let mut counts = self.shared.counts.lock().unwrap_or_else(|e| e.into_inner());
        for entry in stale {
            match entry {
                Stale::Claim { ns, id, parts, loc } => {
                    let main = index.claim_by_tag(claim_tag(ns, id)).filter(|e| e.loc() == *loc);
                    let (slot, found) = match main {
                        Some(e) => (Slot::Main, Some(e)),
                        None => (Slot::Overflow, index.claim_in_overflow(ns, id).filter(|e| e.loc() == *loc)),
                    };
                    if let Some(found) = found {
                        index.update_claim(slot, ns, id, parts, Some(found), None);
                        counts.add(ns, found.expires_at(), -1);
                    }
                }
                Stale::Request { id, loc } => {
                    if index.request(id).is_some_and(|e| e.loc == *loc) {
                        index.remove_request(id);
                    }
                }
            }
        }
    }

    /// Starts the next segment once this one is full. On failure (disk full) the current one keeps
    /// growing, and the next group tries again.
    fn roll(&mut self) {
        // The segment is sealed without its zeroed tail, durably before the next one exists:
        // only the newest segment may end in zeros.
        let sealed = self.active.file.set_len(self.active.len).and_then(|()| self.active.file.sync_data());
        if let Err(e) = sealed {
            tracing::warn!(error = %e, "could not seal the log segment; it grows on");
            return;
        }
        self.active.allocated = self.active.len;
        let number = self.active.number + 1;
        let (disk, dir) = (Arc::clone(&self.shared.segments.disk), self.shared.segments.dir.clone());
        let file = match segment::create(disk.as_ref(), &dir, number) {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!(error = %e, "could not start a new log segment; the current one grows");
                return;
            }
        };
        let sealed = Sealed { number: self.active.number, len: self.active.len, records: self.active.records };
        let len = segment::SEGMENT_HEADER as u64;
        let named = self.write_manifest(|m| {
            m.sealed.push(sealed);
            m.head = number;
            m.mark = Mark { len, records: 0 };
        });
        if let Err(e) = named {
            // The manifest still names the old segment as the head: it grows on, and the new file
            // (holding nothing) goes.
            tracing::warn!(error = %e, "could not name a new log segment in the manifest; the current one grows");
            let _ = disk.remove_file(&dir.join(segment::file_name(number)));
            return;
        }
        self.shared.segments.insert(number, Arc::clone(&file));
        let mut space = self.shared.space.lock().unwrap_or_else(|e| e.into_inner());
        space.entry(number).or_default().size = len;
        self.active = Active { number, file, len, allocated: len, records: 0, dirty: false };
        self.shared.head.store(number, Ordering::Release);
    }
}

/// Writes the group's records and its commit frame, and syncs; on failure cuts the file back,
/// durably.
fn write(active: &mut Active, shared: &Shared, group: &mut Group<'_>) -> Result<(), StoreError> {
    if group.buf.is_empty() && !group.force {
        return Ok(());
    }
    if active.dirty {
        cut_back(active).map_err(|e| io_error(&e))?;
    }
    let group_bytes = Some(group.buf.len() as u32);
    let commit = Record::Commit { count: group.records, group_bytes }.encode_into(&mut group.buf);
    group.garbage.push((active.number, commit as u64));
    let end = active.len + group.buf.len() as u64;
    let (disk, dir) = (&shared.segments.disk, &shared.segments.dir);
    let result = active.file.write_all_at(&group.buf, active.len).and_then(|()| {
        if end > active.allocated {
            active.allocated = segment::preallocate(disk.as_ref(), dir, active.file.as_ref(), end, shared.preallocate);
        }
        active.file.sync_data()
    });
    match result {
        Ok(()) => {
            active.len += group.buf.len() as u64;
            active.records += u64::from(group.records);
            let mut space = shared.space.lock().unwrap_or_else(|e| e.into_inner());
            space.entry(active.number).or_default().size = active.len;
            Ok(())
        }
        Err(e) => {
            // Whatever part of the group reached the file is cut off again, durably; should that
            // fail, no group is written until it succeeds.
            if let Err(cut) = cut_back(active) {
                tracing::error!(error = %cut, "could not cut a failed group off the log; writes wait until it can");
            }
            Err(io_error(&e))
        }
    }
}

/// Cuts the head back to its last durable group, durably.
fn cut_back(active: &mut Active) -> std::io::Result<()> {
    active.dirty = true;
    active.file.set_len(active.len)?;
    active.file.sync_data()?;
    active.allocated = active.len;
    active.dirty = false;
    Ok(())
}

impl Group<'_> {
    fn savepoint(&mut self) -> Savepoint {
        self.epoch += 1;
        Savepoint {
            buf: self.buf.len(),
            records: self.records,
            garbage: self.garbage.len(),
            journal: self.journal.len(),
            force: self.force,
        }
    }

    /// Undoes everything since `save`: the command's records, its garbage, and its overlay keys.
    fn rollback(&mut self, save: Savepoint) {
        self.buf.truncate(save.buf);
        self.records = save.records;
        self.garbage.truncate(save.garbage);
        self.force = save.force;
        while self.journal.len() > save.journal {
            match self.journal.pop() {
                Some(Undo::Claim(tag, Some(prev))) => drop(self.claims.insert(tag, *prev)),
                Some(Undo::Claim(tag, None)) => drop(self.claims.remove(&tag)),
                Some(Undo::Collided(key, Some(prev))) => drop(self.collided.insert(key, *prev)),
                Some(Undo::Collided(key, None)) => drop(self.collided.remove(&key)),
                Some(Undo::Request(id, Some(prev))) => drop(self.requests.insert(id, *prev)),
                Some(Undo::Request(id, None)) => drop(self.requests.remove(&id)),
                None => break,
            }
        }
    }

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
            command @ (Command::Retire { .. } | Command::Close { .. } | Command::Mark { .. }) => {
                (abandon(command), None)
            }
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

    /// The overlay's entry for a claim key, loaded from the index (and disk) the first time;
    /// journaled the first time each command touches it.
    fn touch_claim(&mut self, ns: &Rc<str>, id: &ClaimId) -> Result<&mut TouchedClaim, StoreError> {
        let tag = claim_tag(ns, id);
        let epoch = self.epoch;
        let collided = match self.claims.get_mut(&tag) {
            Some(t) if t.id == *id && *t.ns == **ns => {
                if t.epoch != epoch {
                    let prev = Box::new(t.clone());
                    t.epoch = epoch;
                    self.journal.push(Undo::Claim(tag, Some(prev)));
                }
                false
            }
            Some(_) => true,
            None => {
                let mut loaded = load_claim(self.shared, ns, id)?;
                loaded.epoch = epoch;
                self.claims.insert(tag, loaded);
                self.journal.push(Undo::Claim(tag, None));
                false
            }
        };
        if !collided {
            return self.claims.get_mut(&tag).ok_or_else(|| StoreError::Internal("claim overlay lost a key".into()));
        }
        let key = (ns.to_string(), *id);
        match self.collided.get_mut(&key) {
            Some(t) if t.epoch != epoch => {
                let prev = Box::new(t.clone());
                t.epoch = epoch;
                self.journal.push(Undo::Collided(key.clone(), Some(prev)));
            }
            Some(_) => {}
            None => {
                let mut loaded = load_claim(self.shared, ns, id)?;
                loaded.epoch = epoch;
                self.collided.insert(key.clone(), loaded);
                self.journal.push(Undo::Collided(key.clone(), None));
            }
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
                    Expired::Tag => match self.shared.segments.read_now(entry.loc())? {
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
        let epoch = self.epoch;
        match self.requests.get_mut(id) {
            Some(t) if t.epoch != epoch => {
                let prev = Box::new(t.clone());
                t.epoch = epoch;
                self.journal.push(Undo::Request(*id, Some(prev)));
            }
            Some(_) => {}
            None => {
                let before = self.shared.index.request(id);
                self.requests.insert(*id, TouchedRequest { before, current: before, record: None, epoch });
                self.journal.push(Undo::Request(*id, None));
            }
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
        match self.shared.segments.read_now(entry.loc)? {
            (Record::Request(rec), _) => Ok(Some((entry, rec))),
            _ => Err(StoreError::Internal(format!("request {id}: its entry points at another record"))),
        }
    }

    /// Writes a leased key's new record. `name_old`: the record it replaces gets a tombstone if
    /// it would still be live by its own time (not when compaction moves a record, whose old copy
    /// goes with its segment).
    fn put_request(&mut self, rec: RequestRec, name_old: bool) -> Result<RequestEntry, StoreError> {
        let id = rec.id;
        let (loc, len) = self.append(&Record::Request(rec.clone()));
        let entry = RequestEntry { loc, len, until: rec.until, completed: rec.completed, token: rec.token };
        let touched = self.touch_request(&id)?;
        let old = touched.current.replace(entry);
        touched.record = Some(rec);
        if let Some(old) = old {
            self.dead(old.loc, old.len);
            // The replaced record stays on disk, live by its own time: once the new one is gone
            // (ended, or forgotten) and its segment compacted away, a restart would bring the old
            // one back. A tombstone names it, kept for as long as it would otherwise be live.
            if name_old && old.until > self.now {
                let gone = Gone { target: old.loc, until: old.until };
                let (loc, len) = self.append(&Record::RequestGone { id, gone });
                self.dead(loc, len);
            }
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
        let rec = RequestRec {
            id: request.id,
            fingerprint: request.fingerprint,
            completed: false,
            token: token.0,
            until: lease_until.millis(),
            body: request.held,
        };
        self.put_request(rec, true)?;
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
        self.put_request(RequestRec { completed: true, token: [0; 16], until, body: result, ..held }, true)?;
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
        self.put_request(RequestRec { until: until.millis(), ..held }, true)?;
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
                    self.put_request(rec, false)?;
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
                    self.put_request(rec, false)?;
                }
                _ => return Err(StoreError::Internal("only claims and keys are imported".into())),
            }
        }
        Ok(())
    }

    /// After the group is durable: the index and the space accounting take its changes.
    fn apply(self) {
        let index = &self.shared.index;
        let mut counts = self.shared.counts.lock().unwrap_or_else(|e| e.into_inner());
        for touched in self.claims.into_values().chain(self.collided.into_values()) {
            let after = touched.current.map(|c| c.entry);
            if after == touched.before {
                continue;
            }
            index.update_claim(touched.slot, &touched.ns, &touched.id, &touched.parts, touched.before, after);
            count(&mut counts, &touched.ns, touched.before, after);
        }
        drop(counts);
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

/// A claim entry replaced: the counts follow.
fn count(counts: &mut Counts, ns: &str, before: Option<ClaimEntry>, after: Option<ClaimEntry>) {
    if let Some(before) = before {
        counts.add(ns, before.expires_at(), -1);
    }
    if let Some(after) = after {
        counts.add(ns, after.expires_at(), 1);
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
                epoch: 0,
            }
        }
        None => TouchedClaim {
            ns: Rc::clone(ns),
            id: *id,
            before: None,
            slot: if found.main_taken { Slot::Overflow } else { Slot::Main },
            current: None,
            parts: Vec::new(),
            epoch: 0,
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
        Command::Mark { reply } => match reply {
            Some(reply) => pending(reply, closed()),
            None => Box::new(|_| ()),
        },
        Command::Close { reply } => {
            let _ = reply.send(());
            Box::new(|_| ())
        }
    }
}
