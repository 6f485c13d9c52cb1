//! Segment files: `NNNNNNNN.log` in the log directory, each a 16-byte header and then frames.
//! Only the newest segment is ever appended to; older ones are immutable until compaction
//! deletes them. Recovery reads them all in order ([`scan`]).
//!
//! The newest segment is kept zero-filled a little beyond its last group ([`preallocate`]): an
//! `fdatasync` of bytes written over blocks the file already has need not commit a new file size
//! through the file system's journal, which made a group's sync about a third slower here. A frame
//! never starts with a zero length, so the zeros read as the end of the log; a segment is cut back
//! to its last group before the next one is started.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use idem_core::StoreError;

use crate::record::{self, Frame, HEADER, Loc, Record};

/// Bytes before the first frame: magic, format version, segment number, and their checksum.
pub const SEGMENT_HEADER: usize = 16;
const MAGIC: &[u8; 7] = b"idemlog";
const VERSION: u8 = 1;

pub fn file_name(number: u32) -> String {
    format!("{number:08}.log")
}

pub fn header(number: u32) -> [u8; SEGMENT_HEADER] {
    let mut out = [0; SEGMENT_HEADER];
    out[..7].copy_from_slice(MAGIC);
    out[7] = VERSION;
    out[8..12].copy_from_slice(&number.to_le_bytes());
    let crc = crc32fast::hash(&out[..12]);
    out[12..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Segment numbers in `dir`, ascending.
pub fn list(dir: &Path) -> std::io::Result<Vec<u32>> {
    let mut numbers = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name.strip_suffix(".log").filter(|n| n.len() == 8).and_then(|n| n.parse().ok()) {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// The open segment files, shared by readers (who keep an `Arc` while they read, so a segment
/// that compaction deletes meanwhile stays readable to them).
pub struct Segments {
    pub dir: PathBuf,
    files: RwLock<BTreeMap<u32, Arc<File>>>,
}

impl Segments {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir, files: RwLock::new(BTreeMap::new()) }
    }

    pub fn path(&self, number: u32) -> PathBuf {
        self.dir.join(file_name(number))
    }

    pub fn insert(&self, number: u32, file: Arc<File>) {
        self.files.write().unwrap_or_else(|e| e.into_inner()).insert(number, file);
    }

    pub fn remove(&self, number: u32) {
        self.files.write().unwrap_or_else(|e| e.into_inner()).remove(&number);
    }

    pub fn contains(&self, number: u32) -> bool {
        self.files.read().unwrap_or_else(|e| e.into_inner()).contains_key(&number)
    }

    pub fn file(&self, number: u32) -> Option<Arc<File>> {
        self.files.read().unwrap_or_else(|e| e.into_inner()).get(&number).cloned()
    }

    /// Reads and verifies the record at `loc`; answers it with its frame length.
    pub fn read(&self, loc: Loc) -> Result<(Record, u32), StoreError> {
        let damaged =
            |why: String| StoreError::Internal(format!("{} at byte {}: {why}", file_name(loc.segment), loc.offset));
        let file = self.file(loc.segment).ok_or_else(|| damaged("segment is gone".into()))?;
        let mut buf = vec![0; 512];
        let got = read_at_most(&file, &mut buf, u64::from(loc.offset)).map_err(|e| damaged(e.to_string()))?;
        buf.truncate(got);
        if buf.len() >= HEADER {
            let body = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if HEADER + body > buf.len() && body <= record::MAX_BODY {
                let mut more = vec![0; HEADER + body - buf.len()];
                file.read_exact_at(&mut more, u64::from(loc.offset) + buf.len() as u64)
                    .map_err(|e| damaged(e.to_string()))?;
                buf.extend_from_slice(&more);
            }
        }
        match record::frame(&buf) {
            Frame::Valid { body, len } => Ok((Record::decode(body).map_err(damaged)?, len as u32)),
            Frame::Short => Err(damaged("record ends early".into())),
            Frame::Damaged(why) => Err(damaged(why)),
        }
    }
}

fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Damage found where a torn write cannot explain it: start-up stops and names the place.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{file}: damaged at byte {offset}: {reason}")]
pub struct Damage {
    pub file: PathBuf,
    pub offset: u64,
    pub reason: String,
}

/// A group that a crash cut short at the end of the newest segment: never acknowledged, dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Torn {
    pub segment: u32,
    pub offset: u64,
    pub bytes: u64,
}

/// What recovery found: each segment's number and length (after any repair), and a torn tail.
#[derive(Debug, Default)]
pub struct Scanned {
    pub segments: Vec<(u32, u64)>,
    pub torn: Option<Torn>,
    pub records: u64,
}

/// Called with each committed record's place, body and frame length; an error is damage there.
pub type Apply<'a> = dyn FnMut(Loc, &[u8], u32) -> Result<(), String> + 'a;

/// Reads every segment in order and hands each committed record to `apply`, group by group.
///
/// A frame that is short or fails its checksum is a torn tail when it is in the newest segment
/// and no valid commit frame follows it: that group was never acknowledged (its commit frame is
/// written last and acknowledged only after the fsync), so it is dropped — with `repair`, cut off
/// the file. Anywhere else it is [`Damage`]: an acknowledged group cannot be read.
pub fn scan(dir: &Path, repair: bool, apply: &mut Apply<'_>) -> Result<Scanned, Damage> {
    let io_damage = |path: PathBuf| move |e: std::io::Error| Damage { file: path, offset: 0, reason: e.to_string() };
    let numbers = list(dir).map_err(io_damage(dir.to_owned()))?;
    let mut scanned = Scanned::default();
    for (i, &number) in numbers.iter().enumerate() {
        let path = dir.join(file_name(number));
        let bytes = std::fs::read(&path).map_err(io_damage(path.clone()))?;
        let last = i + 1 == numbers.len();
        let (end, records) = match scan_segment(number, &bytes, apply) {
            Ok((end, records)) if end == bytes.len() || last => (end as u64, records),
            Ok((end, _)) => {
                let reason = "zeros where records should be (only the newest segment has a zeroed tail)".into();
                return Err(Damage { file: path, offset: end as u64, reason });
            }
            Err((offset, good_end, records, reason)) => {
                let follows = (offset as usize + 1..bytes.len()).any(|at| record::is_commit_frame(&bytes[at..]));
                if !last || follows {
                    let reason = if follows { format!("{reason}, and committed records follow") } else { reason };
                    return Err(Damage { file: path, offset, reason });
                }
                let torn = Torn { segment: number, offset: good_end, bytes: bytes.len() as u64 - good_end };
                tracing::warn!(
                    file = %path.display(), offset = good_end, bytes = torn.bytes,
                    "dropping a torn tail: a group the crash cut short (it was never acknowledged)"
                );
                if repair {
                    cut(&path, number, good_end).map_err(io_damage(path.clone()))?;
                }
                scanned.torn = Some(torn);
                (good_end.max(SEGMENT_HEADER as u64), records)
            }
        };
        scanned.records += records;
        scanned.segments.push((number, end));
    }
    Ok(scanned)
}

/// Parses one segment: answers where its records end (before any zeroed tail) and how many were
/// applied. On damage: (offset of the bad frame, end of the last whole group, records applied, why).
fn scan_segment(number: u32, bytes: &[u8], apply: &mut Apply<'_>) -> Result<(usize, u64), (u64, u64, u64, String)> {
    if bytes.len() < SEGMENT_HEADER || bytes[..SEGMENT_HEADER] != header(number) {
        return Err((0, 0, 0, "bad segment header".into()));
    }
    let (mut at, mut group_end, mut applied) = (SEGMENT_HEADER, SEGMENT_HEADER, 0u64);
    // The group's records as (place, start of body, end of body), applied once its commit is read.
    let mut group: Vec<(Loc, usize, usize)> = Vec::new();
    while at < bytes.len() {
        if group.is_empty() && bytes[at..].iter().all(|&b| b == 0) {
            return Ok((at, applied));
        }
        let (body_len, len, commit) = match record::frame(&bytes[at..]) {
            Frame::Valid { body, len } => (body.len(), len, record::commit_count(body)),
            Frame::Short => return Err((at as u64, group_end as u64, applied, "a record ends early".into())),
            Frame::Damaged(why) => return Err((at as u64, group_end as u64, applied, why)),
        };
        let loc = Loc { segment: number, offset: at as u32 };
        match commit {
            Some(count) if count as usize == group.len() => {
                for (loc, start, end) in group.drain(..) {
                    apply(loc, &bytes[start..end], (HEADER + end - start) as u32)
                        .map_err(|why| (u64::from(loc.offset), group_end as u64, applied, why))?;
                    applied += 1;
                }
                group_end = at + len;
            }
            Some(count) => {
                let why = format!("a commit of {count} records ends a group of {}", group.len());
                return Err((at as u64, group_end as u64, applied, why));
            }
            None => group.push((loc, at + HEADER, at + HEADER + body_len)),
        }
        at += len;
    }
    if group.is_empty() {
        Ok((at, applied))
    } else {
        Err((group_end as u64, group_end as u64, applied, "a group has no commit".into()))
    }
}

/// Cuts a segment back to `end` (at least its header), durably.
fn cut(path: &Path, number: u32, end: u64) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    if end < SEGMENT_HEADER as u64 {
        file.set_len(0)?;
        file.write_all_at(&header(number), 0)?;
    } else {
        file.set_len(end)?;
    }
    file.sync_all()
}

/// Creates a new, empty segment and makes its directory entry durable.
pub fn create(dir: &Path, number: u32) -> std::io::Result<File> {
    let path = dir.join(file_name(number));
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
    file.write_all_at(&header(number), 0)?;
    file.sync_all()?;
    sync_dir(dir)?;
    Ok(file)
}

/// How far beyond its last group the newest segment is kept zero-filled. Extending it costs one
/// group's sync about 0.8 ms here, once per MiB of log.
pub const PREALLOCATE: u64 = 1 << 20;

/// With less than this free on its disk, the log is not zero-filled ahead: that would bring a
/// full disk nearer (and take the room a freed disk has back), where room matters more than speed.
const PREALLOCATE_MIN_FREE: u64 = 64 * PREALLOCATE;

/// Zero-fills `file` from `end` for [`PREALLOCATE`] bytes (not synced: the next group's sync
/// carries it). Answers the new zero-filled end, or `end` if the disk is short of room, which only
/// costs speed: the next group appends as it would have anyway.
pub fn preallocate(file: &File, end: u64) -> u64 {
    static ZEROS: [u8; PREALLOCATE as usize] = [0; PREALLOCATE as usize];
    let free = rustix::fs::fstatvfs(file).map_or(0, |s| s.f_bavail.saturating_mul(s.f_frsize));
    if free < PREALLOCATE_MIN_FREE {
        return end;
    }
    match file.write_all_at(&ZEROS, end) {
        Ok(()) => end + PREALLOCATE,
        Err(e) => {
            tracing::debug!(error = %e, "could not zero-fill ahead of the log's head");
            end
        }
    }
}

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}
