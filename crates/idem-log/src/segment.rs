//! Segment files: `NNNNNNNN.log` in the log directory, each a 16-byte header and then frames.
//! Only the newest segment (the head) is ever appended to; older ones are sealed, immutable until
//! compaction deletes them. [`scan`] reads one segment's groups and notes every stretch it cannot
//! read; [`crate::verify`] decides what such a stretch means (a torn tail or damage).
//!
//! The head is kept zero-filled a little beyond its last group ([`preallocate`]): an `fdatasync` of
//! bytes written over blocks the file already has need not commit a new file size through the
//! file system's journal, which made a group's sync about a third slower here. A frame never
//! starts with a zero length, so the zeros read as the end of the log; a segment is cut back to its
//! last group before the next one is started. Because of them, whatever a crash did not let reach
//! the disk of a group being written reads as zeros (or as the end of the file): recovery relies on
//! that to tell a torn write from damage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use idem_core::StoreError;

use crate::disk::{self, Disk, FileRef, OpenMode};
use crate::record::{self, Frame, HEADER, Loc, Malformed, Record};

/// Bytes before the first frame: magic, format version, segment number, and their checksum.
pub const SEGMENT_HEADER: usize = 16;
const MAGIC: &[u8; 7] = b"idemlog";
/// Version 2: commit frames say how long their group is, and the log has a manifest. Segments
/// of version 1 (before the manifest) are still read.
const VERSION: u8 = 2;

pub fn file_name(number: u32) -> String {
    format!("{number:08}.log")
}

fn header_of(number: u32, version: u8) -> [u8; SEGMENT_HEADER] {
    let mut out = [0; SEGMENT_HEADER];
    out[..7].copy_from_slice(MAGIC);
    out[7] = version;
    out[8..12].copy_from_slice(&number.to_le_bytes());
    let crc = crc32fast::hash(&out[..12]);
    out[12..].copy_from_slice(&crc.to_le_bytes());
    out
}

pub fn header(number: u32) -> [u8; SEGMENT_HEADER] {
    header_of(number, VERSION)
}

/// The format version of a segment whose header is valid for `number`.
pub fn version(bytes: &[u8], number: u32) -> Option<u8> {
    let head = bytes.get(..SEGMENT_HEADER)?;
    [1, VERSION].into_iter().find(|v| head == header_of(number, *v))
}

/// Segment numbers in `dir`, ascending.
pub fn list(disk: &dyn Disk, dir: &Path) -> std::io::Result<Vec<u32>> {
    let mut numbers: Vec<u32> = disk
        .list(dir)?
        .iter()
        .filter_map(|name| name.strip_suffix(".log").filter(|n| n.len() == 8).and_then(|n| n.parse().ok()))
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

/// The open segment files, shared by readers (who keep a handle while they read, so a segment
/// that compaction deletes meanwhile stays readable to them).
pub struct Segments {
    pub dir: PathBuf,
    pub disk: Arc<dyn Disk>,
    files: RwLock<BTreeMap<u32, FileRef>>,
}

/// A record read, or why not.
pub enum Read {
    Found(Record, u32),
    /// The segment was retired (by compaction) after the caller found this place: look again.
    Gone,
}

impl Segments {
    pub fn new(disk: Arc<dyn Disk>, dir: PathBuf) -> Self {
        Self { dir, disk, files: RwLock::new(BTreeMap::new()) }
    }

    pub fn path(&self, number: u32) -> PathBuf {
        self.dir.join(file_name(number))
    }

    pub fn insert(&self, number: u32, file: FileRef) {
        self.files.write().unwrap_or_else(|e| e.into_inner()).insert(number, file);
    }

    pub fn remove(&self, number: u32) {
        self.files.write().unwrap_or_else(|e| e.into_inner()).remove(&number);
    }

    pub fn contains(&self, number: u32) -> bool {
        self.files.read().unwrap_or_else(|e| e.into_inner()).contains_key(&number)
    }

    fn file(&self, number: u32) -> Option<FileRef> {
        self.files.read().unwrap_or_else(|e| e.into_inner()).get(&number).cloned()
    }

    /// Reads and verifies the record at `loc`; answers it with its frame length.
    pub fn read(&self, loc: Loc) -> Result<Read, StoreError> {
        let damaged = |why: &dyn std::fmt::Display| {
            StoreError::Internal(format!("{} at byte {}: {why}", file_name(loc.segment), loc.offset))
        };
        let Some(file) = self.file(loc.segment) else { return Ok(Read::Gone) };
        let mut buf = vec![0; 512];
        let got = disk::read_at_most(file.as_ref(), &mut buf, u64::from(loc.offset)).map_err(|e| damaged(&e))?;
        buf.truncate(got);
        if buf.len() >= HEADER {
            let body = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if HEADER + body > buf.len() && body <= record::MAX_BODY {
                let mut more = vec![0; HEADER + body - buf.len()];
                let at = u64::from(loc.offset) + buf.len() as u64;
                let got = disk::read_at_most(file.as_ref(), &mut more, at).map_err(|e| damaged(&e))?;
                buf.extend_from_slice(&more[..got]);
            }
        }
        match record::frame(&buf) {
            Frame::Valid { body, len } => Ok(Read::Found(Record::decode(body).map_err(|e| damaged(&e))?, len as u32)),
            Frame::Short => Err(damaged(&Malformed::Short)),
            Frame::Damaged(why) => Err(damaged(&why)),
        }
    }

    /// Like [`Segments::read`], with a retired segment as an error (for callers that hold the
    /// writer, before whom no segment is retired).
    pub fn read_now(&self, loc: Loc) -> Result<(Record, u32), StoreError> {
        match self.read(loc)? {
            Read::Found(record, len) => Ok((record, len)),
            Read::Gone => Err(StoreError::Internal(format!(
                "{} at byte {}: the index points into a segment that is gone",
                file_name(loc.segment),
                loc.offset
            ))),
        }
    }
}

/// A stretch of a segment that could not be read as whole groups.
#[derive(Debug, Clone)]
pub struct Bad {
    /// Where the last whole group before it ends: everything from here to `resume` is lost.
    pub start: u64,
    /// The first frame that could not be read.
    pub at: u64,
    pub reason: Unreadable,
    /// Where the next intact group after it begins, if one was found (only commit frames that
    /// say how long their group is can be found this way).
    pub resume: Option<u64>,
    /// A pre-manifest commit frame follows (its group cannot be located, but it proves that a
    /// group was committed after this stretch was written).
    pub old_commit_follows: bool,
}

/// Why a segment, or a stretch of one, does not read as whole groups. Shown to operators (in
/// `idem check` and `idem repair` reports) in these words.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unreadable {
    /// The file does not begin with this segment's header.
    #[error("bad segment header")]
    Header,
    /// The file ends inside a frame.
    #[error("a record ends early")]
    Short,
    /// A frame or its record does not read.
    #[error(transparent)]
    Record(#[from] Malformed),
    /// A commit frame that does not end the group before it.
    #[error("a commit of {count} records ends a group of {group}")]
    CommitMismatch { count: u32, group: usize },
    /// The file ends where the group's commit should be.
    #[error("a group has no commit")]
    NoCommit,
    /// The caller's [`Apply`] could not take a committed record (start-up's index read it back).
    #[error(transparent)]
    Apply(#[from] StoreError),
}

/// What reading one segment found.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// The file's length.
    pub len: u64,
    /// Where the last whole group (or padding) ends; before any zeros or unreadable tail.
    pub end: u64,
    /// Records of whole groups, applied.
    pub records: u64,
    /// Records before `mark` (asked for by the caller), when a group ends exactly there.
    pub records_at_mark: Option<u64>,
    /// Unreadable stretches, in order.
    pub bad: Vec<Bad>,
    /// The segment runs on in zeros after `end` (only the head may).
    pub zero_tail: bool,
}

/// Called with each committed record's place, body and frame length; an error is damage there.
pub type Apply<'a> = dyn FnMut(Loc, &[u8], u32) -> Result<(), Unreadable> + 'a;

/// Reads the groups of one segment in order, handing each committed record to `apply`. A
/// stretch that cannot be read is noted in [`Scan::bad`], and reading goes on at the next intact
/// group, if any. `Err` is a header that is not this segment's.
pub fn scan(number: u32, bytes: &[u8], mark: Option<u64>, apply: &mut Apply<'_>) -> Result<Scan, Unreadable> {
    if version(bytes, number).is_none() {
        return Err(Unreadable::Header);
    }
    let out = Scan { len: bytes.len() as u64, end: SEGMENT_HEADER as u64, ..Scan::default() };
    let mut scanner =
        Scanner { number, bytes, mark, apply, out, at: SEGMENT_HEADER, group_start: SEGMENT_HEADER, group: Vec::new() };
    scanner.group_ended(SEGMENT_HEADER);
    while scanner.at < bytes.len() {
        if scanner.group.is_empty() && bytes[scanner.at..].iter().all(|&b| b == 0) {
            scanner.out.zero_tail = true;
            break;
        }
        if let Err(problem) = scanner.step() {
            let (start, bad_at) = (scanner.group_start, scanner.at);
            let (resume, old_commit_follows) = next_group(bytes, start, bad_at);
            let bad = Bad { start: start as u64, at: bad_at as u64, reason: problem, resume, old_commit_follows };
            scanner.out.bad.push(bad);
            scanner.group.clear();
            let Some(next) = resume else { return Ok(scanner.out) };
            scanner.at = next as usize;
            scanner.group_start = scanner.at;
        }
    }
    if !scanner.group.is_empty() {
        // The file ends where the group's commit should be: that is what cannot be read.
        let (start, at) = (scanner.group_start as u64, scanner.at as u64);
        let reason = Unreadable::NoCommit;
        scanner.out.bad.push(Bad { start, at, reason, resume: None, old_commit_follows: false });
    }
    Ok(scanner.out)
}

/// One segment being read, group by group.
struct Scanner<'b, 'a> {
    number: u32,
    bytes: &'b [u8],
    mark: Option<u64>,
    apply: &'b mut Apply<'a>,
    out: Scan,
    at: usize,
    group_start: usize,
    /// The group's records as (place, start of body, end of body), applied once its commit is read.
    group: Vec<(Loc, usize, usize)>,
}

impl Scanner<'_, '_> {
    /// Reads the frame at `at`; `Err` says why it cannot be read as part of a whole group.
    fn step(&mut self) -> Result<(), Unreadable> {
        let (body, len) = match record::frame(&self.bytes[self.at..]) {
            Frame::Valid { body, len } => (body, len),
            Frame::Short => return Err(Unreadable::Short),
            Frame::Damaged(why) => return Err(why.into()),
        };
        match record::commit_info(body) {
            _ if record::is_pad(body) && self.group.is_empty() => self.group_ended(self.at + len),
            Some(info)
                if info.count as usize == self.group.len()
                    && info.group_bytes.is_none_or(|g| g as usize == self.at - self.group_start) =>
            {
                self.apply_group()?;
                self.group_ended(self.at + len);
            }
            Some(info) => {
                return Err(Unreadable::CommitMismatch { count: info.count, group: self.group.len() });
            }
            None => {
                let loc = Loc { segment: self.number, offset: self.at as u32 };
                self.group.push((loc, self.at + HEADER, self.at + HEADER + body.len()));
                self.at += len;
            }
        }
        Ok(())
    }

    fn apply_group(&mut self) -> Result<(), Unreadable> {
        for (loc, start, end) in self.group.drain(..) {
            (self.apply)(loc, &self.bytes[start..end], (HEADER + end - start) as u32)?;
            self.out.records += 1;
        }
        Ok(())
    }

    /// A whole group (or padding) ends at `end`.
    fn group_ended(&mut self, end: usize) {
        self.at = end;
        self.group_start = end;
        self.out.end = end as u64;
        if self.mark == Some(end as u64) {
            self.out.records_at_mark = Some(self.out.records);
        }
    }
}

/// The first intact group that begins after `from` (the start of an unreadable stretch) and
/// whose commit frame lies beyond `bad_at`; and whether any pre-manifest commit frame follows.
fn next_group(bytes: &[u8], from: usize, bad_at: usize) -> (Option<u64>, bool) {
    let mut old_commit = false;
    for commit_at in bad_at + 1..bytes.len() {
        let Some((info, _)) = record::commit_frame_at(&bytes[commit_at..]) else { continue };
        let Some(group_bytes) = info.group_bytes else {
            old_commit = true;
            continue;
        };
        let Some(start) = commit_at.checked_sub(group_bytes as usize).filter(|s| *s > from) else { continue };
        if whole_group(&bytes[start..commit_at], info.count) {
            return (Some(start as u64), old_commit);
        }
    }
    (None, old_commit)
}

/// Do these bytes read as exactly `count` valid record frames?
fn whole_group(mut bytes: &[u8], count: u32) -> bool {
    let mut n = 0;
    while !bytes.is_empty() {
        match record::frame(bytes) {
            Frame::Valid { body, len } if record::commit_info(body).is_none() && !record::is_pad(body) => {
                n += 1;
                bytes = &bytes[len..];
            }
            _ => return false,
        }
    }
    n == count
}

/// A commit frame whose group starts after `start`, anywhere after `from`: proof that the group
/// at `start` was written whole and synced before it (groups are written one after another).
pub fn later_group_committed(bytes: &[u8], start: u64, from: u64) -> Option<u64> {
    (from as usize + 1..bytes.len()).find_map(|at| {
        let (info, _) = record::commit_frame_at(&bytes[at..])?;
        let group_start = at as u64 - u64::from(info.group_bytes?);
        (group_start > start).then_some(group_start)
    })
}

/// The end of the commit frame, anywhere after `from`, of the group that starts at `start`.
pub fn own_commit_end(bytes: &[u8], start: u64, from: u64) -> Option<u64> {
    (from as usize + 1..bytes.len()).find_map(|at| {
        let (info, len) = record::commit_frame_at(&bytes[at..])?;
        (at as u64).checked_sub(u64::from(info.group_bytes?)).filter(|s| *s == start).map(|_| (at + len) as u64)
    })
}

/// Could a crash have left the frame at `at` unreadable, in a group written from `start`? Only if
/// some sector it spans was never written, or it runs past the end of the file. The bytes a group
/// is written over are zeros (the head is zero-filled ahead), so a sector that did not land reads
/// as zeros from `start` (or its own beginning) to its end; a frame all of whose sectors landed
/// must read whole. (This assumes what databases assume of disks: a sector, 512 bytes, is written
/// whole or not at all.)
pub fn torn_write_explains(bytes: &[u8], start: u64, at: u64) -> bool {
    const SECTOR: usize = 512;
    let (start, at) = (start as usize, at as usize);
    if at + HEADER > bytes.len() {
        return true;
    }
    let claimed = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
    let extent = if claimed == 0 || claimed > record::MAX_BODY { HEADER } else { HEADER + claimed };
    if at + extent > bytes.len() {
        return true;
    }
    let (first, last) = (at / SECTOR, (at + extent - 1) / SECTOR);
    (first..=last).any(|s| {
        let from = (s * SECTOR).max(start);
        let to = ((s + 1) * SECTOR).min(bytes.len());
        bytes[from..to].iter().all(|&b| b == 0)
    })
}

/// Cuts a segment back to `end` (at least its header), durably.
pub fn cut(disk: &dyn Disk, path: &Path, number: u32, end: u64) -> std::io::Result<()> {
    let file = disk.open(path, OpenMode::ReadWrite)?;
    if end < SEGMENT_HEADER as u64 {
        file.set_len(0)?;
        file.write_all_at(&header(number), 0)?;
    } else {
        file.set_len(end)?;
    }
    file.sync_data()
}

/// Creates a new, empty segment and makes its directory entry durable.
pub fn create(disk: &dyn Disk, dir: &Path, number: u32) -> std::io::Result<FileRef> {
    let path = dir.join(file_name(number));
    let file = disk.open(&path, OpenMode::CreateNew)?;
    file.write_all_at(&header(number), 0)?;
    file.sync_data()?;
    disk.sync_dir(dir)?;
    Ok(file)
}

/// How far beyond its last group the newest segment is kept zero-filled, by default
/// ([`crate::LogOptions::preallocate`]). Extending it costs one group's sync about 0.8 ms here,
/// once per MiB of log.
pub const PREALLOCATE: u64 = 1 << 20;

/// Zero-fills `file` from `end` for `ahead` bytes (not synced: the next group's sync carries it).
/// Answers the new zero-filled end, or `end` if the disk is short of room (under 64 times `ahead`
/// free: that would bring a full disk nearer, and take the room a freed disk has back, where room
/// matters more than speed), which only costs speed: the next group appends as it would have.
pub fn preallocate(disk: &dyn Disk, dir: &Path, file: &dyn disk::DiskFile, end: u64, ahead: u64) -> u64 {
    static ZEROS: [u8; PREALLOCATE as usize] = [0; PREALLOCATE as usize];
    let ahead = ahead.min(PREALLOCATE);
    if ahead == 0 || disk.free_bytes(dir).unwrap_or(0) < 64 * ahead {
        return end;
    }
    match file.write_all_at(&ZEROS[..ahead as usize], end) {
        Ok(()) => end + ahead,
        Err(e) => {
            tracing::debug!(error = %e, "could not zero-fill ahead of the log's head");
            end
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    /// A segment of `groups` groups of two records each, of about `size` bytes; answers it with
    /// each group's end.
    fn segment_of(groups: usize, size: usize) -> (Vec<u8>, Vec<u64>) {
        let mut bytes = header(1).to_vec();
        let mut ends = Vec::new();
        for g in 0..groups {
            let start = bytes.len();
            for r in 0..2u8 {
                let rec = Record::Request(record::RequestRec {
                    id: idem_core::ClaimId([g as u8 ^ r; 32]),
                    fingerprint: [7; 32],
                    completed: true,
                    token: [1; 16],
                    until: 5,
                    body: vec![b'x'; size],
                    client: None,
                    fence: 1,
                });
                rec.encode_into(&mut bytes);
            }
            let group_bytes = Some((bytes.len() - start) as u32);
            Record::Commit { count: 2, group_bytes }.encode_into(&mut bytes);
            ends.push(bytes.len() as u64);
        }
        (bytes, ends)
    }

    fn segment(groups: usize) -> (Vec<u8>, Vec<u64>) {
        segment_of(groups, 10)
    }

    fn count(bytes: &[u8]) -> Scan {
        scan(1, bytes, None, &mut |_, _, _| Ok(())).expect("header")
    }

    #[test]
    fn reads_whole_groups_and_stops_at_zeros() {
        let (mut bytes, ends) = segment(3);
        bytes.extend_from_slice(&[0; 1000]);
        let scan = count(&bytes);
        assert_eq!((scan.end, scan.records, scan.zero_tail, scan.bad.len()), (ends[2], 6, true, 0));
    }

    #[test]
    fn a_damaged_group_is_noted_and_reading_resumes_at_the_next_intact_one() {
        let (mut bytes, ends) = segment(4);
        bytes[ends[0] as usize + 12] ^= 1;
        let scan = count(&bytes);
        assert_eq!(scan.records, 6, "groups 1, 3 and 4");
        assert_eq!(scan.bad.len(), 1);
        assert_eq!((scan.bad[0].start, scan.bad[0].resume), (ends[0], Some(ends[1])));
        assert_eq!(scan.end, ends[3]);
    }

    #[test]
    fn a_torn_write_is_told_from_a_flipped_byte_by_its_zero_sectors() {
        let (bytes, ends) = segment_of(4, 1000);
        let last_start = ends[2] as usize;
        let mut flipped = bytes.clone();
        flipped[last_start + 20] ^= 1;
        assert!(!torn_write_explains(&flipped, last_start as u64, last_start as u64), "every sector was written");
        let mut torn = bytes[..last_start].to_vec();
        torn.extend(std::iter::repeat_n(0, bytes.len() - last_start));
        let sector_end = (last_start / 512 + 1) * 512;
        torn[last_start..sector_end.min(bytes.len())].copy_from_slice(&bytes[last_start..sector_end.min(bytes.len())]);
        let scan = count(&torn);
        let bad_at = scan.bad.first().map(|b| b.at);
        assert!(bad_at.is_none() || torn_write_explains(&torn, last_start as u64, bad_at.unwrap_or(0)));
        // The group's second sector landed and its first did not: zeros from the group's start.
        let mut out_of_order = bytes[..last_start].to_vec();
        out_of_order.extend(std::iter::repeat_n(0, sector_end - last_start));
        out_of_order.extend_from_slice(&bytes[sector_end..]);
        let scan = count(&out_of_order);
        let bad = scan.bad.last().expect("the group does not read");
        assert!(torn_write_explains(&out_of_order, bad.start, bad.at));
    }

    #[test]
    fn commit_frames_locate_their_groups() {
        let (bytes, ends) = segment(3);
        assert_eq!(later_group_committed(&bytes, ends[0], ends[0]), Some(ends[1]));
        assert_eq!(later_group_committed(&bytes, ends[1], ends[1]), None);
        assert_eq!(own_commit_end(&bytes, ends[1], ends[1]), Some(ends[2]));
    }
}
