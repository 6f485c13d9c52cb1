//! The engine's file system, behind one seam: everything the log does to files and directories
//! goes through a [`Disk`]. [`OsDisk`] is the real one; [`crate::sim::SimDisk`] is a simulated
//! disk for tests, which on a crash keeps any subset of what was not synced (torn at sector size,
//! out of order) and can fail any operation or fill up.
//!
//! The seam is deliberately narrow: positioned reads and writes, `fdatasync`, `set_len`, and the
//! directory operations whose durability needs a sync of the directory itself (create, rename,
//! delete). A directory entry is data: after any of those, the directory must be synced before
//! the change can be relied on, and the engine does so wherever it matters.

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// An open file.
pub trait DiskFile: Send + Sync + Debug {
    /// Reads at most `buf.len()` bytes at `offset`; answers how many (fewer only at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every write and length change of this file durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// The file's length (named so, not `len`, because it can fail).
    fn size(&self) -> io::Result<u64>;
}

pub type FileRef = Arc<dyn DiskFile>;

/// How a file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// An existing file, to read.
    Read,
    /// An existing file, to read and write.
    ReadWrite,
    /// A new file (an error if it exists), to read and write.
    CreateNew,
    /// A new or emptied file, to read and write.
    Truncate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    Exclusive,
    Shared,
}

/// A held lock; released when dropped.
pub struct LockGuard(#[allow(dead_code)] pub(crate) Box<dyn Send + Sync>);

impl Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LockGuard")
    }
}

pub trait Disk: Send + Sync + Debug + 'static {
    /// Creates `dir` and any missing parents (not synced: sync the parent to rely on it).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the entries in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn exists(&self, path: &Path) -> bool;
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Replaces `to` with `from` atomically.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the entries of `dir` (files created, renamed or deleted in it) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Bytes an unprivileged writer may still use on the file system of `path`.
    fn free_bytes(&self, path: &Path) -> Option<u64>;
    /// Locks the file at `path` (created if absent). With `wait`, blocks until granted; without,
    /// answers `None` when another holder has it.
    fn lock(&self, path: &Path, kind: LockKind, wait: bool) -> io::Result<Option<LockGuard>>;
}

/// The whole content of a file.
pub fn read_all(file: &dyn DiskFile) -> io::Result<Vec<u8>> {
    let len = usize::try_from(file.size()?).map_err(io::Error::other)?;
    let mut buf = vec![0; len];
    let got = read_at_most(file, &mut buf, 0)?;
    buf.truncate(got);
    Ok(buf)
}

/// Reads until `buf` is full or the file ends; answers how much was read.
pub fn read_at_most(file: &dyn DiskFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Creates `dir` and any missing parents, durably: each new directory's entry is synced in its
/// parent (a directory entry is data too).
pub fn create_dir_durable(disk: &dyn Disk, dir: &Path) -> io::Result<()> {
    let mut missing: Vec<&Path> =
        dir.ancestors().take_while(|d| !d.as_os_str().is_empty() && !disk.exists(d)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    disk.create_dir_all(dir)?;
    missing.reverse();
    for created in missing {
        match created.parent() {
            Some(parent) if parent.as_os_str().is_empty() => disk.sync_dir(Path::new("."))?,
            Some(parent) => disk.sync_dir(parent)?,
            None => {}
        }
    }
    Ok(())
}

/// Writes `bytes` as the whole of a new file at `path` and syncs it (not its directory).
pub fn write_file(disk: &dyn Disk, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file = disk.open(path, OpenMode::Truncate)?;
    file.write_all_at(bytes, 0)?;
    file.sync_data()
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsDisk;

impl OsDisk {
    pub fn shared() -> Arc<dyn Disk> {
        Arc::new(OsDisk)
    }
}

#[derive(Debug)]
struct OsFile(File);

impl DiskFile for OsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl Disk for OsDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef> {
        let mut options = OpenOptions::new();
        options.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                options.write(true);
            }
            OpenMode::CreateNew => {
                options.write(true).create_new(true);
            }
            OpenMode::Truncate => {
                options.write(true).create(true).truncate(true);
            }
        }
        Ok(Arc::new(OsFile(options.open(path)?)))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn free_bytes(&self, path: &Path) -> Option<u64> {
        rustix::fs::statvfs(path).ok().map(|s| s.f_bavail.saturating_mul(s.f_frsize))
    }

    fn lock(&self, path: &Path, kind: LockKind, wait: bool) -> io::Result<Option<LockGuard>> {
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
        let taken = match (kind, wait) {
            (LockKind::Exclusive, true) => file.lock().map(|()| true)?,
            (LockKind::Shared, true) => file.lock_shared().map(|()| true)?,
            (LockKind::Exclusive, false) => match file.try_lock() {
                Ok(()) => true,
                Err(std::fs::TryLockError::WouldBlock) => false,
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            },
            (LockKind::Shared, false) => match file.try_lock_shared() {
                Ok(()) => true,
                Err(std::fs::TryLockError::WouldBlock) => false,
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            },
        };
        // Closing the file releases the lock.
        Ok(taken.then(|| LockGuard(Box::new(file))))
    }
}
