//! `idem backup`: a consistent copy of the log while idem keeps serving.
//!
//! The log only grows at its head, and (while the backup lock is held) no segment is deleted, so
//! a copy of every segment the manifest lists, oldest first, with the newest cut at its last whole
//! group, is the log as it stood at one instant: exactly what a restart after a crash at that
//! instant would find. If a new segment was started while copying, the one before it is copied
//! again whole and the new one is copied too, until none appears. The copy gets a manifest of its
//! own, and is verified as start-up would before the backup reports success.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use crate::compact::BACKUP_LOCK;
use crate::disk::{self, Disk, LockKind, OpenMode};
use crate::manifest::{Manifest, Mark, Sealed};
use crate::segment;
use crate::verify;

/// What a backup copied.
#[derive(Debug, Default)]
pub struct BackupReport {
    pub segments: usize,
    pub bytes: u64,
    pub records: u64,
}

/// Copies the log in `from` into `to` (created; must not hold a log already).
pub fn backup(disk: &dyn Disk, from: &Path, to: &Path) -> io::Result<BackupReport> {
    disk::create_dir_durable(disk, to)?;
    if !segment::list(disk, to)?.is_empty() || disk.exists(&to.join(crate::manifest::FILE)) {
        return Err(io::Error::other(format!("{} already holds a log; back up into an empty directory", to.display())));
    }
    let _lock = disk.lock(&from.join(BACKUP_LOCK), LockKind::Exclusive, true)?;
    // Each copied segment: (length copied, records in it).
    let mut copied: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    loop {
        let numbers = listed(disk, from)?;
        let Some(&newest) = numbers.last() else { break };
        for &number in &numbers {
            let file = disk.open(&from.join(segment::file_name(number)), OpenMode::Read)?;
            let bytes = disk::read_all(file.as_ref())?;
            let scan = segment::scan(number, &bytes, None, &mut |_, _, _| Ok(()))
                .map_err(|why| io::Error::other(format!("segment {number}: {why}")))?;
            if number != newest && (scan.end != bytes.len() as u64 || !scan.bad.is_empty()) {
                return Err(io::Error::other(format!(
                    "segment {number} is damaged (`idem check` tells more); nothing was backed up"
                )));
            }
            let keep = (scan.end, scan.records);
            if copied.get(&number) != Some(&keep) {
                disk::write_file(disk, &to.join(segment::file_name(number)), &bytes[..scan.end as usize])?;
                copied.insert(number, keep);
            }
        }
        if listed(disk, from)?.last() == Some(&newest) {
            break;
        }
    }
    copied.retain(|number, _| listed(disk, from).is_ok_and(|l| l.contains(number)));
    let manifest = match copied.iter().next_back() {
        Some((&head, &(len, records))) => Manifest {
            sealed: copied
                .iter()
                .filter(|(n, _)| **n != head)
                .map(|(&number, &(len, records))| Sealed { number, len, records })
                .collect(),
            head,
            mark: Mark { len, records },
        },
        None => Manifest::new(1, segment::SEGMENT_HEADER as u64),
    };
    if copied.is_empty() {
        segment::create(disk, to, 1)?;
    }
    manifest.write(disk, to)?;
    let verdict = verify::verify(disk, to, &mut |_, _, _| Ok(()));
    if let Some(damage) = verdict.damage.first() {
        return Err(io::Error::other(format!("the copy does not verify: {damage}")));
    }
    Ok(BackupReport {
        segments: copied.len().max(1),
        bytes: copied.values().map(|(len, _)| len).sum(),
        records: copied.values().map(|(_, records)| records).sum(),
    })
}

/// The segments of the log in `dir`: those its manifest lists, or (before the manifest) all.
fn listed(disk: &dyn Disk, dir: &Path) -> io::Result<Vec<u32>> {
    let numbers = segment::list(disk, dir)?;
    match Manifest::read(disk, dir).map_err(io::Error::other)? {
        Some(manifest) => Ok(numbers.into_iter().filter(|n| manifest.lists(*n)).collect()),
        None => Ok(numbers),
    }
}
