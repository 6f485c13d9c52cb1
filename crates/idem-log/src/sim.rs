//! A simulated disk for tests: an in-memory file system that remembers, for every file and every
//! directory, what is durable (synced) apart from what was only written, and on [`SimDisk::crash`]
//! keeps an arbitrary part of what was not synced, as a power cut does:
//!
//! - a file's un-synced writes each land whole, not at all, or sector by sector (512 bytes, any
//!   subset), in order, so a sector may keep an older un-synced version; an un-synced length
//!   change (extension or cut) lands or not;
//! - a directory's un-synced entries (files created, renamed, deleted in it) land as a prefix of
//!   the order they were made in; a directory is synced only by syncing it, never by syncing a
//!   file in it;
//! - every decision comes from a seeded generator, so a crash replays exactly.
//!
//! It can also fail the next operation of a kind ([`SimDisk::fail_next`]; a failing write writes
//! a part of its bytes first), fill up ([`SimDisk::set_capacity`]), and lose power after a number
//! of operations ([`SimDisk::die_after`]), after which every operation that would change the disk
//! fails until the crash.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::disk::{Disk, DiskFile, FileRef, LockGuard, LockKind, OpenMode};

/// Sector size: the unit a torn write keeps or loses.
pub const SECTOR: usize = 512;

/// A small deterministic generator (SplitMix64): the simulation's only source of chance.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The operations a test can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOp {
    Write,
    Sync,
    SetLen,
    Create,
    Rename,
    Remove,
    SyncDir,
}

#[derive(Debug, Clone)]
enum FileOp {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone)]
enum DirOp {
    Insert(String, u64),
    Remove(String),
    Rename { from: String, to: String, ino: u64 },
}

#[derive(Debug, Clone)]
enum Inode {
    File { durable: Vec<u8>, current: Vec<u8>, pending: Vec<FileOp> },
    Dir { durable: BTreeMap<String, u64>, current: BTreeMap<String, u64>, pending: Vec<DirOp> },
}

#[derive(Debug, Default)]
struct Lock {
    exclusive: bool,
    holders: usize,
}

#[derive(Debug)]
struct State {
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    rng: Rng,
    fail: Vec<FaultOp>,
    capacity: Option<u64>,
    /// Changing operations left before the power goes; `None`: no cut planned.
    die_after: Option<u64>,
    dead: bool,
    changes: u64,
    locks: BTreeMap<u64, Lock>,
}

const ROOT: u64 = 0;

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    unlocked: Condvar,
}

/// The simulated disk; clones share it.
#[derive(Debug, Clone)]
pub struct SimDisk(Arc<Inner>);

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("simulated disk: {what}"))
}

fn names(path: &Path) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => out.push(name.to_string_lossy().into_owned()),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "simulated disk: paths are absolute and plain",
                ));
            }
        }
    }
    Ok(out)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("simulated disk: {} not found", path.display()))
}

impl State {
    /// A disk's state as a power-up finds it: nothing pending, failing or locked.
    fn fresh(inodes: BTreeMap<u64, Inode>, next_ino: u64, rng: Rng, capacity: Option<u64>) -> Self {
        Self {
            inodes,
            next_ino,
            rng,
            fail: Vec::new(),
            capacity,
            die_after: None,
            dead: false,
            changes: 0,
            locks: BTreeMap::new(),
        }
    }

    fn dir_children(&self, ino: u64) -> Option<&BTreeMap<String, u64>> {
        match self.inodes.get(&ino) {
            Some(Inode::Dir { current, .. }) => Some(current),
            _ => None,
        }
    }

    fn resolve(&self, path: &Path) -> io::Result<u64> {
        let mut ino = ROOT;
        for name in names(path)? {
            ino = *self.dir_children(ino).and_then(|c| c.get(&name)).ok_or_else(|| not_found(path))?;
        }
        Ok(ino)
    }

    /// The parent directory's inode and the last name of `path`.
    fn parent(&self, path: &Path) -> io::Result<(u64, String)> {
        let mut all = names(path)?;
        let name = all.pop().ok_or_else(|| not_found(path))?;
        let mut ino = ROOT;
        for part in all {
            ino = *self.dir_children(ino).and_then(|c| c.get(&part)).ok_or_else(|| not_found(path))?;
        }
        if self.dir_children(ino).is_none() {
            return Err(not_found(path));
        }
        Ok((ino, name))
    }

    /// Counts a changing operation; fails it when the power is gone or a fault was asked for.
    fn change(&mut self, op: FaultOp) -> io::Result<()> {
        if self.dead {
            return Err(eio("the power is gone"));
        }
        self.changes += 1;
        if let Some(left) = self.die_after.as_mut() {
            if *left == 0 {
                self.dead = true;
                return Err(eio("the power went"));
            }
            *left -= 1;
        }
        if let Some(i) = self.fail.iter().position(|f| *f == op) {
            self.fail.remove(i);
            return Err(eio(&format!("injected {op:?} failure")));
        }
        Ok(())
    }

    fn dir_op(&mut self, dir: u64, op: DirOp) {
        if let Some(Inode::Dir { current, pending, .. }) = self.inodes.get_mut(&dir) {
            apply_dir_op(current, &op);
            pending.push(op);
        }
    }

    fn new_inode(&mut self, inode: Inode) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(ino, inode);
        ino
    }

    fn used(&self) -> u64 {
        let mut seen = BTreeSet::new();
        let mut stack = vec![ROOT];
        let mut used = 0;
        while let Some(ino) = stack.pop() {
            if !seen.insert(ino) {
                continue;
            }
            match self.inodes.get(&ino) {
                Some(Inode::File { current, .. }) => used += current.len() as u64,
                Some(Inode::Dir { current, .. }) => stack.extend(current.values().copied()),
                None => {}
            }
        }
        used
    }

    fn file(&mut self, ino: u64) -> io::Result<(&mut Vec<u8>, &mut Vec<FileOp>)> {
        match self.inodes.get_mut(&ino) {
            Some(Inode::File { current, pending, .. }) => Ok((current, pending)),
            _ => Err(eio("not a file")),
        }
    }
}

fn apply_dir_op(children: &mut BTreeMap<String, u64>, op: &DirOp) {
    match op {
        DirOp::Insert(name, ino) => {
            children.insert(name.clone(), *ino);
        }
        DirOp::Remove(name) => {
            children.remove(name);
        }
        DirOp::Rename { from, to, ino } => {
            children.remove(from);
            children.insert(to.clone(), *ino);
        }
    }
}

fn apply_file_op(bytes: &mut Vec<u8>, op: &FileOp) {
    match op {
        FileOp::Write { offset, data } => {
            let end = *offset as usize + data.len();
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[*offset as usize..end].copy_from_slice(data);
        }
        FileOp::SetLen(len) => bytes.resize(*len as usize, 0),
    }
}

/// What a power cut leaves of a file: its durable bytes with some of its pending operations.
fn survive_file(durable: &[u8], pending: &[FileOp], rng: &mut Rng) -> Vec<u8> {
    let mut bytes = durable.to_vec();
    for op in pending {
        match op {
            FileOp::SetLen(_) => {
                if rng.chance(50) {
                    apply_file_op(&mut bytes, op);
                }
            }
            FileOp::Write { offset, data } => {
                let offset = *offset as usize;
                let end = offset + data.len();
                // 0: lost; 1: landed whole; 2, 3: sector by sector.
                let mode = rng.below(4);
                if mode == 0 {
                    continue;
                }
                // The new length lands with the data, or (metadata first) over zeros.
                if (mode == 1 || rng.chance(50)) && bytes.len() < end {
                    bytes.resize(end, 0);
                }
                let mut at = offset;
                while at < end {
                    let piece_end = ((at / SECTOR + 1) * SECTOR).min(end);
                    if mode == 1 || rng.chance(50) {
                        if bytes.len() < piece_end {
                            bytes.resize(piece_end, 0);
                        }
                        bytes[at..piece_end].copy_from_slice(&data[at - offset..piece_end - offset]);
                    }
                    at = piece_end;
                }
            }
        }
    }
    bytes
}

impl Default for SimDisk {
    fn default() -> Self {
        Self::new(0)
    }
}

impl SimDisk {
    /// An empty disk (only `/`); `seed` drives its failures' details.
    pub fn new(seed: u64) -> Self {
        let mut inodes = BTreeMap::new();
        inodes.insert(ROOT, Inode::Dir { durable: BTreeMap::new(), current: BTreeMap::new(), pending: Vec::new() });
        Self::from_state(State::fresh(inodes, 1, Rng::new(seed), None))
    }

    fn from_state(state: State) -> Self {
        Self(Arc::new(Inner { state: Mutex::new(state), unlocked: Condvar::new() }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next operation of this kind fails (once).
    pub fn fail_next(&self, op: FaultOp) {
        self.state().fail.push(op);
    }

    /// Forgets every failure asked for with [`SimDisk::fail_next`] that has not happened yet.
    pub fn clear_faults(&self) {
        self.state().fail.clear();
    }

    /// The disk holds at most this many bytes of files; writes beyond fail as a full disk.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state().capacity = bytes;
    }

    /// After `changes` more changing operations the power goes: that one and every later one
    /// fails, and nothing more reaches the disk.
    pub fn die_after(&self, changes: u64) {
        self.state().die_after = Some(changes);
    }

    /// Calls off a power cut planned with [`SimDisk::die_after`] that has not happened.
    pub fn call_off_power_cut(&self) {
        self.state().die_after = None;
    }

    pub fn is_dead(&self) -> bool {
        self.state().dead
    }

    /// Changing operations made so far.
    pub fn changes(&self) -> u64 {
        self.state().changes
    }

    /// Bytes in files now.
    pub fn used(&self) -> u64 {
        self.state().used()
    }

    /// The disk after a power cut now: what was synced, and any part of what was not, chosen by
    /// `seed`. The old disk is left as it was (its handles still work on it).
    pub fn crash(&self, seed: u64) -> SimDisk {
        let state = self.state();
        let mut rng = Rng::new(seed);
        let mut inodes = BTreeMap::new();
        let mut stack = vec![ROOT];
        let mut seen = BTreeSet::new();
        while let Some(ino) = stack.pop() {
            if !seen.insert(ino) {
                continue;
            }
            let survived = match state.inodes.get(&ino) {
                Some(Inode::File { durable, pending, .. }) => {
                    let bytes = survive_file(durable, pending, &mut rng);
                    Inode::File { durable: bytes.clone(), current: bytes, pending: Vec::new() }
                }
                Some(Inode::Dir { durable, pending, .. }) => {
                    let mut children = durable.clone();
                    let landed = rng.below(pending.len() as u64 + 1) as usize;
                    for op in &pending[..landed] {
                        apply_dir_op(&mut children, op);
                    }
                    stack.extend(children.values().copied());
                    Inode::Dir { durable: children.clone(), current: children, pending: Vec::new() }
                }
                None => continue,
            };
            inodes.insert(ino, survived);
        }
        Self::from_state(State::fresh(inodes, state.next_ino, Rng::new(rng.next_u64()), state.capacity))
    }
}

#[derive(Debug)]
struct SimFile {
    disk: SimDisk,
    ino: u64,
}

impl DiskFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut state = self.disk.state();
        let (current, _) = state.file(self.ino)?;
        let start = (offset as usize).min(current.len());
        let n = buf.len().min(current.len() - start);
        buf[..n].copy_from_slice(&current[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.disk.state();
        let failed = state.change(FaultOp::Write).err();
        let dead = state.dead;
        let room = match state.capacity {
            Some(capacity) => {
                let len = state.file(self.ino)?.0.len() as u64;
                let growth = (offset + buf.len() as u64).saturating_sub(len);
                let free = capacity.saturating_sub(state.used());
                (growth > free).then(|| (free + len).saturating_sub(offset) as usize)
            }
            None => None,
        };
        // An injected failure writes part of the bytes first, as a disk that fails mid-write does.
        let written = match (&failed, room) {
            _ if dead => return Err(failed.unwrap_or_else(|| eio("the power is gone"))),
            (Some(_), _) => state.rng.below(buf.len() as u64 + 1) as usize,
            (None, Some(fits)) => fits.min(buf.len()),
            (None, None) => buf.len(),
        };
        if written > 0 {
            let op = FileOp::Write { offset, data: buf[..written].to_vec() };
            let (current, pending) = state.file(self.ino)?;
            apply_file_op(current, &op);
            pending.push(op);
        }
        match (failed, room) {
            (Some(e), _) => Err(e),
            (None, Some(_)) => Err(io::Error::new(io::ErrorKind::StorageFull, "simulated disk: no space left")),
            (None, None) => Ok(()),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.disk.state();
        state.change(FaultOp::Sync)?;
        match state.inodes.get_mut(&self.ino) {
            Some(Inode::File { durable, current, pending }) => {
                durable.clone_from(current);
                pending.clear();
                Ok(())
            }
            _ => Err(eio("not a file")),
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.disk.state();
        state.change(FaultOp::SetLen)?;
        if let Some(capacity) = state.capacity {
            let now = state.file(self.ino)?.0.len() as u64;
            if len > now && len - now > capacity.saturating_sub(state.used()) {
                return Err(io::Error::new(io::ErrorKind::StorageFull, "simulated disk: no space left"));
            }
        }
        let op = FileOp::SetLen(len);
        let (current, pending) = state.file(self.ino)?;
        apply_file_op(current, &op);
        pending.push(op);
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.disk.state().file(self.ino)?.0.len() as u64)
    }
}

struct SimLock {
    disk: SimDisk,
    ino: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut state = self.disk.state();
        if let Some(lock) = state.locks.get_mut(&self.ino) {
            lock.holders = lock.holders.saturating_sub(1);
            if lock.holders == 0 {
                state.locks.remove(&self.ino);
            }
        }
        drop(state);
        self.disk.0.unlocked.notify_all();
    }
}

impl Disk for SimDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state();
        let mut ino = ROOT;
        for name in names(dir)? {
            let found = state.dir_children(ino).ok_or_else(|| not_found(dir))?.get(&name).copied();
            ino = match found {
                Some(child) => child,
                None => {
                    state.change(FaultOp::Create)?;
                    let child = state.new_inode(Inode::Dir {
                        durable: BTreeMap::new(),
                        current: BTreeMap::new(),
                        pending: Vec::new(),
                    });
                    state.dir_op(ino, DirOp::Insert(name, child));
                    child
                }
            };
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.state();
        let ino = state.resolve(dir)?;
        Ok(state.dir_children(ino).ok_or_else(|| eio("not a directory"))?.keys().cloned().collect())
    }

    fn exists(&self, path: &Path) -> bool {
        self.state().resolve(path).is_ok()
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef> {
        let mut state = self.state();
        let found = state.resolve(path).ok();
        let ino = match (found, mode) {
            (Some(_), OpenMode::CreateNew) => {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, "simulated disk: exists"));
            }
            (Some(ino), OpenMode::Truncate) => {
                state.change(FaultOp::SetLen)?;
                let (current, pending) = state.file(ino)?;
                current.clear();
                pending.push(FileOp::SetLen(0));
                ino
            }
            (Some(ino), _) => {
                state.file(ino)?;
                ino
            }
            (None, OpenMode::Read | OpenMode::ReadWrite) => return Err(not_found(path)),
            (None, OpenMode::CreateNew | OpenMode::Truncate) => {
                let (parent, name) = state.parent(path)?;
                state.change(FaultOp::Create)?;
                let ino =
                    state.new_inode(Inode::File { durable: Vec::new(), current: Vec::new(), pending: Vec::new() });
                state.dir_op(parent, DirOp::Insert(name, ino));
                ino
            }
        };
        Ok(Arc::new(SimFile { disk: self.clone(), ino }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        let (parent, name) = state.parent(path)?;
        state.resolve(path)?;
        state.change(FaultOp::Remove)?;
        state.dir_op(parent, DirOp::Remove(name));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state();
        let (parent, from_name) = state.parent(from)?;
        let (to_parent, to_name) = state.parent(to)?;
        if parent != to_parent {
            return Err(eio("renames across directories are not simulated"));
        }
        let ino = state.resolve(from)?;
        state.change(FaultOp::Rename)?;
        state.dir_op(parent, DirOp::Rename { from: from_name, to: to_name, ino });
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state();
        let ino = state.resolve(dir)?;
        state.change(FaultOp::SyncDir)?;
        match state.inodes.get_mut(&ino) {
            Some(Inode::Dir { durable, current, pending }) => {
                durable.clone_from(current);
                pending.clear();
                Ok(())
            }
            _ => Err(eio("not a directory")),
        }
    }

    fn free_bytes(&self, _path: &Path) -> Option<u64> {
        let state = self.state();
        Some(state.capacity.map_or(1 << 40, |c| c.saturating_sub(state.used())))
    }

    fn lock(&self, path: &Path, kind: LockKind, wait: bool) -> io::Result<Option<LockGuard>> {
        let mut state = self.state();
        let ino = match state.resolve(path) {
            Ok(ino) => ino,
            Err(_) => {
                drop(state);
                self.open(path, OpenMode::CreateNew)?;
                state = self.state();
                state.resolve(path)?
            }
        };
        loop {
            let lock = state.locks.entry(ino).or_default();
            let free = lock.holders == 0 || (kind == LockKind::Shared && !lock.exclusive);
            if free {
                lock.holders += 1;
                lock.exclusive = kind == LockKind::Exclusive;
                return Ok(Some(LockGuard(Box::new(SimLock { disk: self.clone(), ino }))));
            }
            if !wait {
                return Ok(None);
            }
            state = self.0.unlocked.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn what_was_synced_survives_every_crash_and_the_rest_may_not() {
        let disk = SimDisk::new(1);
        disk.create_dir_all(&p("/d")).expect("dir");
        disk.sync_dir(&p("/")).expect("sync root");
        let file = disk.open(&p("/d/f"), OpenMode::CreateNew).expect("create");
        disk.sync_dir(&p("/d")).expect("sync dir");
        file.write_all_at(&[1; 2000], 0).expect("write");
        file.sync_data().expect("sync");
        file.write_all_at(&[2; 2000], 1000).expect("write");
        let mut outcomes = BTreeSet::new();
        for seed in 0..200 {
            let crashed = disk.crash(seed);
            let file = crashed.open(&p("/d/f"), OpenMode::Read).expect("the synced file is there");
            let after = crate::disk::read_all(file.as_ref()).expect("read");
            assert!(after.len() >= 2000 && after[..1000] == [1; 1000], "synced bytes kept");
            assert!(after[1000..].iter().all(|&b| b <= 2), "old bytes, new bytes or zeros");
            outcomes.insert(after.iter().filter(|&&b| b == 2).count());
        }
        assert!(outcomes.len() > 3, "crashes keep different parts of the unsynced write: {outcomes:?}");
    }

    #[test]
    fn an_unsynced_directory_entry_may_be_lost() {
        let disk = SimDisk::new(1);
        let file = disk.open(&p("/f"), OpenMode::CreateNew).expect("create");
        file.write_all_at(b"x", 0).expect("write");
        file.sync_data().expect("sync");
        let kept = (0..50).filter(|seed| disk.crash(*seed).exists(&p("/f"))).count();
        assert!(kept > 0 && kept < 50, "sometimes kept, sometimes lost: {kept}");
        disk.sync_dir(&p("/")).expect("sync");
        assert!((0..50).all(|seed| disk.crash(seed).exists(&p("/f"))));
    }

    #[test]
    fn faults_fail_once_and_a_dead_disk_fails_everything() {
        let disk = SimDisk::new(1);
        let file = disk.open(&p("/f"), OpenMode::CreateNew).expect("create");
        disk.fail_next(FaultOp::Sync);
        assert!(file.sync_data().is_err());
        assert!(file.sync_data().is_ok());
        disk.die_after(1);
        assert!(file.write_all_at(b"a", 0).is_ok());
        assert!(file.write_all_at(b"b", 0).is_err());
        assert!(disk.is_dead() && file.sync_data().is_err());
        disk.set_capacity(Some(10));
        let fresh = disk.crash(3);
        let f = fresh.open(&p("/g"), OpenMode::Truncate);
        assert!(f.is_ok_and(|f| f.write_all_at(&[0; 20], 0).is_err()), "a full disk refuses");
    }
}
