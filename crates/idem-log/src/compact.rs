//! Compaction: a sealed segment more than half dead has its live records rewritten at the head of
//! the log, then is deleted.
//!
//! The compactor thread reads the old segment and picks the records the index still points at
//! (and the tombstones still needed: their target's segment still exists and it has not expired).
//! It hands them to the writer in small `Relocate` commands, each one ordinary group: the writer
//! checks again that each record is still the live one, appends it, syncs, and moves the index.
//! Writers wait for at most one such piece at a time. Once every piece is durable the segment is
//! retired and its file deleted; a reader that found a place in it just before keeps the open file.
//!
//! `idem backup` holds the backup lock while it copies; compaction takes that lock (shared) for
//! each segment it compacts, so no segment is deleted under a backup.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::Duration;

use idem_core::StoreError;
use tokio::sync::{mpsc, oneshot};

use crate::Shared;
use crate::index::claim_tag;
use crate::record::{self, Frame, Loc, Record};
use crate::segment::{self, SEGMENT_HEADER};
use crate::writer::Command;

/// Records per `Relocate` command: small enough that a group never waits long behind one.
const PIECE_RECORDS: usize = 2_000;
/// The file `idem backup` locks while it copies.
pub const BACKUP_LOCK: &str = "backup.lock";

pub struct Compactor {
    stop: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Compactor {
    pub fn spawn(shared: Arc<Shared>, commands: mpsc::Sender<Command>, every: Duration) -> std::io::Result<Self> {
        let (stop, stopped) = channel();
        let thread = std::thread::Builder::new()
            .name("idem-log-compactor".into())
            .spawn(move || run(&shared, &commands, &stopped, every))?;
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

fn run(shared: &Shared, commands: &mpsc::Sender<Command>, stopped: &Receiver<()>, every: Duration) {
    loop {
        match stopped.recv_timeout(every) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
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

/// Compacts every candidate; answers how many segments were deleted.
pub fn compact_all(shared: &Shared, commands: &mpsc::Sender<Command>) -> Result<usize, StoreError> {
    let mut done = 0;
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

fn compact(shared: &Shared, commands: &mpsc::Sender<Command>, number: u32) -> Result<(), StoreError> {
    let path = shared.segments.path(number);
    let bytes = std::fs::read(&path).map_err(|e| StoreError::Unavailable(format!("{}: {e}", path.display())))?;
    let now = shared.clock.now().millis();
    let mut keep = Vec::new();
    let mut at = SEGMENT_HEADER;
    while at < bytes.len() {
        let Frame::Valid { body, len } = record::frame(&bytes[at..]) else {
            return Err(StoreError::Internal(format!("{}: unreadable at byte {at} while compacting", path.display())));
        };
        let loc = Loc { segment: number, offset: at as u32 };
        at += len;
        let record = Record::decode(body).map_err(StoreError::Internal)?;
        if still_needed(shared, number, loc, &record, now) {
            keep.push((loc, record));
        }
    }
    let (kept, size) = (keep.len(), bytes.len());
    while !keep.is_empty() {
        let piece: Vec<_> = keep.drain(..keep.len().min(PIECE_RECORDS)).collect();
        ask(commands, |reply| Command::Relocate { records: piece, reply })?;
    }
    ask(commands, |reply| Command::Retire { segment: number, reply })?;
    std::fs::remove_file(&path).map_err(|e| StoreError::Unavailable(format!("{}: {e}", path.display())))?;
    let _ = segment::sync_dir(&shared.segments.dir);
    tracing::info!(segment = number, bytes = size, records_kept = kept, "log segment compacted");
    metrics::counter!("idem_store_compactions_total").increment(1);
    Ok(())
}

/// Does this record of segment `number` have to outlive it?
fn still_needed(shared: &Shared, number: u32, loc: Loc, record: &Record, now: i64) -> bool {
    match record {
        Record::Claim(rec) => {
            let main = shared.index.claim_by_tag(claim_tag(&rec.ns, &rec.id));
            let entry = main.filter(|e| e.loc() == loc).or_else(|| shared.index.claim_in_overflow(&rec.ns, &rec.id));
            entry.is_some_and(|e| e.loc() == loc && e.is_live(now))
        }
        Record::Request(rec) => shared.index.request(&rec.id).is_some_and(|e| e.loc == loc && e.until > now),
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
struct BackupPin(File);

impl BackupPin {
    fn try_take(shared: &Shared) -> Result<Option<Self>, StoreError> {
        let path = shared.segments.dir.join(BACKUP_LOCK);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StoreError::Unavailable(format!("{}: {e}", path.display())))?;
        match file.try_lock_shared() {
            Ok(()) => Ok(Some(Self(file))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(StoreError::Unavailable(format!("{}: {e}", path.display()))),
        }
    }
}

impl Drop for BackupPin {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}
