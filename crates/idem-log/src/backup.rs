//! `idem backup`: a consistent copy of the log while idem keeps serving.
//!
//! The log only grows at its head, and (while the backup lock is held) no segment is deleted, so
//! a copy of every segment, oldest first, with the newest cut at its last whole group, is the log
//! as it stood at one instant: exactly what a restart after a crash at that instant would find. If
//! a new segment was started while copying, the one before it is copied again whole and the new
//! one is copied too, until none appears.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::compact::BACKUP_LOCK;
use crate::record::{self, Frame};
use crate::segment::{self, SEGMENT_HEADER};

/// What a backup copied.
#[derive(Debug, Default)]
pub struct BackupReport {
    pub segments: usize,
    pub bytes: u64,
}

/// Copies the log in `from` into `to` (created; must not hold a log already).
pub fn backup(from: &Path, to: &Path) -> std::io::Result<BackupReport> {
    std::fs::create_dir_all(to)?;
    if !segment::list(to)?.is_empty() {
        return Err(std::io::Error::other(format!(
            "{} already holds a log; back up into an empty directory",
            to.display()
        )));
    }
    let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(from.join(BACKUP_LOCK))?;
    lock.lock()?;
    let mut copied: BTreeMap<u32, u64> = BTreeMap::new();
    loop {
        let numbers = segment::list(from)?;
        let Some(&newest) = numbers.last() else { break };
        for &number in &numbers {
            let bytes = std::fs::read(from.join(segment::file_name(number)))?;
            let keep = if number == newest { whole_groups(&bytes) } else { bytes.len() };
            if copied.get(&number) != Some(&(keep as u64)) {
                write_synced(&to.join(segment::file_name(number)), &bytes[..keep])?;
                copied.insert(number, keep as u64);
            }
        }
        if segment::list(from)?.last() == Some(&newest) {
            break;
        }
    }
    segment::sync_dir(to)?;
    lock.unlock()?;
    Ok(BackupReport { segments: copied.len(), bytes: copied.values().sum() })
}

/// The length of `bytes` up to the end of its last whole group.
fn whole_groups(bytes: &[u8]) -> usize {
    let (mut at, mut end) = (SEGMENT_HEADER, SEGMENT_HEADER.min(bytes.len()));
    while at < bytes.len() {
        let Frame::Valid { len, .. } = record::frame(&bytes[at..]) else { break };
        if record::is_commit_frame(&bytes[at..]) {
            end = at + len;
        }
        at += len;
    }
    end
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}
