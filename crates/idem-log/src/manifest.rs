//! `MANIFEST`: which segments make up the log, and how much of each is acknowledged.
//!
//! Without it, a segment deleted by mistake, a sealed segment cut short or the newest segment cut
//! in its middle would all look like a log that simply ends earlier, and start-up would carry on
//! without the acknowledged claims they held. With it, recovery knows what must be there:
//!
//! - every **sealed** segment, with its exact length and its number of records (it was synced,
//!   whole, before the manifest named it sealed);
//! - the **head** (the segment being appended to), with a **mark**: a length and a record count
//!   that were durable and acknowledged when the mark was written. The writer moves the mark at
//!   least every couple of seconds while there are writes, and to the very end at a clean
//!   shutdown. Anything missing or wrong before the mark is damage, not a torn tail.
//!
//! The manifest is replaced whole: written to `MANIFEST.tmp`, synced, renamed over `MANIFEST`, and
//! the directory synced. A crash leaves the old one or the new one, never a mix.

use std::io;
use std::path::Path;

use crate::disk::{self, Disk, OpenMode};

pub const FILE: &str = "MANIFEST";
pub const TMP: &str = "MANIFEST.tmp";
const MAGIC: &[u8; 8] = b"idemmanf";
const VERSION: u8 = 1;

/// Why a manifest's bytes do not read as one. Start-up and `idem check` report it as
/// `the manifest cannot be read: …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("too short")]
    TooShort,
    #[error("checksum mismatch")]
    ChecksumMismatch,
    /// The body ends before a field it must hold.
    #[error("ends early")]
    EndsEarly,
    #[error("not an idem manifest")]
    NotManifest,
    #[error("manifest version {0} is not one this idem reads")]
    Version(u8),
    #[error("bytes after the manifest")]
    Trailing,
    /// Sealed segments not ascending, or one not older than the head.
    #[error("segments out of order")]
    OutOfOrder,
}

/// Why the manifest in a directory cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Malformed(#[from] Malformed),
}

/// A sealed segment as the manifest knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    pub number: u32,
    pub len: u64,
    pub records: u64,
}

/// How much of the head is known acknowledged: its first `len` bytes, holding `records` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub len: u64,
    pub records: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Ascending by number.
    pub sealed: Vec<Sealed>,
    pub head: u32,
    pub mark: Mark,
}

impl Manifest {
    /// A log of one empty segment.
    pub fn new(head: u32, header_len: u64) -> Self {
        Self { sealed: Vec::new(), head, mark: Mark { len: header_len, records: 0 } }
    }

    pub fn lists(&self, number: u32) -> bool {
        number == self.head || self.sealed.iter().any(|s| s.number == number)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.sealed.len() * 20);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.head.to_le_bytes());
        out.extend_from_slice(&self.mark.len.to_le_bytes());
        out.extend_from_slice(&self.mark.records.to_le_bytes());
        out.extend_from_slice(&(self.sealed.len() as u32).to_le_bytes());
        for s in &self.sealed {
            out.extend_from_slice(&s.number.to_le_bytes());
            out.extend_from_slice(&s.len.to_le_bytes());
            out.extend_from_slice(&s.records.to_le_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, Malformed> {
        let Some((body, crc)) = bytes.split_last_chunk::<4>() else { return Err(Malformed::TooShort) };
        if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
            return Err(Malformed::ChecksumMismatch);
        }
        let mut r = body;
        let mut take = |n: usize| -> Result<&[u8], Malformed> {
            let (head, rest) = r.split_at_checked(n).ok_or(Malformed::EndsEarly)?;
            r = rest;
            Ok(head)
        };
        if take(8)? != MAGIC {
            return Err(Malformed::NotManifest);
        }
        let version = take(1)?[0];
        if version != VERSION {
            return Err(Malformed::Version(version));
        }
        let u32_of = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let u64_of = |b: &[u8]| {
            let mut a = [0; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        };
        let head = u32_of(take(4)?);
        let mark = Mark { len: u64_of(take(8)?), records: u64_of(take(8)?) };
        let count = u32_of(take(4)?) as usize;
        let mut sealed = Vec::with_capacity(count.min(1 << 16));
        for _ in 0..count {
            sealed.push(Sealed { number: u32_of(take(4)?), len: u64_of(take(8)?), records: u64_of(take(8)?) });
        }
        if !take(0)?.is_empty() || !r.is_empty() {
            return Err(Malformed::Trailing);
        }
        if sealed.windows(2).any(|w| w[0].number >= w[1].number) || sealed.last().is_some_and(|s| s.number >= head) {
            return Err(Malformed::OutOfOrder);
        }
        Ok(Self { sealed, head, mark })
    }

    /// The manifest in `dir`: `Ok(None)` when there is none; `Err` (with why) when it cannot be
    /// read.
    pub fn read(disk: &dyn Disk, dir: &Path) -> Result<Option<Self>, Unreadable> {
        let path = dir.join(FILE);
        if !disk.exists(&path) {
            return Ok(None);
        }
        let file = disk.open(&path, OpenMode::Read)?;
        let bytes = disk::read_all(file.as_ref())?;
        Ok(Some(Self::decode(&bytes)?))
    }

    /// Replaces the manifest in `dir` durably.
    pub fn write(&self, disk: &dyn Disk, dir: &Path) -> io::Result<()> {
        self.write_in_steps(disk, dir).map_err(|failed| failed.error)
    }

    /// Like [`Manifest::write`], saying on failure whether the new manifest already took the old
    /// one's place (renamed, its directory not synced: it may or may not survive a crash).
    pub fn write_in_steps(&self, disk: &dyn Disk, dir: &Path) -> Result<(), Failed> {
        let tmp = dir.join(TMP);
        let before = |error| Failed { renamed: false, error };
        disk::write_file(disk, &tmp, &self.encode()).map_err(before)?;
        disk.rename(&tmp, &dir.join(FILE)).map_err(before)?;
        disk.sync_dir(dir).map_err(|error| Failed { renamed: true, error })
    }
}

/// A manifest write that failed.
#[derive(Debug)]
pub struct Failed {
    /// The new manifest is in place, not yet durably.
    pub renamed: bool,
    pub error: io::Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage() {
        let m = Manifest {
            sealed: vec![Sealed { number: 3, len: 100, records: 4 }, Sealed { number: 7, len: 9, records: 0 }],
            head: 8,
            mark: Mark { len: 16, records: 0 },
        };
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes), Ok(m.clone()));
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 4;
            assert!(Manifest::decode(&damaged).is_err(), "a flip at {i} is noticed");
        }
        assert!(Manifest::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(m.lists(8) && m.lists(3) && !m.lists(5));
    }
}
