//! `idem repair`: what to drop from a damaged log so that idem starts again, keeping every intact
//! record. Without `apply` it only says what it would do.
//!
//! For each damage [`crate::verify`] found: a segment that is missing leaves the manifest; a
//! stretch that cannot be read is covered by a padding frame when an intact group follows it
//! (every later group is kept, at its offset, so tombstones still name their records), or cut off
//! when none does; a segment whose header is unreadable is moved aside (`NNNNNNNN.log.damaged`).
//! Every file it changes is first copied into `damaged/` in the log directory. Then it writes a
//! manifest for the log as it now is and verifies it again.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::disk::{self, Disk, LockKind, OpenMode};
use crate::manifest::{Manifest, Mark, Sealed};
use crate::record;
use crate::segment::{self, SEGMENT_HEADER};
use crate::verify::{self, Damage, Fix};

/// What `idem repair` found, and did.
#[derive(Debug, Default)]
pub struct RepairReport {
    pub damage: Vec<Damage>,
    /// What was (or, without `apply`, would be) done, one line each.
    pub actions: Vec<String>,
    /// Acknowledged records dropped, where they could be counted.
    pub lost_records: u64,
    /// Some damage's loss could not be counted (at least one group each).
    pub uncounted: usize,
    /// Bytes dropped from segment files (cut off, padded over, or in files moved aside).
    pub lost_bytes: u64,
    /// Copies of the files changed, made before changing them.
    pub saved: Vec<PathBuf>,
    pub applied: bool,
}

/// Judges the log in `dir` and, with `apply`, repairs it. The log must not be in use.
pub fn repair(disk: &dyn Disk, dir: &Path, apply: bool) -> io::Result<RepairReport> {
    let Some(_lock) = disk.lock(&dir.join(crate::LogStore::LOCK_FILE), LockKind::Exclusive, false)? else {
        return Err(io::Error::other(format!(
            "{} is in use by a running idem; stop it before repairing",
            dir.display()
        )));
    };
    let verdict = verify::verify(disk, dir, &mut |_, _, _| Ok(()));
    let mut report = RepairReport { damage: verdict.damage.clone(), applied: apply, ..RepairReport::default() };
    if verdict.damage.is_empty() {
        return Ok(report);
    }
    let plan = plan(&verdict.damage);
    for damage in &verdict.damage {
        match damage.lost_records {
            Some(n) => report.lost_records += n,
            None => report.uncounted += 1,
        }
    }
    for (&number, fix) in &plan {
        report.lost_bytes += lost_bytes(disk, dir, number, fix);
        report.actions.push(describe(dir, number, fix));
    }
    if verdict.damage.iter().any(|d| d.fix == Fix::RebuildManifest) || !plan.is_empty() {
        report.actions.push(format!("write a new manifest for {}", dir.display()));
    }
    if !apply {
        return Ok(report);
    }
    for (&number, fix) in &plan {
        if let Some(saved) = save(disk, dir, number)? {
            report.saved.push(saved);
        }
        fix_segment(disk, dir, number, fix)?;
    }
    let forgotten: Vec<u32> = plan.iter().filter(|(_, f)| matches!(f, SegmentFix::Forget)).map(|(n, _)| *n).collect();
    let manifest = rebuild(disk, dir, verdict.manifest.as_ref(), &forgotten)?;
    manifest.write(disk, dir)?;
    let again = verify::verify(disk, dir, &mut |_, _, _| Ok(()));
    if let Some(left) = again.damage.first() {
        return Err(io::Error::other(format!("repair left damage behind: {left}")));
    }
    Ok(report)
}

/// What to do to one segment: the damages of a segment combine into one fix.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SegmentFix {
    Forget,
    SetAside,
    /// Padding over these stretches, then a cut at `cut` (if any).
    Mend {
        pads: Vec<(u64, u64)>,
        cut: Option<u64>,
    },
}

fn plan(damage: &[Damage]) -> BTreeMap<u32, SegmentFix> {
    let mut plan: BTreeMap<u32, SegmentFix> = BTreeMap::new();
    for d in damage {
        let (number, fix) = match d.fix {
            Fix::Forget { segment } => (segment, SegmentFix::Forget),
            Fix::SetAside { segment } => (segment, SegmentFix::SetAside),
            Fix::Cut { segment, end } => (segment, SegmentFix::Mend { pads: Vec::new(), cut: Some(end) }),
            Fix::Pad { segment, start, end } => (segment, SegmentFix::Mend { pads: vec![(start, end)], cut: None }),
            Fix::RebuildManifest => continue,
        };
        let merged = match (plan.remove(&number), fix) {
            (None, fix) => fix,
            (Some(SegmentFix::Forget), _) | (_, SegmentFix::Forget) => SegmentFix::Forget,
            (Some(SegmentFix::SetAside), _) | (_, SegmentFix::SetAside) => SegmentFix::SetAside,
            (Some(SegmentFix::Mend { mut pads, cut }), SegmentFix::Mend { pads: more, cut: other }) => {
                pads.extend(more);
                let cut = match (cut, other) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                pads.retain(|(start, _)| cut.is_none_or(|c| *start < c));
                SegmentFix::Mend { pads, cut }
            }
        };
        plan.insert(number, merged);
    }
    plan
}

fn describe(dir: &Path, number: u32, fix: &SegmentFix) -> String {
    let file = dir.join(segment::file_name(number));
    match fix {
        SegmentFix::Forget => format!("{}: missing; take it out of the manifest", file.display()),
        SegmentFix::SetAside => format!("{}: unreadable; move it aside as {}.damaged", file.display(), file.display()),
        SegmentFix::Mend { pads, cut } => {
            let mut parts: Vec<String> = pads
                .iter()
                .map(|(s, e)| format!("drop bytes {s}..{e} (padding over them; every group after them is kept)"))
                .collect();
            if let Some(end) = cut {
                parts.push(format!("cut it at byte {end} (nothing intact follows)"));
            }
            format!("{}: {}", file.display(), parts.join(", "))
        }
    }
}

fn file_len(disk: &dyn Disk, path: &Path) -> u64 {
    disk.open(path, OpenMode::Read).and_then(|f| f.size()).unwrap_or(0)
}

fn lost_bytes(disk: &dyn Disk, dir: &Path, number: u32, fix: &SegmentFix) -> u64 {
    let len = file_len(disk, &dir.join(segment::file_name(number)));
    match fix {
        SegmentFix::Forget => 0,
        SegmentFix::SetAside => len,
        SegmentFix::Mend { pads, cut } => {
            pads.iter().map(|(s, e)| e - s).sum::<u64>() + cut.map_or(0, |c| len.saturating_sub(c))
        }
    }
}

/// Copies a segment into `damaged/` before it is changed; answers where.
fn save(disk: &dyn Disk, dir: &Path, number: u32) -> io::Result<Option<PathBuf>> {
    let from = dir.join(segment::file_name(number));
    if !disk.exists(&from) {
        return Ok(None);
    }
    let bytes = disk::read_all(disk.open(&from, OpenMode::Read)?.as_ref())?;
    let aside = dir.join("damaged");
    disk::create_dir_durable(disk, &aside)?;
    let mut to = aside.join(segment::file_name(number));
    let mut n = 1;
    while disk.exists(&to) {
        to = aside.join(format!("{}.{n}", segment::file_name(number)));
        n += 1;
    }
    disk::write_file(disk, &to, &bytes)?;
    disk.sync_dir(&aside)?;
    disk.sync_dir(dir)?;
    Ok(Some(to))
}

fn fix_segment(disk: &dyn Disk, dir: &Path, number: u32, fix: &SegmentFix) -> io::Result<()> {
    let path = dir.join(segment::file_name(number));
    match fix {
        SegmentFix::Forget => Ok(()),
        SegmentFix::SetAside => {
            disk.rename(&path, &dir.join(format!("{}.damaged", segment::file_name(number))))?;
            disk.sync_dir(dir)
        }
        SegmentFix::Mend { pads, cut } => {
            let file = disk.open(&path, OpenMode::ReadWrite)?;
            for &(start, end) in pads {
                file.write_all_at(&record::pad_frame((end - start) as usize), start)?;
            }
            file.sync_data()?;
            if let Some(end) = cut {
                segment::cut(disk, &path, number, *end)?;
            }
            Ok(())
        }
    }
}

/// The manifest of the log as it is after the fixes: every segment still there (of those the
/// old manifest listed, if it could be read), each read to its last whole group.
fn rebuild(disk: &dyn Disk, dir: &Path, old: Option<&Manifest>, forgotten: &[u32]) -> io::Result<Manifest> {
    let numbers: Vec<u32> = segment::list(disk, dir)?
        .into_iter()
        .filter(|n| old.is_none_or(|m| m.lists(*n)) && !forgotten.contains(n))
        .collect();
    let mut found = Vec::new();
    for (i, &number) in numbers.iter().enumerate() {
        let path = dir.join(segment::file_name(number));
        let bytes = disk::read_all(disk.open(&path, OpenMode::Read)?.as_ref())?;
        let scan = segment::scan(number, &bytes, None, &mut |_, _, _| Ok(()))
            .map_err(|why| io::Error::other(format!("{}: {why}", path.display())))?;
        let last = i + 1 == numbers.len();
        // A torn tail, or the zeros ahead of a head, are cut so that the segment ends whole.
        if scan.end != bytes.len() as u64 && !(last && scan.zero_tail && scan.bad.is_empty()) {
            segment::cut(disk, &path, number, scan.end)?;
        }
        found.push((number, scan.end, scan.records));
    }
    let Some(&(head, len, records)) = found.last() else {
        segment::create(disk, dir, 1)?;
        return Ok(Manifest::new(1, SEGMENT_HEADER as u64));
    };
    let sealed =
        found[..found.len() - 1].iter().map(|&(number, len, records)| Sealed { number, len, records }).collect();
    Ok(Manifest { sealed, head, mark: Mark { len, records } })
}
