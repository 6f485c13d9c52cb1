//! The store: the embedded store's group commits (size, time, failures), compactions, its size on
//! disk and the space left, the sweeper's deletions of expired claims and finished keys, how far
//! the store's clock is from the wall clock, and PostgreSQL's transactions that had to be run again.

use crate::{Family, Label, labels};

pub const SIZE: Family = Family::gauge(
    "idem_store_size_bytes",
    &[],
    "Bytes the embedded store's files take on disk (log segments, idem.db, -wal, -shm).",
);
pub const AVAILABLE: Family =
    Family::gauge("idem_data_dir_available_bytes", &[], "Bytes still free for idem on the data dir's file system.");
pub const COMPACTIONS: Family = Family::counter(
    "idem_store_compactions_total",
    &[],
    "Log segments compacted (their live records rewritten, the file deleted).",
);
pub const COMMIT_COMMANDS: Family =
    Family::histogram("idem_store_commit_batch_commands", &[], "Commands per group commit of the embedded store.");
pub const COMMIT_ITEMS: Family = Family::histogram(
    "idem_store_commit_batch_items",
    &[],
    "Items (claims and others) per group commit of the embedded store.",
);
pub const COMMIT_SECONDS: Family = Family::histogram(
    "idem_store_commit_seconds",
    &[],
    "Time one group commit of the embedded store took, fsync included.",
);
pub const COMMIT_ERRORS: Family = Family::counter(
    "idem_store_commit_errors_total",
    &[],
    "Group commits of the embedded store that failed and were rolled back.",
);
pub const COMMAND_ERRORS: Family = Family::counter(
    "idem_store_command_errors_total",
    &[],
    "Commands of the embedded store that failed while decided (a record unreadable) and were undone alone; the rest of their group went on.",
);
pub const SWEPT: Family =
    Family::counter("idem_sweeper_deleted_total", &[], "Expired claims and finished keys deleted by the sweeper.");
pub const SWEPT_AT: Family = Family::gauge(
    "idem_sweeper_last_run_timestamp_seconds",
    &[],
    "When the sweeper last finished a pass (Unix seconds).",
);

pub const CLOCK_APART: Family = Family::gauge(
    "idem_clock_wall_apart_seconds",
    &[],
    "The system's wall clock minus the time idem keeps leases and TTLs by (the embedded store: a steady clock that does not step with the wall clock and slews to it at 5 ms a second; PostgreSQL: the database's clock). Far from zero after the wall clock was stepped, or on a node whose clock is skewed from the database's.",
);

pub const RETRIED: Family = Family::counter(
    "idem_store_retried_transactions_total",
    &["reason"],
    "PostgreSQL transactions run again because the database refused them as they were; nothing of the refused try was kept. unique_violation is expected when callers race for one key; deadlock should stay near zero (a steady rise means two kinds of work lock rows in different orders: worth a bug report).",
);

labels! {
    /// Why PostgreSQL refused a transaction that was then run again.
    pub enum Retry {
        /// Two transactions waited for each other; the database ended one (SQLSTATE 40P01).
        Deadlock => "deadlock",
        /// A serializable read no longer held (40001).
        Serialization => "serialization",
        /// Another transaction inserted the same key first (23505).
        UniqueViolation => "unique_violation",
    }
}

pub const FAMILIES: &[Family] = &[
    SIZE,
    AVAILABLE,
    COMPACTIONS,
    COMMIT_COMMANDS,
    COMMIT_ITEMS,
    COMMIT_SECONDS,
    COMMIT_ERRORS,
    COMMAND_ERRORS,
    SWEPT,
    SWEPT_AT,
    CLOCK_APART,
    RETRIED,
];

/// One group commit: its commands and items, how long it took, and whether it failed (rolled
/// back whole).
pub fn committed(commands: usize, items: u64, seconds: f64, failed: bool) {
    if failed {
        metrics::counter!(COMMIT_ERRORS.name).increment(1);
    }
    metrics::histogram!(COMMIT_COMMANDS.name).record(commands as f64);
    metrics::histogram!(COMMIT_ITEMS.name).record(items as f64);
    metrics::histogram!(COMMIT_SECONDS.name).record(seconds);
}

/// A command that failed while decided, undone alone.
pub fn command_failed() {
    metrics::counter!(COMMAND_ERRORS.name).increment(1);
}

/// A log segment compacted.
pub fn compacted() {
    metrics::counter!(COMPACTIONS.name).increment(1);
}

/// The embedded store's size on disk, and the space left on its file system where known.
pub fn on_disk(size: u64, available: Option<u64>) {
    metrics::gauge!(SIZE.name).set(size as f64);
    if let Some(available) = available {
        metrics::gauge!(AVAILABLE.name).set(available as f64);
    }
}

/// `n` expired claims or finished keys deleted by the sweeper.
pub fn swept(n: u64) {
    metrics::counter!(SWEPT.name).increment(n);
}

/// The sweeper finished a pass at `unix_seconds`.
pub fn sweep_done(unix_seconds: f64) {
    metrics::gauge!(SWEPT_AT.name).set(unix_seconds);
}

/// The wall clock minus idem's time, in seconds.
pub fn clock_apart(seconds: f64) {
    metrics::gauge!(CLOCK_APART.name).set(seconds);
}

/// A PostgreSQL transaction refused for `reason`, about to run again.
pub fn retried(reason: Retry) {
    metrics::counter!(RETRIED.name, "reason" => reason.label()).increment(1);
}

/// The store's series at zero.
pub fn register() {
    for family in [COMMIT_ERRORS, COMPACTIONS, COMMAND_ERRORS, SWEPT] {
        metrics::counter!(family.name).increment(0);
    }
}

/// PostgreSQL's series at zero (with `--store postgres`).
pub fn register_postgres() {
    for reason in Retry::ALL {
        metrics::counter!(RETRIED.name, "reason" => reason.label()).increment(0);
    }
}
