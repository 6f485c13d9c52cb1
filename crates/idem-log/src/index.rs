//! The in-memory index over the log: where each live record is, and little else.
//!
//! A claim costs one entry of 24 bytes in a [`Table`] (a sorted vector, not a hash table that
//! doubles: `table`): a 64-bit tag (the first 8 bytes of its SHA-256 id mixed with its namespace)
//! and a packed entry (the record's location, its length and its expiry). Everything else —
//! parts, data, the full id — stays on disk and is read back (from the
//! OS page cache, usually) when a caller needs it; the full id on disk is always compared, so two
//! keys whose tags collide are told apart (the second goes to a small overflow map).
//!
//! Prefix lookups use two more maps keyed by a tag of (namespace, proper prefix); a claim of `n`
//! parts is a member of its `n - 1` proper prefixes. Claims without expiry are only counted (a
//! count answers "is any live?", and costs a 24-byte entry), except under their first part, where
//! every claim is also listed (8 bytes a member once there are more than a few), so that a
//! prefix's claims can be listed and deleted (a prefix of
//! any length reads its first part's members and keeps those under it): one tag more per claim of
//! several parts. Claims with an expiry are listed under each of their prefixes.
//!
//! Both are split into shards, each behind its own lock, so that readers on every core proceed
//! while the writer applies a group, and the sweeper walks one shard at a time.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::RwLock;

use idem_core::ClaimId;

use crate::record::{Loc, NEVER};
use crate::table::{Key, Table};

pub const SHARDS: usize = 64;

/// Milliseconds are kept relative to 2020-01-01 in 42 bits (until the year 2159); all ones is
/// "never".
const EPOCH_MS: i64 = 1_577_836_800_000;
const EXPIRY_BITS: u32 = 42;
const EXPIRY_NEVER: u64 = (1 << EXPIRY_BITS) - 1;
/// Claim records are far smaller than this (64 KiB of data, 16 parts of 1 KiB).
pub const MAX_CLAIM_FRAME: u32 = (1 << (64 - EXPIRY_BITS)) - 1;

/// Where a claim's record is, how long it is, and when it expires: 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimEntry {
    loc: u64,
    packed: u64,
}

impl ClaimEntry {
    pub fn new(loc: Loc, len: u32, expires_at: i64) -> Self {
        let expiry = if expires_at == NEVER {
            EXPIRY_NEVER
        } else {
            (expires_at.saturating_sub(EPOCH_MS).max(0) as u64).min(EXPIRY_NEVER - 1)
        };
        Self { loc: loc.pack(), packed: (expiry << (64 - EXPIRY_BITS)) | u64::from(len.min(MAX_CLAIM_FRAME)) }
    }

    pub fn loc(self) -> Loc {
        Loc::unpack(self.loc)
    }

    pub fn len(self) -> u32 {
        (self.packed & u64::from(MAX_CLAIM_FRAME)) as u32
    }

    pub fn expires_at(self) -> i64 {
        match self.packed >> (64 - EXPIRY_BITS) {
            EXPIRY_NEVER => NEVER,
            ms => ms as i64 + EPOCH_MS,
        }
    }

    pub fn is_live(self, now: i64) -> bool {
        self.expires_at() > now
    }
}

/// Where a leased key's record is, with what its operations check without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestEntry {
    pub loc: Loc,
    pub len: u32,
    pub until: i64,
    pub completed: bool,
    pub token: [u8; 16],
}

impl RequestEntry {
    /// Until when its record is kept: a result until its TTL ends, a lease that ran out while
    /// its holder may still complete it ([`idem_core::request::kept_until`]).
    pub fn kept_until(&self) -> i64 {
        idem_core::request::kept_until(self.completed, self.until)
    }
}

/// A hasher for keys that are already uniformly random 64-bit values.
#[derive(Default)]
pub struct TagHasher(u64);

impl Hasher for TagHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn fnv(bytes: &[u8], seed: u64) -> u64 {
    bytes.iter().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

/// A claim's tag.
pub fn claim_tag(ns: &str, id: &ClaimId) -> u64 {
    let mut first = [0; 8];
    first.copy_from_slice(&id.0[..8]);
    u64::from_le_bytes(first) ^ mix(fnv(ns.as_bytes(), 0))
}

/// The tag of a (namespace, encoded prefix): 128 bits, so that two prefixes never share one (a
/// prefix's count of claims without expiry is trusted without reading any of them).
pub fn prefix_tag(ns: &str, encoded_prefix: &[u8]) -> u128 {
    let low = mix(fnv(encoded_prefix, fnv(ns.as_bytes(), 0x5052_4546)));
    let high = mix(fnv(encoded_prefix, fnv(ns.as_bytes(), 0x7072_6566_6978)) ^ 0x9e37_79b9_7f4a_7c15);
    (u128::from(high) << 64) | u128::from(low)
}

/// The tags of every proper prefix of encoded parts (each part ends with NUL).
pub fn proper_prefix_tags(ns: &str, encoded: &[u8]) -> Vec<u128> {
    let ends: Vec<usize> = encoded.iter().enumerate().filter(|(_, b)| **b == 0).map(|(i, _)| i + 1).collect();
    ends.iter().take(ends.len().saturating_sub(1)).map(|end| prefix_tag(ns, &encoded[..*end])).collect()
}

fn shard_of(tag: u64) -> usize {
    (tag >> 40) as usize % SHARDS
}

fn prefix_shard(tag: u128) -> usize {
    shard_of(tag as u64)
}

/// The claims under one prefix. Small sets are a vector; large ones a [`Table`] (8 bytes a member),
/// so that removing one member stays cheap however many there are.
#[derive(Debug)]
enum Members {
    Few(Vec<u64>),
    Many(Box<Table<u64, ()>>),
}

const FEW: usize = 32;

impl Members {
    fn insert(&mut self, tag: u64) {
        match self {
            Members::Few(v) if v.len() < FEW => v.push(tag),
            Members::Few(v) => {
                let mut set = Box::<Table<u64, ()>>::default();
                for member in v.drain(..).chain([tag]) {
                    set.insert(member, ());
                }
                *self = Members::Many(set);
            }
            Members::Many(s) => {
                s.insert(tag, ());
            }
        }
    }

    /// Removes one occurrence; answers whether the set is now empty.
    fn remove(&mut self, tag: u64) -> bool {
        match self {
            Members::Few(v) => {
                if let Some(i) = v.iter().position(|t| *t == tag) {
                    v.swap_remove(i);
                }
                v.is_empty()
            }
            Members::Many(s) => {
                s.remove(&tag);
                s.is_empty()
            }
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match self {
            Members::Few(v) => Box::new(v.iter().copied()),
            Members::Many(s) => Box::new(s.iter().map(|(tag, ())| tag)),
        }
    }
}

/// A prefix's 128-bit tag as two words, so that a map slot keyed by it is 8-byte aligned (a
/// `u128` key pads each slot to a multiple of 16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct PrefixKey(u64, u64);

impl PrefixKey {
    fn of(tag: u128) -> Self {
        Self(tag as u64, (tag >> 64) as u64)
    }
}

impl std::hash::Hash for PrefixKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Both halves are already mixed (prefix_tag): the low one hashes the slot.
        state.write_u64(self.0);
    }
}

impl Key for PrefixKey {
    fn spread(&self) -> u64 {
        self.0
    }
}

type PrefixMap<V> = HashMap<PrefixKey, V, BuildHasherDefault<TagHasher>>;

/// The claims listed under one proper prefix: those with an expiry, and under a first part those
/// without one too (`listed`), for listing a prefix's claims. Claims without expiry under a deeper
/// prefix are only counted, in a map of their own ([`Shard::forever`]): most prefixes of most
/// stores are only that, and a count costs a 24-byte entry where a listing costs a boxed set.
#[derive(Debug, Default)]
struct Listed {
    expiring: Option<Members>,
    listed: Option<Members>,
}

/// What the index says of a prefix, before any record is read.
pub enum PrefixAnswer {
    /// A claim without expiry is under it.
    Yes,
    /// These claims under it are live now, if their records (read by the caller) say so: a member
    /// tag may belong to another key.
    Candidates(Vec<ClaimEntry>),
}

#[derive(Default)]
struct Shard {
    claims: Table<u64, ClaimEntry>,
    /// The claims without expiry under each proper prefix, counted (a count answers "is any live?").
    forever: Table<PrefixKey, u32>,
    /// The members listed under a prefix, for the prefixes that list any.
    listed: PrefixMap<Box<Listed>>,
    // A fixed hasher (ids are already random), so that what a sweep picks is the same every run.
    requests: HashMap<ClaimId, RequestEntry, BuildHasherDefault<TagHasher>>,
}

impl Shard {
    /// Moves claim `member` under `prefix` from what it was (`before`: absent, or with or without
    /// expiry, `Some(true)` being without) to what it is. Under a first part every claim is listed;
    /// under a deeper prefix those without expiry are only counted.
    fn move_member(&mut self, prefix: PrefixKey, first: bool, member: u64, before: Option<bool>, after: Option<bool>) {
        match before {
            Some(true) => {
                self.forever.update(prefix, |count| count.filter(|c| *c > 1).map(|c| c - 1));
                if first {
                    self.unlist(prefix, member, |l| &mut l.listed);
                }
            }
            Some(false) => self.unlist(prefix, member, |l| &mut l.expiring),
            None => {}
        }
        match after {
            Some(true) => {
                self.forever.update(prefix, |count| Some(count.unwrap_or(0) + 1));
                if first {
                    let listed = self.listed.entry(prefix).or_default();
                    listed.listed.get_or_insert_with(|| Members::Few(Vec::new())).insert(member);
                }
            }
            Some(false) => {
                let listed = self.listed.entry(prefix).or_default();
                listed.expiring.get_or_insert_with(|| Members::Few(Vec::new())).insert(member);
            }
            None => {}
        }
    }

    /// Takes `member` out of one of `prefix`'s lists; a listing left with nothing goes.
    fn unlist(&mut self, prefix: PrefixKey, member: u64, list: impl Fn(&mut Listed) -> &mut Option<Members>) {
        let Some(listed) = self.listed.get_mut(&prefix) else { return };
        let members = list(listed);
        if members.as_mut().is_some_and(|m| m.remove(member)) {
            *members = None;
        }
        if listed.expiring.is_none() && listed.listed.is_none() {
            self.listed.remove(&prefix);
        }
    }
}

/// A claim whose tag collided with another key's; found by its full key.
type OverflowKey = (String, ClaimId);

pub struct Index {
    shards: Vec<RwLock<Shard>>,
    overflow: RwLock<HashMap<OverflowKey, ClaimEntry>>,
}

impl Default for Index {
    fn default() -> Self {
        Self { shards: (0..SHARDS).map(|_| RwLock::default()).collect(), overflow: RwLock::default() }
    }
}

/// Which map holds a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Main,
    Overflow,
}

impl Index {
    fn read(&self, tag: u64) -> std::sync::RwLockReadGuard<'_, Shard> {
        self.shards[shard_of(tag)].read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, tag: u64) -> std::sync::RwLockWriteGuard<'_, Shard> {
        self.shards[shard_of(tag)].write().unwrap_or_else(|e| e.into_inner())
    }

    fn overflow_read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<OverflowKey, ClaimEntry>> {
        self.overflow.read().unwrap_or_else(|e| e.into_inner())
    }

    fn overflow_write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<OverflowKey, ClaimEntry>> {
        self.overflow.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The entry in the main map under `tag`: the claim itself, or another whose tag collides
    /// (the caller compares the full key on disk).
    pub fn claim_by_tag(&self, tag: u64) -> Option<ClaimEntry> {
        self.read(tag).claims.get(&tag)
    }

    /// Reads where the entries of these claims are, shard by shard, so that looking each up next
    /// finds it in the CPU's caches (a batch's lookups, one after another, would otherwise each
    /// wait for memory in turn).
    pub fn warm(&self, mut tags: Vec<u64>) {
        tags.sort_unstable_by_key(|tag| shard_of(*tag));
        let mut sum = 0u64;
        for same in tags.chunk_by(|a, b| shard_of(*a) == shard_of(*b)) {
            let shard = self.read(same[0]);
            sum = same.iter().fold(sum, |sum, tag| sum ^ shard.claims.touch(tag));
        }
        std::hint::black_box(sum);
    }

    /// The entry of a claim whose tag collided.
    pub fn claim_in_overflow(&self, ns: &str, id: &ClaimId) -> Option<ClaimEntry> {
        let overflow = self.overflow_read();
        if overflow.is_empty() {
            return None;
        }
        overflow.get(&(ns.to_owned(), *id)).copied()
    }

    pub fn set_claim(&self, slot: Slot, ns: &str, id: &ClaimId, entry: ClaimEntry) {
        match slot {
            Slot::Main => {
                let tag = claim_tag(ns, id);
                self.write(tag).claims.insert(tag, entry);
            }
            Slot::Overflow => {
                self.overflow_write().insert((ns.to_owned(), *id), entry);
            }
        }
    }

    pub fn remove_claim(&self, slot: Slot, ns: &str, id: &ClaimId) {
        match slot {
            Slot::Main => {
                let tag = claim_tag(ns, id);
                self.write(tag).claims.remove(&tag);
            }
            Slot::Overflow => {
                self.overflow_write().remove(&(ns.to_owned(), *id));
            }
        }
    }

    /// Moves a claim (in the main map) from the state `before` to `after` in the map and in its
    /// prefixes.
    pub fn update_claim(
        &self,
        slot: Slot,
        ns: &str,
        id: &ClaimId,
        parts: &[u8],
        before: Option<ClaimEntry>,
        after: Option<ClaimEntry>,
    ) {
        match after {
            Some(entry) if before != Some(entry) => self.set_claim(slot, ns, id, entry),
            None if before.is_some() => self.remove_claim(slot, ns, id),
            _ => {}
        }
        if slot == Slot::Overflow {
            // Overflow claims are not prefix members: prefix lookups read the (tiny) overflow.
            return;
        }
        let forever = |e: &ClaimEntry| e.expires_at() == NEVER;
        if before.map(|e| forever(&e)) == after.map(|e| forever(&e)) {
            return;
        }
        let member = claim_tag(ns, id);
        for (depth, prefix) in proper_prefix_tags(ns, parts).into_iter().enumerate() {
            let mut shard = self.shards[prefix_shard(prefix)].write().unwrap_or_else(|e| e.into_inner());
            shard.move_member(
                PrefixKey::of(prefix),
                depth == 0,
                member,
                before.map(|e| forever(&e)),
                after.map(|e| forever(&e)),
            );
        }
    }

    /// Every claim under a first part (the tag of `(namespace, first part)`), live at `now`: the
    /// callers read their records to keep those of this namespace and prefix (tags may collide).
    pub fn under_first_part(&self, prefix: u128, now: i64) -> Vec<ClaimEntry> {
        let home = prefix_shard(prefix);
        let shard = self.shards[home].read().unwrap_or_else(|e| e.into_inner());
        let Some(found) = shard.listed.get(&PrefixKey::of(prefix)) else { return Vec::new() };
        let members = found.expiring.iter().chain(found.listed.iter()).flat_map(|m| m.iter());
        members
            .filter_map(|member| {
                if shard_of(member) == home { shard.claims.get(&member) } else { self.read(member).claims.get(&member) }
            })
            .filter(|e| e.is_live(now))
            .collect()
    }

    /// A prefix's claims: a claim without expiry settles it; else up to `want` members whose
    /// entries are live at `now`. The prefix's shard is read-locked throughout and each member's
    /// shard briefly; only the writer takes write locks, one at a time, so this cannot deadlock.
    pub fn prefix(&self, prefix: u128, now: i64, want: usize) -> PrefixAnswer {
        let home = prefix_shard(prefix);
        let shard = self.shards[home].read().unwrap_or_else(|e| e.into_inner());
        let key = PrefixKey::of(prefix);
        if shard.forever.contains_key(&key) {
            return PrefixAnswer::Yes;
        }
        let Some(found) = shard.listed.get(&key) else { return PrefixAnswer::Candidates(Vec::new()) };
        let mut out = Vec::new();
        for member in found.expiring.iter().flat_map(|m| m.iter()) {
            let entry = if shard_of(member) == home {
                shard.claims.get(&member)
            } else {
                self.read(member).claims.get(&member)
            };
            if let Some(entry) = entry.filter(|e| e.is_live(now)) {
                out.push(entry);
                if out.len() >= want {
                    break;
                }
            }
        }
        PrefixAnswer::Candidates(out)
    }

    /// Merges each table's changes left by start-up's replay ([`crate::table::replaying`]).
    pub fn settle(&self) {
        for shard in &self.shards {
            let mut shard = shard.write().unwrap_or_else(|e| e.into_inner());
            shard.claims.settle();
            shard.forever.settle();
            for listed in shard.listed.values_mut() {
                for members in [&mut listed.expiring, &mut listed.listed].into_iter().flatten() {
                    if let Members::Many(table) = members {
                        table.settle();
                    }
                }
            }
        }
    }

    /// Every overflow claim live at `now`.
    pub fn live_overflow(&self, now: i64) -> Vec<ClaimEntry> {
        self.overflow_read().values().filter(|e| e.is_live(now)).copied().collect()
    }

    pub fn request(&self, id: &ClaimId) -> Option<RequestEntry> {
        self.read(request_tag(id)).requests.get(id).copied()
    }

    pub fn set_request(&self, id: &ClaimId, entry: RequestEntry) {
        self.write(request_tag(id)).requests.insert(*id, entry);
    }

    pub fn remove_request(&self, id: &ClaimId) {
        self.write(request_tag(id)).requests.remove(id);
    }

    /// Up to `limit` claims in shard `shard` (and, with shard 0, the overflow) that expired at or
    /// before `now`: (tag or full key, entry).
    pub fn expired_claims(&self, shard: usize, now: i64, limit: usize) -> Vec<(Expired, ClaimEntry)> {
        let mut out: Vec<(Expired, ClaimEntry)> = {
            let shard = self.shards[shard].read().unwrap_or_else(|e| e.into_inner());
            shard.claims.values().filter(|e| !e.is_live(now)).take(limit).map(|e| (Expired::Tag, e)).collect()
        };
        if shard == 0 && out.len() < limit {
            let overflow = self.overflow_read();
            out.extend(
                overflow
                    .iter()
                    .filter(|(_, e)| !e.is_live(now))
                    .take(limit - out.len())
                    .map(|((ns, id), e)| (Expired::Key(ns.clone(), *id), *e)),
            );
        }
        out
    }

    /// Up to `limit` leased keys in shard `shard` that hold nothing at `now` and are no longer kept.
    pub fn ended_requests(&self, shard: usize, now: i64, limit: usize) -> Vec<(ClaimId, RequestEntry)> {
        let shard = self.shards[shard].read().unwrap_or_else(|e| e.into_inner());
        shard.requests.iter().filter(|(_, e)| e.kept_until() <= now).take(limit).map(|(id, e)| (*id, *e)).collect()
    }

    /// Every live entry's location and length, for the space accounting of start-up.
    pub fn for_each_location(&self, mut visit: impl FnMut(Loc, u32)) {
        for shard in &self.shards {
            let shard = shard.read().unwrap_or_else(|e| e.into_inner());
            shard.claims.values().for_each(|e| visit(e.loc(), e.len()));
            shard.requests.values().for_each(|e| visit(e.loc, e.len));
        }
        self.overflow_read().values().for_each(|e| visit(e.loc(), e.len()));
    }

    /// Claims and leased keys held.
    pub fn counts(&self) -> (usize, usize) {
        let mut counts = (self.overflow_read().len(), 0);
        for shard in &self.shards {
            let shard = shard.read().unwrap_or_else(|e| e.into_inner());
            counts.0 += shard.claims.len();
            counts.1 += shard.requests.len();
        }
        counts
    }
}

/// An expired claim found by the sweeper: by tag in the main map, or by full key in the overflow.
#[derive(Debug, Clone)]
pub enum Expired {
    Tag,
    Key(String, ClaimId),
}

/// Which of `parts` start-up threads replays a claim: shards split between them, so that every
/// record of one key is replayed by one thread, in order.
pub fn claim_part(ns: &str, id: &ClaimId, parts: usize) -> usize {
    shard_of(claim_tag(ns, id)) % parts
}

/// Which of `parts` start-up threads replays a leased key.
pub fn request_part(id: &ClaimId, parts: usize) -> usize {
    shard_of(request_tag(id)) % parts
}

fn request_tag(id: &ClaimId) -> u64 {
    let mut first = [0; 8];
    first.copy_from_slice(&id.0[8..16]);
    u64::from_le_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_pack_location_length_and_expiry() {
        let loc = Loc { segment: 70_000, offset: 4_000_000_000 };
        let e = ClaimEntry::new(loc, 1234, 1_767_225_600_123);
        assert_eq!((e.loc(), e.len(), e.expires_at()), (loc, 1234, 1_767_225_600_123));
        assert_eq!(ClaimEntry::new(loc, 1, NEVER).expires_at(), NEVER);
        assert!(ClaimEntry::new(loc, 1, NEVER).is_live(i64::MAX - 1));
        assert!(!e.is_live(1_767_225_600_123) && e.is_live(1_767_225_600_122));
        assert_eq!(std::mem::size_of::<(u64, ClaimEntry)>(), 24);
    }

    #[test]
    fn proper_prefixes_stop_before_the_whole_key() {
        assert!(proper_prefix_tags("n", b"a\0").is_empty());
        assert_eq!(proper_prefix_tags("n", b"a\0b\0c\0"), vec![prefix_tag("n", b"a\0"), prefix_tag("n", b"a\0b\0")]);
        assert_ne!(prefix_tag("n", b"a\0"), prefix_tag("m", b"a\0"));
    }

    fn candidates(answer: PrefixAnswer) -> Option<usize> {
        match answer {
            PrefixAnswer::Yes => None,
            PrefixAnswer::Candidates(c) => Some(c.len()),
        }
    }

    const T: i64 = 1_767_225_600_000;

    #[test]
    fn prefixes_count_claims_without_expiry_and_list_the_others() {
        let index = Index::default();
        let loc = Loc { segment: 1, offset: 16 };
        let prefix = prefix_tag("n", b"p\0");
        let ids: Vec<ClaimId> = (0..100u8).map(|i| ClaimId([i; 32])).collect();
        for (i, id) in ids.iter().enumerate() {
            let expires = if i == 0 { NEVER } else { T + i as i64 };
            index.update_claim(Slot::Main, "n", id, b"p\0x\0", None, Some(ClaimEntry::new(loc, 10, expires)));
        }
        assert!(matches!(index.prefix(prefix, 0, 1), PrefixAnswer::Yes));
        let forever = ClaimEntry::new(loc, 10, NEVER);
        index.update_claim(Slot::Main, "n", &ids[0], b"p\0x\0", Some(forever), None);
        assert_eq!(candidates(index.prefix(prefix, T, usize::MAX)), Some(99));
        assert_eq!(candidates(index.prefix(prefix, T + 50, usize::MAX)), Some(49), "only the live ones");
        for (i, id) in ids.iter().enumerate().skip(1) {
            let entry = ClaimEntry::new(loc, 10, T + i as i64);
            index.update_claim(Slot::Main, "n", id, b"p\0x\0", Some(entry), None);
        }
        assert_eq!(candidates(index.prefix(prefix, 0, 1)), Some(0), "an emptied prefix is gone");
        assert!(
            index.shards.iter().all(|s| s.read().map(|s| s.forever.is_empty() && s.listed.is_empty()).unwrap_or(false))
        );
    }

    #[test]
    fn every_claim_is_listed_under_its_first_part_and_only_there() {
        let index = Index::default();
        let loc = Loc { segment: 1, offset: 16 };
        let (first, deeper) = (prefix_tag("n", b"s1\0"), prefix_tag("n", b"s1\0u1\0"));
        let forever = ClaimEntry::new(loc, 10, NEVER);
        let expiring = ClaimEntry::new(loc, 10, T + 10);
        index.update_claim(Slot::Main, "n", &ClaimId([1; 32]), b"s1\0u1\0n1\0", None, Some(forever));
        index.update_claim(Slot::Main, "n", &ClaimId([2; 32]), b"s1\0u2\0", None, Some(expiring));
        assert_eq!(index.under_first_part(first, T).len(), 2, "with and without expiry");
        assert_eq!(index.under_first_part(first, T + 10).len(), 1, "the expired one is not live");
        assert!(index.under_first_part(deeper, T).is_empty(), "deeper prefixes only count claims without expiry");
        index.update_claim(Slot::Main, "n", &ClaimId([1; 32]), b"s1\0u1\0n1\0", Some(forever), None);
        index.update_claim(Slot::Main, "n", &ClaimId([2; 32]), b"s1\0u2\0", Some(expiring), None);
        assert!(index.under_first_part(first, T).is_empty());
        assert!(
            index.shards.iter().all(|s| s.read().map(|s| s.forever.is_empty() && s.listed.is_empty()).unwrap_or(false))
        );
    }
}
