//! One group being decided: the overlay of every key its commands touched (how the index had it,
//! how the group leaves it), the buffer of its records, and a journal that undoes one command
//! alone when it fails. Once the group is durable, [`Group::apply`] hands its changes to the index
//! and the space accounting.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::rc::Rc;
use std::time::Duration;

use idem_core::request::{Begin, Decision, Forget, LeaseToken, NewRequest, decide_begin};
use idem_core::{
    ClaimId, ClaimOutcome, ClaimRecord, ClaimUpdate, ClientToken, Decided, Keep, Live, Namespace, NewClaim, Parts,
    StoreError, Timestamp, UpdateOutcome,
};
use serde_json::value::RawValue;

use super::{ClaimReply, Command, Reply, abandon};
use crate::Shared;
use crate::counts::Counts;
use crate::index::{ClaimEntry, Expired, RequestEntry, SHARDS, Slot, TagHasher, claim_tag};
use crate::record::{self, ClaimFields, Gone, Loc, NEVER, Record, RequestRec};

/// What the group knows of a claim's current record.
#[derive(Clone)]
struct Current {
    entry: ClaimEntry,
    created_at: i64,
    data: Option<Box<RawValue>>,
    /// The digest of the client token it was claimed with.
    client: Option<[u8; 16]>,
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
pub(super) struct Savepoint {
    buf: usize,
    records: u32,
    garbage: usize,
    journal: usize,
    force: bool,
}

pub(super) type Pending = Box<dyn FnOnce(Option<&StoreError>) + Send>;

pub(super) fn pending<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> Pending {
    Box::new(move |failure| {
        let _ = reply.send(match failure {
            Some(e) => Err(e.clone()),
            None => result,
        });
    })
}

/// A claim's outcome, handed over as its caller asked ([`ClaimReply`]) once the group is written.
pub(super) fn answer_claim(reply: ClaimReply, result: Result<Vec<ClaimOutcome>, StoreError>) -> Pending {
    match reply {
        ClaimReply::Wait(reply) => pending(reply, result),
        ClaimReply::Then(then) => Box::new(move |failure| {
            then(match failure {
                Some(e) => Err(e.clone()),
                None => result,
            })
        }),
    }
}

/// One group being decided: its buffer and overlay.
pub(super) struct Group<'a> {
    shared: &'a Shared,
    now: i64,
    segment: u32,
    base: u64,
    pub(super) buf: Vec<u8>,
    pub(super) records: u32,
    claims: TagMap<TouchedClaim>,
    /// Touched claims whose tag another touched claim has.
    collided: HashMap<(String, ClaimId), TouchedClaim>,
    requests: HashMap<ClaimId, TouchedRequest>,
    pub(super) garbage: Vec<(u32, u64)>,
    /// Write (a bare commit frame) even if nothing changed: a readiness probe asked.
    pub(super) force: bool,
    /// The command being decided (starting at 1), and how to undo what it changed so far.
    epoch: u32,
    journal: Vec<Undo>,
}

impl<'a> Group<'a> {
    /// A group to be written at `base` in segment `segment`, decided at `now`, into `buf`.
    pub(super) fn new(shared: &'a Shared, now: i64, segment: u32, base: u64, buf: Vec<u8>) -> Self {
        Self {
            shared,
            now,
            segment,
            base,
            buf,
            records: 0,
            claims: TagMap::default(),
            collided: HashMap::new(),
            requests: HashMap::new(),
            garbage: Vec::new(),
            force: false,
            epoch: 0,
            journal: Vec::new(),
        }
    }

    pub(super) fn savepoint(&mut self) -> Savepoint {
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
    pub(super) fn rollback(&mut self, save: Savepoint) {
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

    pub(super) fn execute(&mut self, command: Command, sweep_cursor: &mut usize) -> (Pending, Option<StoreError>) {
        fn ran<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> (Pending, Option<StoreError>) {
            let error = result.as_ref().err().cloned();
            (pending(reply, result), error)
        }
        match command {
            Command::Claim { ns, items, ids, reply } => {
                let shared_ns: Rc<str> = Rc::from(ns.as_str());
                if ids.len() > 1 {
                    self.shared.index.warm(ids.iter().map(|id| claim_tag(&shared_ns, id)).collect());
                }
                let result: Result<Vec<_>, _> =
                    ids.into_iter().zip(items).map(|(id, item)| self.claim(&ns, &shared_ns, id, item)).collect();
                let error = result.as_ref().err().cloned();
                (answer_claim(reply, result), error)
            }
            Command::Update { ns, id, update, reply } => ran(reply, self.update(&ns, id, update)),
            Command::Delete { ns, id, reply } => ran(reply, self.delete(&Rc::from(ns.as_str()), &id)),
            Command::DeleteMany { ns, ids, reply } => {
                let ns: Rc<str> = Rc::from(ns.as_str());
                let deleted = ids.iter().try_fold(0, |n, id| self.delete(&ns, id).map(|gone| n + usize::from(gone)));
                ran(reply, deleted)
            }
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

    fn claim(
        &mut self,
        ns: &Namespace,
        shared_ns: &Rc<str>,
        id: ClaimId,
        item: NewClaim,
    ) -> Result<ClaimOutcome, StoreError> {
        let now = self.now;
        let touched = self.touch_claim(shared_ns, &id)?;
        if let Some(current) = touched.current.as_ref().filter(|c| c.entry.is_live(now)) {
            let claimed = ClientToken::same(current.client.map(ClientToken), item.client);
            return Ok(ClaimOutcome { claimed, record: touched.record(ns, current)? });
        }
        let old = touched.current.take().map(|c| c.entry);
        let parts = match std::mem::take(&mut touched.parts) {
            known if !known.is_empty() => known,
            _ => item.parts.encode(),
        };
        let (created_at, expires_at) = item.times(Timestamp(now));
        let (created_at, expires_at) = (created_at.millis(), expires_at.map_or(NEVER, Timestamp::millis));
        let fields = ClaimFields {
            ns: shared_ns,
            id: &id,
            parts: &parts,
            data: item.data.as_deref().map(RawValue::get),
            created_at,
            expires_at,
            client: item.client.as_ref().map(|t| &t.0),
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
            created_at: Timestamp(created_at),
            expires_at: (expires_at != NEVER).then_some(Timestamp(expires_at)),
        };
        let touched = self.touch_claim(shared_ns, &id)?;
        touched.parts = parts;
        touched.current = Some(Current { entry, created_at, data: item.data, client: item.client.map(|t| t.0) });
        Ok(ClaimOutcome { claimed: true, record })
    }

    /// Changes a key if the update's condition holds. A live record replaced gets a tombstone, as
    /// a deleted one does: the new record may expire sooner, and its segment go first, and the old
    /// one must not come back at the next start.
    fn update(&mut self, ns: &Namespace, id: ClaimId, update: ClaimUpdate) -> Result<UpdateOutcome, StoreError> {
        let now = self.now;
        let shared_ns: Rc<str> = Rc::from(ns.as_str());
        let touched = self.touch_claim(&shared_ns, &id)?;
        if touched.parts.is_empty() {
            touched.parts = update.parts.encode();
        }
        let live = touched.current.clone().filter(|c| c.entry.is_live(now));
        let before = live.as_ref().map(|c| touched.record(ns, c)).transpose()?;
        let view = live.as_ref().map(|c| Live {
            data: c.data.as_deref().map(RawValue::get),
            created_at: Timestamp(c.created_at),
            expires_at: before.as_ref().and_then(|b| b.expires_at),
        });
        let Some(decided) = update.decide(view, Timestamp(now)) else {
            return Ok(UpdateOutcome { applied: false, before });
        };
        let (data, created_at, expires_at) = match decided {
            Decided::Delete => {
                self.delete(&shared_ns, &id)?;
                return Ok(UpdateOutcome { applied: true, before });
            }
            Decided::Write { data, created_at, expires_at } => (data, created_at, expires_at),
        };
        let parts = touched.parts.clone();
        let replaced = touched.current.take();
        let (data, client) = match (data, &live) {
            (Keep::Set(data), _) => (data, None),
            (Keep::Keep, Some(live)) => (live.data.clone(), live.client),
            (Keep::Keep, None) => (None, None),
        };
        if let Some(old) = replaced {
            self.dead(old.entry.loc(), old.entry.len());
            if old.entry.is_live(now) {
                let gone = Gone { target: old.entry.loc(), until: old.entry.expires_at() };
                let (loc, len) = self.append(&Record::ClaimGone { ns: ns.as_str().to_owned(), id, gone });
                self.dead(loc, len);
            }
        }
        let (created_at, expires_at) = (created_at.millis(), expires_at.map_or(NEVER, Timestamp::millis));
        let fields = ClaimFields {
            ns: &shared_ns,
            id: &id,
            parts: &parts,
            data: data.as_deref().map(RawValue::get),
            created_at,
            expires_at,
            client: client.as_ref(),
        };
        let offset = self.base + self.buf.len() as u64;
        let len = record::encode_claim(&mut self.buf, fields) as u32;
        self.records += 1;
        let entry = ClaimEntry::new(Loc { segment: self.segment, offset: offset as u32 }, len, expires_at);
        let touched = self.touch_claim(&shared_ns, &id)?;
        touched.current = Some(Current { entry, created_at, data, client });
        Ok(UpdateOutcome { applied: true, before })
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
            if name_old && old.kept_until() > self.now {
                let gone = Gone { target: old.loc, until: old.kept_until() };
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
        if entry.kept_until() > now {
            let gone = Gone { target: entry.loc, until: entry.kept_until() };
            let (loc, len) = self.append(&Record::RequestGone { id: *id, gone });
            self.dead(loc, len);
        }
        Ok(())
    }

    fn begin(&mut self, request: NewRequest) -> Result<Begin, StoreError> {
        let now = self.now;
        let found = self.request_record(&request.id)?.map(|(entry, rec)| crate::found(&entry, rec));
        let lease_expired = match decide_begin(found, &request.fingerprint, request.client, Timestamp(now)) {
            Decision::Answer(answer) => return Ok(answer),
            Decision::Take { lease_expired } => lease_expired,
        };
        let token = LeaseToken::generate();
        let lease_until = Timestamp(now).plus(request.lease);
        let rec = RequestRec {
            id: request.id,
            fingerprint: request.fingerprint,
            completed: false,
            token: token.0,
            until: lease_until.millis(),
            body: request.held,
            client: request.client.map(|t| t.0),
            fence: self.shared.next_fence(now),
        };
        let fence = rec.fence;
        self.put_request(rec, true)?;
        Ok(Begin::Started { token, lease_until, lease_expired, fence })
    }

    /// The record of a key whose last lease is `token`'s: live, or ran out with no begin taking
    /// the key since (still kept: [`idem_core::request::ENDED_LEASE_KEPT`]).
    fn held_by(&mut self, id: &ClaimId, token: LeaseToken) -> Result<Option<RequestRec>, StoreError> {
        let now = self.now;
        Ok(self
            .request_record(id)?
            .filter(|(e, _)| !e.completed && e.token == token.0 && e.kept_until() > now)
            .map(|(_, rec)| rec))
    }

    fn complete(
        &mut self,
        id: &ClaimId,
        token: LeaseToken,
        result: Vec<u8>,
        ttl: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        let Some(held) = self.held_by(id, token)? else { return Ok(None) };
        let until = Timestamp(self.now).plus(ttl);
        self.put_request(
            RequestRec { completed: true, token: [0; 16], until: until.millis(), body: result, ..held },
            true,
        )?;
        Ok(Some(until))
    }

    fn release(&mut self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError> {
        let held = self.held_by(id, token)?.is_some();
        if held {
            self.remove_request(id)?;
        }
        Ok(held)
    }

    fn extend(&mut self, id: &ClaimId, token: LeaseToken, lease: Duration) -> Result<Option<Timestamp>, StoreError> {
        let Some(held) = self.held_by(id, token)? else { return Ok(None) };
        // Never shorter than it was: an extension asked long ago may be decided after a newer one.
        let until = Timestamp(self.now).plus(lease).max(Timestamp(held.until));
        self.put_request(RequestRec { until: until.millis(), ..held }, true)?;
        Ok(Some(until))
    }

    fn forget(&mut self, id: &ClaimId) -> Result<Forget, StoreError> {
        let now = self.now;
        let Some((entry, _)) = self.request_record(id)?.filter(|(e, _)| e.until > now) else {
            return Ok(Forget::Absent);
        };
        if !entry.completed {
            return Ok(Forget::Held);
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
                    if touched.current.is_none_or(|e| e.loc != old || e.kept_until() <= now) {
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
                    touched.current = Some(Current { entry, created_at: rec.created_at, data, client: rec.client });
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
    pub(super) fn apply(self) {
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
                current: Some(Current { entry, created_at: rec.created_at, data, client: rec.client }),
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
