//! Start-up: replaying the log into a fresh index, and `idem check`.
//!
//! Records replay in log order and the last one of a key wins, with two exceptions that make the
//! replay agree with what was acknowledged: a record already expired is dropped (with whatever
//! older record of its key the index held), and a tombstone removes only the very record it names.

use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use idem_core::Clock;

use crate::index::{ClaimEntry, Index, RequestEntry, Slot, claim_part, request_part};
use crate::record::{self, Loc, Record, RequestRec};
use crate::segment::{self, Damage, Scanned, Segments, Torn};
use crate::writer::Active;
use crate::{LogOptions, OpenError, Shared, Space};

pub fn open(dir: &Path, clock: Arc<dyn Clock>, options: &LogOptions) -> Result<(Shared, Active), OpenError> {
    let dir_error = |source| OpenError::Dir { dir: dir.to_owned(), source };
    let segments = Segments::new(dir.to_owned());
    for number in segment::list(dir).map_err(dir_error)? {
        let file = OpenOptions::new().read(true).write(true).open(segments.path(number)).map_err(dir_error)?;
        segments.insert(number, Arc::new(file));
    }
    let shared = Shared {
        index: Index::default(),
        segments,
        clock,
        space: Mutex::new(BTreeMap::new()),
        head: AtomicU32::new(0),
        fault: Arc::clone(&options.faults),
        namespaces: Mutex::new(HashMap::new()),
    };
    let now = shared.clock.now().millis();
    // Two threads read the whole log, each replaying the keys of its half of the index's shards
    // (every record of a key in one thread, in order); only the first repairs a torn tail.
    let (mine, other) = std::thread::scope(|scope| {
        let other = scope.spawn(|| replay_part(&shared, dir, now, 1, false));
        (replay_part(&shared, dir, now, 0, true), other.join())
    });
    let (scanned, mut counts) = mine?;
    let (_, other_counts) = other.map_err(|_| dir_error(std::io::Error::other("a start-up thread panicked")))??;
    for (ns, n) in other_counts {
        count(&mut counts, &ns, n);
    }
    *shared.namespaces.lock().unwrap_or_else(|e| e.into_inner()) =
        counts.into_iter().map(|(ns, n)| (ns.into_string(), n)).collect();
    let active = match scanned.segments.last() {
        Some(&(number, len)) => {
            let file =
                shared.segments.file(number).ok_or_else(|| dir_error(std::io::Error::other("segment vanished")))?;
            let allocated = file.metadata().map_err(dir_error)?.len().max(len);
            Active { number, file, len, allocated }
        }
        None => {
            let file = Arc::new(segment::create(dir, 1).map_err(dir_error)?);
            shared.segments.insert(1, Arc::clone(&file));
            let len = segment::SEGMENT_HEADER as u64;
            Active { number: 1, file, len, allocated: len }
        }
    };
    shared.head.store(active.number, std::sync::atomic::Ordering::Release);
    *shared.space.lock().unwrap_or_else(|e| e.into_inner()) = space(&shared, &scanned, &active);
    Ok((shared, active))
}

/// Each segment's size, and as garbage whatever no index entry points at.
fn space(shared: &Shared, scanned: &Scanned, active: &Active) -> BTreeMap<u32, Space> {
    let mut live: HashMap<u32, u64> = HashMap::new();
    shared.index.for_each_location(|loc, len| *live.entry(loc.segment).or_default() += u64::from(len));
    let mut space: BTreeMap<u32, Space> = scanned
        .segments
        .iter()
        .map(|&(number, size)| {
            let used = live.get(&number).copied().unwrap_or(0) + segment::SEGMENT_HEADER as u64;
            (number, Space { size, garbage: size.saturating_sub(used) })
        })
        .collect();
    space.entry(active.number).or_insert(Space { size: active.len, garbage: 0 });
    space
}

const PARTS: usize = 2;

fn replay_part(shared: &Shared, dir: &Path, now: i64, part: usize, repair: bool) -> Result<(Scanned, Counts), Damage> {
    let mut counts = Counts::new();
    let scanned =
        segment::scan(dir, repair, &mut |loc, body, len| replay(shared, &mut counts, now, part, loc, body, len))?;
    Ok((scanned, counts))
}

/// Claims counted per namespace while replaying, without a lock or an allocation per record.
type Counts = HashMap<Box<str>, i64>;

fn count(counts: &mut Counts, ns: &str, delta: i64) {
    match counts.get_mut(ns) {
        Some(n) => *n += delta,
        None => {
            counts.insert(ns.into(), delta);
        }
    }
}

fn replay(
    shared: &Shared,
    counts: &mut Counts,
    now: i64,
    part: usize,
    loc: Loc,
    body: &[u8],
    len: u32,
) -> Result<(), String> {
    let index = &shared.index;
    // Claims, nearly every record of a large log, are read without allocating.
    if let Some(claim) = record::claim_view(body)? {
        if claim_part(claim.ns, &claim.id, PARTS) != part {
            return Ok(());
        }
        let found = shared.find_claim(claim.ns, &claim.id).map_err(|e| e.to_string())?;
        let after = (claim.expires_at > now).then(|| ClaimEntry::new(loc, len, claim.expires_at));
        let (slot, before) = match &found.hit {
            Some((slot, entry, _)) => (*slot, Some(*entry)),
            None => (if found.main_taken { Slot::Overflow } else { Slot::Main }, None),
        };
        index.update_claim(slot, claim.ns, &claim.id, claim.parts, before, after);
        match (before, after) {
            (None, Some(_)) => count(counts, claim.ns, 1),
            (Some(_), None) => count(counts, claim.ns, -1),
            _ => {}
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
            if let Some((slot, entry, old)) = shared.find_claim(&ns, &id).map_err(|e| e.to_string())?.hit
                && entry.loc() == gone.target
            {
                index.update_claim(slot, &ns, &id, &old.parts, Some(entry), None);
                count(counts, &ns, -1);
            }
        }
        Record::Request(rec) => replay_request(index, loc, len, &rec, now),
        Record::RequestGone { id, gone } => {
            if index.request(&id).is_some_and(|e| e.loc == gone.target) {
                index.remove_request(&id);
            }
        }
        Record::Claim(_) | Record::Commit { .. } => {}
    }
    Ok(())
}

fn replay_request(index: &Index, loc: Loc, len: u32, rec: &RequestRec, now: i64) {
    if rec.until > now {
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
    /// A group a crash cut short at the end (start-up drops it; nothing acknowledged is in it).
    pub torn: Option<Torn>,
}

/// Reads and verifies every segment without changing anything (safe while idem runs: the group
/// being written at that moment may show as a torn tail).
pub fn check(dir: &Path) -> Result<CheckReport, Damage> {
    let scanned = segment::scan(dir, false, &mut |_, body, _| Record::decode(body).map(drop))?;
    Ok(CheckReport {
        segments: scanned.segments.len(),
        bytes: scanned.segments.iter().map(|(_, len)| len).sum(),
        records: scanned.records,
        torn: scanned.torn,
    })
}
