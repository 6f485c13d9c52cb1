//! The embedded engine for claims and leased keys: an append-only log with an in-memory index.
//!
//! - **Writes** go to one writer thread ([`writer`]) that gathers every waiting command into one
//!   group, appends the group's records and a commit frame to the newest segment file with one
//!   `pwrite`, and makes them durable with one `fdatasync` before anyone is answered.
//! - **Reads** find a record's place in the index ([`index`]) and read it with `pread` (from the OS
//!   page cache, usually); they never wait for the writer.
//! - **Start-up** replays every segment the [`manifest`] lists; [`verify`] tells the group a crash
//!   cut short at the end (dropped: never acknowledged) from damage (acknowledged records missing:
//!   start-up stops, naming file, offset and records lost; [`repair`] fixes what it can).
//! - **Compaction** ([`compact`]) rewrites the live records of a segment that is more than half
//!   garbage at the head of the log, then retires and deletes it, without holding the writer for
//!   more than one group at a time.
//!
//! Every file operation goes through a [`disk::Disk`], so that tests run the engine on a simulated
//! disk (`sim`, built with the `sim` feature only: the tests', never the product's) that loses,
//! tears and reorders what was not synced. A lock file keeps a second process out of the
//! directory. Events stay in SQLite; the server combines the two.
//!
//! The crate's map: [`LogStore`] (`store`) is the store the server holds, its trait
//! implementations and its tools; `shared` is what the writer, the compactor and readers share,
//! with the read path that looks again when compaction moved a record under it; `record` the
//! on-disk frames; `index` the in-memory index; `writer` the writer thread and its groups;
//! `recover`, `verify`, `repair`, `backup` and `compact` the rest of a log's life.

mod backup;
mod compact;
mod counts;
pub mod disk;
mod index;
mod manifest;
mod record;
mod recover;
mod repair;
mod segment;
mod shared;
#[cfg(feature = "sim")]
pub mod sim;
mod store;
mod table;
mod verify;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use backup::{BackupReport, backup};
pub use counts::counts_at;
pub use recover::{CheckReport, check};
pub use repair::{RepairReport, repair};
pub use segment::PREALLOCATE;
pub use store::LogStore;
pub use verify::{Damage, Fix, Torn};

use disk::{Disk, OsDisk};
use shared::{Shared, found, io_error};

/// How the engine is tuned; the defaults suit a small server.
#[derive(Clone)]
pub struct LogOptions {
    /// A segment is closed and a new one started once it is this long.
    pub segment_bytes: u64,
    /// Commands' items gathered into one group at most.
    pub max_group_items: usize,
    /// How often the compactor looks for a segment worth compacting.
    pub compact_every: Duration,
    /// How often the manifest's mark is moved up to what is acknowledged (when it moved at all);
    /// `None`: only at a clean close and when asked ([`LogStore::mark`]).
    pub mark_every: Option<Duration>,
    /// How far the newest segment is kept zero-filled beyond its last group (at most
    /// [`PREALLOCATE`], the default; 0: not at all).
    pub preallocate: u64,
    /// The file system: the real one, or a simulated disk in tests.
    pub disk: Arc<dyn Disk>,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 64 << 20,
            max_group_items: 20_000,
            compact_every: Duration::from_secs(1),
            mark_every: Some(Duration::from_secs(2)),
            preallocate: PREALLOCATE,
            disk: OsDisk::shared(),
        }
    }
}

/// Why the engine could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot use log dir {dir}: {source}")]
    Dir { dir: PathBuf, source: std::io::Error },
    #[error(
        "log dir {0} is in use by another idem process (its lock file is held); stop that process or choose another --data-dir"
    )]
    Locked(PathBuf),
    #[error(
        "the log is damaged, so idem will not start: {}. `idem check` reports it; `idem repair` shows what it would drop and with --yes keeps every intact record; or restore the data dir from a backup",
        list_damage(.0)
    )]
    Damaged(Vec<Damage>),
}

fn list_damage(damage: &[Damage]) -> String {
    damage.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// A segment's bytes, and how many of them are dead (superseded, deleted or expired records,
/// tombstones and commit frames).
#[derive(Debug, Default, Clone, Copy)]
pub struct Space {
    pub size: u64,
    pub garbage: u64,
}

/// Free space below which the store is not ready.
pub const MIN_FREE_BYTES: u64 = 256 * 1024;
