//! The syncer: the second half of the pipelined group commit.
//!
//! The writer decides a group, writes it (`pwrite`) and hands it here; while this thread waits for
//! `fdatasync`, the writer decides and writes the next group, so the disk's sync time and the
//! writer's work overlap instead of adding up. One sync covers every group written by then. Only
//! after its sync returns is a group applied to the index, in order, and are its callers answered.
//!
//! The writer decides from the index, which holds only synced groups. A command that touches a key
//! of a group not yet applied waits until it is ([`SyncState::wait_applied`]), so every decision
//! sees every earlier change to its key.
//!
//! If a sync fails, that batch's groups and every group written after them fail whole: none was
//! acknowledged. The writer then cuts the file back to where the first of them began and goes on.

use std::fs::File;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use idem_core::StoreError;

use tokio::sync::mpsc::WeakSender;

use crate::writer::{Command, Effects, Pending};
use crate::{Shared, io_error};

/// A group the writer has written, on its way to being synced, applied and answered.
pub struct Written {
    pub seq: u64,
    pub file: Arc<File>,
    pub segment: u32,
    /// Where the group's bytes begin, and where the segment ends after them.
    pub start: u64,
    pub end: u64,
    /// Whether any bytes were written (a group of reads alone has nothing to sync).
    pub wrote: bool,
    pub effects: Effects,
    pub done: Vec<Pending>,
    pub started: Instant,
}

/// A failed sync, until the writer has cut the file back.
#[derive(Clone)]
struct Failure {
    from_seq: u64,
    segment: u32,
    offset: u64,
    error: StoreError,
}

#[derive(Default)]
struct Inner {
    /// Every group up to this one is applied (or failed).
    applied: u64,
    failure: Option<Failure>,
    /// Groups below this one were written before the file was cut back: they fail.
    void_below: u64,
}

#[derive(Default)]
pub struct SyncState {
    inner: Mutex<Inner>,
    changed: Condvar,
}

impl SyncState {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until group `seq` is applied; its failure if it failed.
    pub fn wait_applied(&self, seq: u64) -> Result<(), StoreError> {
        let mut inner = self.lock();
        loop {
            if let Some(failure) = inner.failure.as_ref().filter(|f| seq >= f.from_seq) {
                return Err(failure.error.clone());
            }
            if inner.applied >= seq {
                return Ok(());
            }
            inner = self.changed.wait(inner).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub fn applied(&self) -> u64 {
        self.lock().applied
    }

    /// The failure the writer has yet to clean up after, if any.
    pub fn failure(&self) -> Option<StoreError> {
        self.lock().failure.as_ref().map(|f| f.error.clone())
    }

    /// Takes a failure for cleaning up: where to cut which segment back to. Groups numbered below
    /// `next_seq` that reach the syncer from now on fail.
    pub fn take_failure(&self, next_seq: u64) -> Option<(u32, u64)> {
        let mut inner = self.lock();
        let failure = inner.failure.take()?;
        inner.void_below = next_seq;
        inner.applied = inner.applied.max(next_seq.saturating_sub(1));
        self.changed.notify_all();
        Some((failure.segment, failure.offset))
    }
}

/// Runs until the writer drops its end of the channel. After a failed sync it wakes the writer
/// (`wake`, a readiness probe) so that the failed groups are cut off the file at once, not when
/// the next command comes.
pub fn run(shared: &Shared, state: &SyncState, queue: &Receiver<Written>, wake: &WeakSender<Command>) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        batch.extend(queue.try_iter());
        let (pending_failure, void_below) = {
            let inner = state.lock();
            (inner.failure.clone().map(|f| f.error), inner.void_below)
        };
        // Groups written before the file was cut back fail; those after it are the new log.
        let live = batch.split_off(batch.partition_point(|g| g.seq < void_below));
        if !batch.is_empty() {
            finish(shared, state, batch, Err(StoreError::Unavailable("an earlier log write failed".into())), false);
        }
        if live.is_empty() {
            continue;
        }
        match pending_failure {
            Some(error) => finish(shared, state, live, Err(error), false),
            None => {
                let result = sync(shared, &live);
                let failed = result.is_err();
                finish(shared, state, live, result, true);
                if failed && let Some(writer) = wake.upgrade() {
                    let (reply, _) = tokio::sync::oneshot::channel();
                    let _ = writer.try_send(Command::Probe { reply });
                }
            }
        }
    }
}

/// One `fdatasync` per file written in the batch (one, except across a new segment).
fn sync(shared: &Shared, batch: &[Written]) -> Result<(), StoreError> {
    let mut synced: Vec<u32> = Vec::new();
    for group in batch.iter().rev().filter(|g| g.wrote) {
        if synced.contains(&group.segment) {
            continue;
        }
        shared.fault.before_sync().and_then(|()| group.file.sync_data()).map_err(|e| io_error(&e))?;
        synced.push(group.segment);
    }
    Ok(())
}

/// Applies and answers a batch that synced, or fails it whole; a failed sync (`new_failure`) is
/// recorded for the writer to clean up after.
fn finish(shared: &Shared, state: &SyncState, batch: Vec<Written>, result: Result<(), StoreError>, new_failure: bool) {
    let last = batch.last().map_or(0, |g| g.seq);
    match result {
        Ok(()) => {
            for group in batch {
                group.effects.apply(shared);
                if group.wrote {
                    let mut space = shared.space.lock().unwrap_or_else(|e| e.into_inner());
                    let size = &mut space.entry(group.segment).or_default().size;
                    *size = (*size).max(group.end);
                }
                group.done.into_iter().for_each(|p| p(None));
                metrics::histogram!("idem_store_commit_seconds").record(group.started.elapsed().as_secs_f64());
            }
        }
        Err(error) => {
            if new_failure {
                tracing::warn!(error = %error, groups = batch.len(), "log sync failed; those groups failed whole");
                metrics::counter!("idem_store_commit_errors_total").increment(1);
                let mut inner = state.lock();
                if let Some(first) = batch.first().filter(|_| inner.failure.is_none()) {
                    let failure = Failure {
                        from_seq: first.seq,
                        segment: first.segment,
                        offset: first.start,
                        error: error.clone(),
                    };
                    inner.failure = Some(failure);
                }
            }
            for group in batch {
                group.done.into_iter().for_each(|p| p(Some(&error)));
            }
        }
    }
    let mut inner = state.lock();
    inner.applied = inner.applied.max(last);
    state.changed.notify_all();
}
