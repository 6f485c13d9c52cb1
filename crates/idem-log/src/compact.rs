//! Compaction: a sealed segment more than half dead has its live records rewritten at the head of
//! the log, then is deleted.
//!
//! The compactor thread reads the old segment and picks the records the index still points at
//! (and the tombstones still needed: their target's segment still exists and it has not expired).
//! It hands them to the writer in small `Relocate` commands, each one ordinary group: the writer
//! checks again that each record is still the live one, appends it, syncs, and moves the index.
//! Writers wait for at most one such piece at a time. Once every piece is durable the segment is
//! retired: the index entries still pointing into it (expired claims, ended keys the sweeper has
//! not reached yet) leave the index with it, the manifest stops listing it, and then its file is
//! deleted; a reader that found a place in it just before keeps the open file, or looks again. A
//! file whose deletion failed is deleted at the next round (or at start-up: the manifest no longer
//! lists it, so it is never replayed, and nothing it held can come back).
//!
//! The same thread asks the writer every `mark_every` to move the manifest's mark.
//!
//! `idem backup` holds the backup lock while it copies; compaction takes that lock (shared) for
//! each segment it compacts, so no segment is deleted under a backup.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use idem_core::StoreError;
use tokio::sync::{mpsc, oneshot};

use crate::disk::{self, LockGuard, LockKind, OpenMode};
use crate::index::claim_tag;
use crate::record::{self, Frame, Loc, Record};
use crate::segment::SEGMENT_HEADER;
use crate::writer::{Command, Stale};
use crate::{LogOptions, Shared};

/// Records per `Relocate` command: small enough that a group never waits long behind one.
const PIECE_RECORDS: usize = 2_000;
/// The file `idem backup` locks while it copies.
pub const BACKUP_LOCK: &str = "backup.lock";

pub struct Compactor {
    stop: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Compactor {
    pub fn spawn(shared: Arc<Shared>, commands: mpsc::Sender<Command>, options: &LogOptions) -> std::io::Result<Self> {
        let (stop, stopped) = channel();
        let (compact_every, mark_every) = (options.compact_every, options.mark_every);
        let thread = std::thread::Builder::new()
            .name("idem-log-compactor".into())
            .spawn(move || run(&shared, &commands, &stopped, compact_every, mark_every))?;
        Ok(Self { stop, thread: Some(thread) })
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    shared: &Shared,
    commands: &mpsc::Sender<Command>,
    stopped: &Receiver<()>,
    compact_every: Duration,
    mark_every: Option<Duration>,
) {
    let tick = mark_every.map_or(compact_every, |m| m.min(compact_every));
    let mut compacted = Instant::now();
    loop {
        match stopped.recv_timeout(tick) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        if mark_every.is_some() && commands.blocking_send(Command::Mark { reply: None }).is_err() {
            return;
        }
        if compacted.elapsed() < compact_every {
            continue;
        }
        compacted = Instant::now();
        if let Err(e) = compact_all(shared, commands) {
            if matches!(e, StoreError::Closed) {
                return;
            }
            tracing::warn!(error = %e, "log compaction failed; it will be tried again");
        }
    }
}

/// Sealed segments that are more than half dead, most dead first.
fn candidates(shared: &Shared) -> Vec<u32> {
    let head = shared.head.load(Ordering::Acquire);
    let space = shared.space.lock().unwrap_or_else(|e| e.into_inner());
    let mut found: Vec<(u32, f64)> = space
        .iter()
        .filter(|(number, _)| **number < head)
        .filter(|(_, s)| s.garbage * 2 > s.size)
        .map(|(number, s)| (*number, s.garbage as f64 / s.size.max(1) as f64))
        .collect();
    found.sort_by(|a, b| b.1.total_cmp(&a.1));
    found.into_iter().map(|(n, _)| n).collect()
}

/// Compacts every candidate; answers how many segments were retired.
pub fn compact_all(shared: &Shared, commands: &mpsc::Sender<Command>) -> Result<usize, StoreError> {
    let mut done = 0;
    delete_doomed(shared);
    for number in candidates(shared) {
        let Some(_pin) = BackupPin::try_take(shared)? else {
            tracing::debug!("a backup is running; compaction waits");
            return Ok(done);
        };
        compact(shared, commands, number)?;
        done += 1;
    }
    Ok(done)
}

/// Deletes the files of retired segments whose deletion failed before.
fn delete_doomed(shared: &Shared) {
    let mut doomed = shared.doomed.lock().unwrap_or_else(|e| e.into_inner());
    if doomed.is_empty() {
        return;
    }
    let disk = &shared.segments.disk;
    doomed.retain(|&number| {
        let path = shared.segments.path(number);
        disk.exists(&path) && disk.remove_file(&path).is_err()
    });
    if let Err(e) = disk.sync_dir(&shared.segments.dir) {
        tracing::warn!(error = %e, "could not sync the log directory after deleting compacted segments");
    }
}

fn compact(shared: &Shared, commands: &mpsc::Sender<Command>, number: u32) -> Result<(), StoreError> {
    let path = shared.segments.path(number);
    let disk = &shared.segments.disk;
    let unavailable = |e: std::io::Error| StoreError::Unavailable(format!("{}: {e}", path.display()));
    let bytes = disk.open(&path, OpenMode::Read).and_then(|f| disk::read_all(f.as_ref())).map_err(unavailable)?;
    let records = records_of(&bytes, number)
        .map_err(|at| StoreError::Internal(format!("{}: unreadable at byte {at} while compacting", path.display())))?;
    let now = shared.clock.now().millis();
    let mut keep: Vec<(Loc, Record)> =
        records.iter().filter(|(loc, record)| still_needed(shared, number, *loc, record, now)).cloned().collect();
    let (kept, size) = (keep.len(), bytes.len());
    while !keep.is_empty() {
        let piece: Vec<_> = keep.drain(..keep.len().min(PIECE_RECORDS)).collect();
        ask(commands, |reply| Command::Relocate { records: piece, reply })?;
    }
    let stale = stale(shared, &records);
    let dropped = stale.len();
    ask(commands, |reply| Command::Retire { segment: number, stale, reply })?;
    let deleted = disk.remove_file(&path).and_then(|()| disk.sync_dir(&shared.segments.dir));
    if let Err(e) = deleted {
        tracing::warn!(error = %e, file = %path.display(), "could not delete a compacted segment; it is tried again");
        shared.doomed.lock().unwrap_or_else(|e| e.into_inner()).push(number);
    }
    tracing::info!(
        segment = number,
        bytes = size,
        records_kept = kept,
        expired_dropped = dropped,
        "log segment compacted"
    );
    idem_metrics::store::compacted();
    Ok(())
}

/// Every record of a sealed segment with its place; `Err` with the offset of a frame that does
/// not read.
fn records_of(bytes: &[u8], number: u32) -> Result<Vec<(Loc, Record)>, usize> {
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER;
    while at < bytes.len() {
        let Frame::Valid { body, len } = record::frame(&bytes[at..]) else { return Err(at) };
        let loc = Loc { segment: number, offset: at as u32 };
        at += len;
        if record::is_pad(body) {
            continue;
        }
        out.push((loc, Record::decode(body).map_err(|_| loc.offset as usize)?));
    }
    Ok(out)
}

/// The index entries that still point at records of the segment (after its live records were
/// relocated): expired claims and ended keys, which go with it.
fn stale(shared: &Shared, records: &[(Loc, Record)]) -> Vec<Stale> {
    let index = &shared.index;
    records
        .iter()
        .filter_map(|(loc, record)| match record {
            Record::Claim(rec) => {
                let main = index.claim_by_tag(claim_tag(&rec.ns, &rec.id)).filter(|e| e.loc() == *loc);
                let entry = main.or_else(|| index.claim_in_overflow(&rec.ns, &rec.id).filter(|e| e.loc() == *loc));
                entry.map(|_| Stale::Claim { ns: rec.ns.clone(), id: rec.id, parts: rec.parts.clone(), loc: *loc })
            }
            Record::Request(rec) => {
                index.request(&rec.id).filter(|e| e.loc == *loc).map(|_| Stale::Request { id: rec.id, loc: *loc })
            }
            _ => None,
        })
        .collect()
}

/// Does this record of segment `number` have to outlive it?
fn still_needed(shared: &Shared, number: u32, loc: Loc, record: &Record, now: i64) -> bool {
    match record {
        Record::Claim(rec) => {
            let main = shared.index.claim_by_tag(claim_tag(&rec.ns, &rec.id));
            let entry = main.filter(|e| e.loc() == loc).or_else(|| shared.index.claim_in_overflow(&rec.ns, &rec.id));
            entry.is_some_and(|e| e.loc() == loc && e.is_live(now))
        }
        Record::Request(rec) => shared.index.request(&rec.id).is_some_and(|e| e.loc == loc && e.kept_until() > now),
        Record::ClaimGone { gone, .. } | Record::RequestGone { gone, .. } => {
            gone.target.segment != number && gone.until > now && shared.segments.contains(gone.target.segment)
        }
        Record::Commit { .. } => false,
    }
}

fn ask<T>(
    commands: &mpsc::Sender<Command>,
    make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Command,
) -> Result<T, StoreError> {
    let (tx, rx) = oneshot::channel();
    commands.blocking_send(make(tx)).map_err(|_| StoreError::Closed)?;
    rx.blocking_recv().map_err(|_| StoreError::Closed)?
}

/// A shared hold on the backup lock: while compaction holds it, no backup starts copying, and
/// while a backup holds it (exclusively), compaction deletes nothing.
struct BackupPin(#[allow(dead_code)] LockGuard);

impl BackupPin {
    fn try_take(shared: &Shared) -> Result<Option<Self>, StoreError> {
        let path = shared.segments.dir.join(BACKUP_LOCK);
        match shared.segments.disk.lock(&path, LockKind::Shared, false) {
            Ok(guard) => Ok(guard.map(Self)),
            Err(e) => Err(StoreError::Unavailable(format!("{}: {e}", path.display()))),
        }
    }
}
