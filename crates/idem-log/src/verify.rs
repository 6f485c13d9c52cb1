//! What a log directory holds, judged against its manifest: which segments to replay, and for
//! every stretch that cannot be read, whether a crash alone explains it (a torn tail: dropped) or
//! not (damage: acknowledged records are missing, and start-up stops).
//!
//! A crash can only leave one thing behind: the group being written when it happened, partly on
//! disk, at the end of the head. That group starts at the end of the last whole group, after the
//! manifest's mark; every sector of it that was never written reads as zeros (the head is
//! zero-filled ahead), and no commit frame of a later group can follow it. Anything else is damage:
//! a segment the manifest lists that is missing, a sealed segment whose length or records differ
//! from the manifest's, bytes before the mark that do not read, a record every sector of which was
//! written yet fails its checksum, or an intact group after an unreadable one.
//!
//! Start-up, `idem check` and `idem repair` all judge with this one module, so that they agree.

use std::path::{Path, PathBuf};

use crate::disk::{self, Disk, OpenMode};
use crate::manifest::{Manifest, Mark};
use crate::segment::{self, Apply, Bad, SEGMENT_HEADER, Scan};

/// Acknowledged data that cannot be read, or a file that should not be there. Start-up refuses
/// it; `idem repair` applies its [`Fix`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub file: PathBuf,
    pub offset: u64,
    pub reason: String,
    /// Acknowledged records lost, when it can be told (`None`: unknown, at least one group).
    pub lost_records: Option<u64>,
    /// What `idem repair` does about it.
    pub fix: Fix,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}: {}", self.file.display(), self.offset, self.reason)?;
        match self.lost_records {
            Some(0) => Ok(()),
            Some(n) => write!(f, " ({n} acknowledged records lost)"),
            None => write!(f, " (acknowledged records lost: at least one group)"),
        }
    }
}

impl std::error::Error for Damage {}

/// What `idem repair` does about one damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fix {
    /// The segment is gone: take it out of the manifest.
    Forget { segment: u32 },
    /// Keep the segment up to `end` (its last whole group before the damage), drop the rest.
    Cut { segment: u32, end: u64 },
    /// Cover `start..end` with a padding frame, keeping every group after it.
    Pad { segment: u32, start: u64, end: u64 },
    /// The file cannot be read at all: move it aside (renamed `….log.damaged`) and forget it.
    SetAside { segment: u32 },
    /// The manifest is missing or unreadable: write one from the segments as they are.
    RebuildManifest,
}

/// A group a crash cut short at the end of the head: never acknowledged, dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torn {
    pub segment: u32,
    pub offset: u64,
    pub bytes: u64,
}

/// A segment as verification found it: where its intact groups end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFound {
    pub number: u32,
    /// Where its last whole group ends (the head's next group is written here).
    pub end: u64,
    pub records: u64,
    /// The file's length.
    pub len: u64,
}

/// Everything judged.
#[derive(Debug, Default)]
pub struct Verdict {
    /// As read; `None` for a new log or one written before the manifest.
    pub manifest: Option<Manifest>,
    /// The segments replayed, ascending; the last is the head.
    pub segments: Vec<SegmentFound>,
    pub damage: Vec<Damage>,
    pub torn: Option<Torn>,
    /// Segment files the manifest does not list and that hold nothing acknowledged (compaction
    /// retired them, or a new segment was being started): deleted at start-up.
    pub leftovers: Vec<u32>,
    /// No manifest yet: a new log, or one from before the manifest (to be given one).
    pub without_manifest: bool,
}

impl Verdict {
    /// The manifest of the log as it stands after start-up (the mark at the end of the head).
    pub fn manifest_now(&self) -> Option<Manifest> {
        let (head, sealed) = self.segments.split_last()?;
        let sealed = sealed
            .iter()
            .map(|f| crate::manifest::Sealed { number: f.number, len: f.end, records: f.records })
            .collect();
        Some(Manifest { sealed, head: head.number, mark: Mark { len: head.end, records: head.records } })
    }
}

/// The role a segment plays, from the manifest.
#[derive(Debug, Clone, Copy)]
enum Role {
    Sealed {
        len: u64,
        records: u64,
    },
    /// The head; `mark` is known acknowledged.
    Head {
        mark: Mark,
    },
    /// No manifest: sealed ones must read whole; the last may end torn.
    Unlisted {
        last: bool,
    },
}

/// Reads every segment of the log in `dir` that the manifest lists (or, without one, every
/// segment), handing each committed record to `apply`, and judges what it finds.
pub fn verify(disk: &dyn Disk, dir: &Path, apply: &mut Apply<'_>) -> Verdict {
    let mut verdict = Verdict::default();
    // The manifest first: a segment started or retired while this runs (`idem check` beside a
    // running idem) then shows as a file the manifest does not list yet, never as one missing.
    let manifest = Manifest::read(disk, dir);
    let numbers = match segment::list(disk, dir) {
        Ok(numbers) => numbers,
        Err(e) => {
            verdict.damage.push(unreadable(dir, e.to_string(), Fix::RebuildManifest));
            return verdict;
        }
    };
    let plan = match manifest {
        Ok(Some(manifest)) => {
            let plan = plan_listed(disk, dir, &manifest, &numbers, &mut verdict);
            verdict.manifest = Some(manifest);
            plan
        }
        Ok(None) => plan_unlisted(disk, dir, &numbers, &mut verdict),
        Err(why) => {
            let reason = format!("the manifest cannot be read: {why}");
            verdict.damage.push(Damage {
                file: dir.join(crate::manifest::FILE),
                offset: 0,
                reason,
                lost_records: Some(0),
                fix: Fix::RebuildManifest,
            });
            let last = numbers.len().saturating_sub(1);
            numbers.iter().enumerate().map(|(i, n)| (*n, Role::Unlisted { last: i == last })).collect()
        }
    };
    for (number, role) in plan {
        let path = dir.join(segment::file_name(number));
        let bytes = match disk.open(&path, OpenMode::Read).and_then(|f| disk::read_all(f.as_ref())) {
            Ok(bytes) => bytes,
            Err(e) => {
                verdict.damage.push(unreadable(&path, e.to_string(), Fix::SetAside { segment: number }));
                continue;
            }
        };
        let mark = match role {
            Role::Head { mark } => Some(mark.len),
            _ => None,
        };
        match segment::scan(number, &bytes, mark, apply) {
            Ok(scan) => judge(&path, number, &bytes, &scan, role, &mut verdict),
            Err(why) => {
                let lost_records = match role {
                    Role::Sealed { records, .. } => Some(records),
                    Role::Head { mark } => Some(mark.records),
                    Role::Unlisted { .. } => None,
                };
                let fix = Fix::SetAside { segment: number };
                verdict.damage.push(Damage { file: path, offset: 0, reason: why.to_string(), lost_records, fix });
            }
        }
    }
    verdict
}

fn unreadable(path: &Path, why: String, fix: Fix) -> Damage {
    Damage { file: path.to_owned(), offset: 0, reason: format!("cannot be read: {why}"), lost_records: None, fix }
}

/// With a manifest: the segments it lists, each with its role; missing ones are damage, files it
/// does not list are leftovers (or damage, if they hold records).
fn plan_listed(
    disk: &dyn Disk,
    dir: &Path,
    manifest: &Manifest,
    numbers: &[u32],
    verdict: &mut Verdict,
) -> Vec<(u32, Role)> {
    let mut plan = Vec::new();
    for sealed in &manifest.sealed {
        let role = Role::Sealed { len: sealed.len, records: sealed.records };
        if numbers.contains(&sealed.number) {
            plan.push((sealed.number, role));
        } else {
            verdict.damage.push(missing(dir, sealed.number, "a sealed segment", sealed.records));
        }
    }
    if numbers.contains(&manifest.head) {
        plan.push((manifest.head, Role::Head { mark: manifest.mark }));
    } else {
        verdict.damage.push(missing(dir, manifest.head, "the newest segment", manifest.mark.records));
    }
    for &number in numbers.iter().filter(|n| !manifest.lists(**n)) {
        if number < manifest.head || holds_nothing(disk, dir, number) {
            verdict.leftovers.push(number);
        } else {
            let reason = "the segment is newer than the manifest's newest and holds records".into();
            let file = dir.join(segment::file_name(number));
            let fix = Fix::SetAside { segment: number };
            verdict.damage.push(Damage { file, offset: 0, reason, lost_records: Some(0), fix });
        }
    }
    plan
}

fn missing(dir: &Path, number: u32, what: &str, records: u64) -> Damage {
    Damage {
        file: dir.join(segment::file_name(number)),
        offset: 0,
        reason: format!("{what} is missing (the manifest lists it)"),
        lost_records: Some(records),
        fix: Fix::Forget { segment: number },
    }
}

/// Is this segment only a header, maybe with zeros after it (a new segment nothing was written to)?
fn holds_nothing(disk: &dyn Disk, dir: &Path, number: u32) -> bool {
    let path = dir.join(segment::file_name(number));
    let Ok(bytes) = disk.open(&path, OpenMode::Read).and_then(|f| disk::read_all(f.as_ref())) else { return false };
    bytes.len() <= SEGMENT_HEADER || bytes[SEGMENT_HEADER..].iter().all(|&b| b == 0)
}

/// Without a manifest: a new log, a log from before the manifest (every segment of version 1),
/// or a log whose manifest was lost (damage: `idem repair` writes a new one).
fn plan_unlisted(disk: &dyn Disk, dir: &Path, numbers: &[u32], verdict: &mut Verdict) -> Vec<(u32, Role)> {
    verdict.without_manifest = true;
    // A crash while the log's first segment was being created: nothing was ever written to it.
    if let [only] = numbers
        && holds_nothing(disk, dir, *only)
    {
        verdict.leftovers.push(*only);
        return Vec::new();
    }
    let last = numbers.len().saturating_sub(1);
    let plan: Vec<(u32, Role)> =
        numbers.iter().enumerate().map(|(i, n)| (*n, Role::Unlisted { last: i == last })).collect();
    let newer = numbers.iter().any(|&n| {
        let path = dir.join(segment::file_name(n));
        let bytes = disk.open(&path, OpenMode::Read).and_then(|f| disk::read_all(f.as_ref())).unwrap_or_default();
        segment::version(&bytes, n).is_some_and(|v| v > 1)
    });
    if newer {
        verdict.damage.push(Damage {
            file: dir.join(crate::manifest::FILE),
            offset: 0,
            reason: "the manifest is missing".into(),
            lost_records: Some(0),
            fix: Fix::RebuildManifest,
        });
    }
    plan
}

/// One segment as scanned, judged: its unreadable stretches, then what its role asks of it.
fn judge(path: &Path, number: u32, bytes: &[u8], scan: &Scan, role: Role, verdict: &mut Verdict) {
    let at = Judged { path, number, scan };
    let end = judge_bad(&at, bytes, role, verdict);
    verdict.damage.extend(judge_role(&at, role));
    verdict.segments.push(SegmentFound { number, end, records: scan.records, len: scan.len });
}

/// A segment being judged.
struct Judged<'a> {
    path: &'a Path,
    number: u32,
    scan: &'a Scan,
}

impl Judged<'_> {
    fn damage(&self, offset: u64, reason: String, lost_records: Option<u64>, fix: Fix) -> Damage {
        Damage { file: self.path.to_owned(), offset, reason, lost_records, fix }
    }

    /// Cover a stretch when an intact group follows it; cut the segment there when none does.
    fn pad_or_cut(&self, bad: &Bad) -> Fix {
        match bad.resume {
            Some(end) => Fix::Pad { segment: self.number, start: bad.start, end },
            None => Fix::Cut { segment: self.number, end: bad.start },
        }
    }

    fn cut_at_end(&self) -> Fix {
        Fix::Cut { segment: self.number, end: self.scan.end }
    }
}

/// The unreadable stretches: each is damage, but for the last one of the head when a crash explains
/// it (then a torn tail, dropped). Answers where the segment's whole groups end.
fn judge_bad(at: &Judged<'_>, bytes: &[u8], role: Role, verdict: &mut Verdict) -> u64 {
    let scan = at.scan;
    let (last_bad_may_be_torn, mark) = match role {
        Role::Head { mark } => (true, mark),
        Role::Unlisted { last } => (last, Mark { len: SEGMENT_HEADER as u64, records: 0 }),
        Role::Sealed { .. } => (false, Mark { len: scan.len, records: 0 }),
    };
    let mut end = scan.end;
    for (i, bad) in scan.bad.iter().enumerate() {
        let last = i + 1 == scan.bad.len() && bad.resume.is_none();
        if last && last_bad_may_be_torn {
            match torn_or_damage(bytes, bad, mark) {
                Ok(()) => {
                    end = bad.start;
                    verdict.torn = Some(Torn { segment: at.number, offset: bad.start, bytes: scan.len - bad.start });
                }
                Err(why) => {
                    let lost = (bad.start < mark.len).then(|| mark.records.saturating_sub(scan.records));
                    let reason = format!("{}, {why}", bad.reason);
                    verdict.damage.push(at.damage(bad.at, reason, lost, at.pad_or_cut(bad)));
                }
            }
            continue;
        }
        let reason = match bad.resume {
            Some(next) => format!("{}; the records from byte {} to {next} cannot be read", bad.reason, bad.start),
            None => bad.reason.to_string(),
        };
        verdict.damage.push(at.damage(bad.at, reason, None, at.pad_or_cut(bad)));
    }
    end
}

/// What the manifest says of the segment, checked: a sealed one's exact length and records, the
/// head's acknowledged part, and zeros only at the end of the newest.
fn judge_role(at: &Judged<'_>, role: Role) -> Option<Damage> {
    let scan = at.scan;
    match role {
        Role::Sealed { len, records } => {
            let lost = Some(records.saturating_sub(scan.records));
            if scan.len < len {
                let reason = format!("the sealed segment is {} bytes long; it was sealed at {len}", scan.len);
                Some(at.damage(scan.len, reason, lost, at.cut_at_end()))
            } else if scan.zero_tail || scan.len > len {
                let reason = format!("bytes after the sealed segment's end ({len})");
                Some(at.damage(scan.end, reason, lost, at.cut_at_end()))
            } else if scan.bad.is_empty() && scan.records != records {
                let reason = format!("holds {} records; the manifest says {records}", scan.records);
                Some(at.damage(0, reason, lost, Fix::RebuildManifest))
            } else {
                None
            }
        }
        Role::Head { mark } if scan.bad.is_empty() && scan.end < mark.len => {
            let reason =
                format!("the log ends at byte {}, but its first {} bytes were acknowledged", scan.end, mark.len);
            let lost = Some(mark.records.saturating_sub(scan.records));
            Some(at.damage(scan.end, reason, lost, at.cut_at_end()))
        }
        Role::Head { mark } if scan.end >= mark.len && scan.records_at_mark.is_some_and(|r| r != mark.records) => {
            let reason =
                format!("holds {:?} records before the mark; the manifest says {}", scan.records_at_mark, mark.records);
            Some(at.damage(mark.len, reason, None, Fix::RebuildManifest))
        }
        Role::Unlisted { last: false } if scan.zero_tail => {
            let reason = "zeros where records should be (only the newest segment has a zeroed tail)".into();
            Some(at.damage(scan.end, reason, None, at.cut_at_end()))
        }
        _ => None,
    }
}

/// Why the unreadable end of the head is damage, not a torn write: what follows the stretch's own
/// reason in the report (`a record ends early, and committed records follow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum NotTorn {
    /// It starts before the mark: acknowledged bytes.
    #[error("before byte {0} up to which the log was acknowledged")]
    BeforeMark(u64),
    /// A pre-manifest commit frame follows it.
    #[error("and committed records follow")]
    CommitsFollow,
    #[error("and a group committed after it follows at byte {0}")]
    LaterGroup(u64),
    #[error("and bytes follow the group being written")]
    BytesFollow,
    #[error("though every sector of the record was written: not a torn write")]
    EverySectorWritten,
}

/// The unreadable end of the head: a torn write (`Ok`), or damage (why).
fn torn_or_damage(bytes: &[u8], bad: &Bad, mark: Mark) -> Result<(), NotTorn> {
    if bad.start < mark.len {
        return Err(NotTorn::BeforeMark(mark.len));
    }
    if bad.old_commit_follows {
        return Err(NotTorn::CommitsFollow);
    }
    if let Some(next) = segment::later_group_committed(bytes, bad.start, bad.at) {
        return Err(NotTorn::LaterGroup(next));
    }
    let group_end = segment::own_commit_end(bytes, bad.start, bad.at).unwrap_or(bytes.len() as u64);
    if bytes[group_end as usize..].iter().any(|&b| b != 0) {
        return Err(NotTorn::BytesFollow);
    }
    if !segment::torn_write_explains(bytes, bad.start, bad.at) {
        return Err(NotTorn::EverySectorWritten);
    }
    Ok(())
}
