//! Start-up: replaying the log into a fresh index, and `idem check`.
//!
//! Records replay in log order and the last one of a key wins, with two exceptions that make the
//! replay agree with what was acknowledged: a record already expired is dropped (with whatever
//! older record of its key the index held), and a tombstone removes only the very record it names.
//! What the files hold is judged by [`crate::verify`]: damage stops start-up; a torn tail is cut
//! off; segment files the manifest no longer lists are deleted. Start-up then syncs the head and
//! writes the manifest with its mark at the head's end.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use idem_core::{Clock, StoreError};

use crate::counts::Counts;
use crate::disk::{Disk, OpenMode};
use crate::index::{ClaimEntry, Index, RequestEntry, Slot, claim_part, request_part};
use crate::manifest::Manifest;
use crate::record::{self, ClaimView, Loc, Record, RequestRec};
use crate::segment::{self, Segments, Unreadable};
use crate::table;
use crate::verify::{self, Damage, Torn, Verdict};
use crate::writer::Active;
use crate::{LogOptions, OpenError, Shared, Space};

pub fn open(dir: &Path, clock: Arc<dyn Clock>, options: &LogOptions) -> Result<(Shared, Active, Manifest), OpenError> {
    let disk = Arc::clone(&options.disk);
    let dir_error = |source| OpenError::Dir { dir: dir.to_owned(), source };
    let segments = Segments::new(Arc::clone(&disk), dir.to_owned());
    for number in segment::list(disk.as_ref(), dir).map_err(dir_error)? {
        let file = disk.open(&segments.path(number), OpenMode::ReadWrite).map_err(dir_error)?;
        segments.insert(number, file);
    }
    let shared = Shared {
        index: Index::default(),
        segments,
        clock,
        space: Mutex::new(BTreeMap::new()),
        head: AtomicU32::new(0),
        counts: Mutex::new(Counts::default()),
        doomed: Mutex::new(Vec::new()),
        preallocate: options.preallocate,
        last_fence: std::sync::atomic::AtomicU64::new(0),
    };
    let (verdict, counts) = replay_all(&shared, dir)?;
    if !verdict.damage.is_empty() {
        return Err(OpenError::Damaged(verdict.damage));
    }
    *shared.counts.lock().unwrap_or_else(|e| e.into_inner()) = counts;
    settle(disk.as_ref(), dir, &shared, &verdict).map_err(dir_error)?;
    let active = open_head(disk.as_ref(), dir, &shared, &verdict).map_err(dir_error)?;
    if verdict.without_manifest {
        // A log from before the manifest: its sealed segments are made durable once, before the
        // manifest vouches for their lengths.
        for found in verdict.segments.iter().rev().skip(1) {
            let file = disk.open(&shared.segments.path(found.number), OpenMode::ReadWrite).map_err(dir_error)?;
            file.sync_data().map_err(dir_error)?;
        }
    }
    let manifest = verdict.manifest_now().unwrap_or_else(|| Manifest::new(active.number, active.len));
    manifest.write(disk.as_ref(), dir).map_err(dir_error)?;
    if verdict.without_manifest && verdict.segments.len() > 1 {
        tracing::info!(dir = %dir.display(), segments = verdict.segments.len(), "the log now keeps a manifest");
    }
    shared.head.store(active.number, std::sync::atomic::Ordering::Release);
    *shared.space.lock().unwrap_or_else(|e| e.into_inner()) = space(&shared, &verdict, &active);
    Ok((shared, active, manifest))
}

/// Two threads read the whole log, each replaying the keys of its half of the index's shards
/// (every record of a key in one thread, in order); both judge it the same way. The index's
/// tables are merged less often meanwhile ([`table::replaying`]), and settled at the end.
fn replay_all(shared: &Shared, dir: &Path) -> Result<(Verdict, Counts), OpenError> {
    let now = shared.clock.now().millis();
    let dir_error = |source| OpenError::Dir { dir: dir.to_owned(), source };
    let replayed = std::thread::scope(|scope| {
        let other = scope.spawn(|| table::replaying(|| replay_part(shared, dir, now, 1)));
        let (verdict, mut counts) = table::replaying(|| replay_part(shared, dir, now, 0));
        let other = other.join().map_err(|_| dir_error(std::io::Error::other("a start-up thread panicked")))?;
        counts.merge(other.1);
        Ok((verdict, counts))
    });
    shared.index.settle();
    replayed
}

/// The segment writes go to: the newest found (synced first: what start-up read may be in the
/// page cache only, after a kill -9, and the mark is about to vouch for it), or a new first one.
fn open_head(disk: &dyn Disk, dir: &Path, shared: &Shared, verdict: &Verdict) -> std::io::Result<Active> {
    match verdict.segments.last() {
        Some(head) => {
            let file = disk.open(&shared.segments.path(head.number), OpenMode::ReadWrite)?;
            file.sync_data()?;
            let allocated = file.size()?.max(head.end);
            Ok(Active { number: head.number, file, len: head.end, allocated, records: head.records, dirty: false })
        }
        None => {
            let file = segment::create(disk, dir, 1)?;
            shared.segments.insert(1, Arc::clone(&file));
            let len = segment::SEGMENT_HEADER as u64;
            Ok(Active { number: 1, file, len, allocated: len, records: 0, dirty: false })
        }
    }
}

/// Cuts a torn tail off and deletes the files the manifest no longer lists.
fn settle(disk: &dyn Disk, dir: &Path, shared: &Shared, verdict: &Verdict) -> std::io::Result<()> {
    if let Some(torn) = &verdict.torn {
        tracing::warn!(
            file = %shared.segments.path(torn.segment).display(), offset = torn.offset, bytes = torn.bytes,
            "dropping a torn tail: the group a crash cut short (it was never acknowledged)"
        );
        segment::cut(disk, &shared.segments.path(torn.segment), torn.segment, torn.offset)?;
    }
    for &number in &verdict.leftovers {
        tracing::info!(segment = number, "deleting a segment the log no longer lists (compacted, or never used)");
        shared.segments.remove(number);
        disk.remove_file(&shared.segments.path(number))?;
    }
    if !verdict.leftovers.is_empty() {
        disk.sync_dir(dir)?;
    }
    Ok(())
}

/// Each segment's size, and as garbage whatever no index entry points at.
fn space(shared: &Shared, verdict: &Verdict, active: &Active) -> BTreeMap<u32, Space> {
    let mut live: HashMap<u32, u64> = HashMap::new();
    shared.index.for_each_location(|loc, len| *live.entry(loc.segment).or_default() += u64::from(len));
    let mut space: BTreeMap<u32, Space> = verdict
        .segments
        .iter()
        .map(|found| {
            let used = live.get(&found.number).copied().unwrap_or(0) + segment::SEGMENT_HEADER as u64;
            (found.number, Space { size: found.end, garbage: found.end.saturating_sub(used) })
        })
        .collect();
    space.entry(active.number).or_insert(Space { size: active.len, garbage: 0 });
    space
}

const PARTS: usize = 2;

fn replay_part(shared: &Shared, dir: &Path, now: i64, part: usize) -> (Verdict, Counts) {
    let mut counts = Counts::default();
    let disk = Arc::clone(&shared.segments.disk);
    let verdict = verify::verify(disk.as_ref(), dir, &mut |loc, body, len| {
        replay(shared, &mut counts, now, part, loc, body, len)
    });
    (verdict, counts)
}

fn replay(
    shared: &Shared,
    counts: &mut Counts,
    now: i64,
    part: usize,
    loc: Loc,
    body: &[u8],
    len: u32,
) -> Result<(), Unreadable> {
    let index = &shared.index;
    // Claims, nearly every record of a large log, are read without allocating.
    if let Some(claim) = record::claim_view(body)? {
        if claim_part(claim.ns, &claim.id, PARTS) == part {
            replay_claim(shared, counts, now, &claim, loc, len)?;
        }
        return Ok(());
    }
    let record = Record::decode(body)?;
    let owner = match &record {
        Record::ClaimGone { ns, id, .. } => claim_part(ns, id, PARTS),
        Record::Request(RequestRec { id, .. }) | Record::RequestGone { id, .. } => request_part(id, PARTS),
        Record::Claim(_) | Record::Commit { .. } => part,
    };
    if owner != part {
        return Ok(());
    }
    match record {
        Record::ClaimGone { ns, id, gone } => {
            if let Some((slot, entry, old)) = shared.find_claim(&ns, &id)?.hit
                && entry.loc() == gone.target
            {
                index.update_claim(slot, &ns, &id, &old.parts, Some(entry), None);
                counts.add(&ns, entry.expires_at(), -1);
            }
        }
        Record::Request(rec) => {
            shared.last_fence.fetch_max(rec.fence, std::sync::atomic::Ordering::Relaxed);
            replay_request(index, loc, len, &rec, now)
        }
        Record::RequestGone { id, gone } => {
            if index.request(&id).is_some_and(|e| e.loc == gone.target) {
                index.remove_request(&id);
            }
        }
        Record::Claim(_) | Record::Commit { .. } => {}
    }
    Ok(())
}

fn replay_claim(
    shared: &Shared,
    counts: &mut Counts,
    now: i64,
    claim: &ClaimView<'_>,
    loc: Loc,
    len: u32,
) -> Result<(), StoreError> {
    let found = shared.find_claim(claim.ns, &claim.id)?;
    let after = (claim.expires_at > now).then(|| ClaimEntry::new(loc, len, claim.expires_at));
    let (slot, before) = match &found.hit {
        Some((slot, entry, _)) => (*slot, Some(*entry)),
        None => (if found.main_taken { Slot::Overflow } else { Slot::Main }, None),
    };
    shared.index.update_claim(slot, claim.ns, &claim.id, claim.parts, before, after);
    if before != after {
        if let Some(before) = before {
            counts.add(claim.ns, before.expires_at(), -1);
        }
        if let Some(after) = after {
            counts.add(claim.ns, after.expires_at(), 1);
        }
    }
    Ok(())
}

fn replay_request(index: &Index, loc: Loc, len: u32, rec: &RequestRec, now: i64) {
    if rec.kept_until() > now {
        let entry = RequestEntry { loc, len, until: rec.until, completed: rec.completed, token: rec.token };
        index.set_request(&rec.id, entry);
    } else {
        index.remove_request(&rec.id);
    }
}

/// What `idem check` found in a log directory.
#[derive(Debug)]
pub struct CheckReport {
    pub segments: usize,
    pub bytes: u64,
    pub records: u64,
    /// Acknowledged records that cannot be read, and files that should not be there: `idem repair`
    /// fixes them. Start-up refuses a log with any.
    pub damage: Vec<Damage>,
    /// A group a crash cut short at the end (start-up drops it; nothing acknowledged is in it).
    pub torn: Option<Torn>,
    /// Segment files the manifest no longer lists (start-up deletes them).
    pub leftovers: Vec<u32>,
    /// The log has no manifest yet (written before idem kept one; start-up writes it).
    pub without_manifest: bool,
}

/// Reads and verifies every segment without changing anything. Safe while idem runs: it holds
/// the backup lock (so compaction deletes nothing meanwhile), judges again if a segment was started
/// while it read, and the group being written at that moment may show as a torn tail.
pub fn check(disk: &dyn Disk, dir: &Path) -> std::io::Result<CheckReport> {
    let _pin = disk.lock(&dir.join(crate::compact::BACKUP_LOCK), crate::disk::LockKind::Exclusive, true)?;
    let manifest_bytes = || {
        disk.open(&dir.join(crate::manifest::FILE), OpenMode::Read).and_then(|f| crate::disk::read_all(f.as_ref())).ok()
    };
    let mut tries = 0;
    let verdict = loop {
        let before = manifest_bytes();
        let verdict = verify::verify(disk, dir, &mut |_, body, _| Record::decode(body).map(drop).map_err(Into::into));
        tries += 1;
        if before == manifest_bytes() || tries == 5 {
            break verdict;
        }
    };
    Ok(CheckReport {
        segments: verdict.segments.len(),
        bytes: verdict.segments.iter().map(|s| s.end).sum(),
        records: verdict.segments.iter().map(|s| s.records).sum(),
        damage: verdict.damage,
        torn: verdict.torn,
        leftovers: verdict.leftovers,
        without_manifest: verdict.without_manifest,
    })
}
