//! What the command line does to an embedded store's files, idem stopped or not: `idem check`
//! (read only, safe while idem runs), `idem repair` (idem stopped), `idem backup` (while idem
//! serves), and the sizes the disk gauges report.

use std::io;
use std::path::{Path, PathBuf};

use idem_log::disk::{Disk, OsDisk};
use idem_sqlite::SqliteStore;

use super::log_dir;

/// Why `idem check`, `idem repair` or `idem backup` failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The log directory could not be read.
    #[error("{}: {source}", dir.display())]
    Log { dir: PathBuf, source: io::Error },
    #[error("{}: {source}", db.display())]
    Events { db: PathBuf, source: idem_sqlite::CheckFailed },
    /// `idem check` found damage (it printed what).
    #[error(
        "the log is damaged: acknowledged records cannot be read, and idem will not start on it. \
         `idem repair --data-dir {}` shows what it would drop; with --yes it drops that and \
         keeps every intact record. Or restore the data dir from a backup (`idem backup`).",
        data_dir.display()
    )]
    Damaged { data_dir: PathBuf },
    #[error(transparent)]
    Repair(io::Error),
    #[error("log: {0}")]
    LogBackup(#[source] io::Error),
    #[error("events: {0}")]
    EventsBackup(#[source] idem_sqlite::BackupFailed),
}

/// `idem check`: every log segment read and verified against the manifest, and SQLite's
/// `quick_check` of the events. Exit 1 on anything acknowledged that cannot be read.
pub fn check(data_dir: &Path) -> Result<(), ToolError> {
    let dir = log_dir(data_dir);
    let mut damaged = false;
    if dir.exists() {
        let report = idem_log::check(&OsDisk, &dir).map_err(|source| ToolError::Log { dir: dir.clone(), source })?;
        println!("log: {} segments, {} bytes, {} records", report.segments, report.bytes, report.records);
        for damage in &report.damage {
            eprintln!("log: DAMAGED: {damage}");
        }
        if report.damage.is_empty() {
            println!("log: every segment the manifest lists is there and whole; every checksum good");
        }
        if let Some(torn) = report.torn {
            println!(
                "log: the last {} bytes of segment {} (from byte {}) are a group cut short by a crash (dropped at start-up; never acknowledged), or the group idem is writing right now",
                torn.bytes, torn.segment, torn.offset
            );
        }
        if !report.leftovers.is_empty() {
            println!(
                "log: segments {:?} are no longer part of the log (compacted); start-up deletes them",
                report.leftovers
            );
        }
        if report.without_manifest && report.damage.is_empty() {
            println!("log: written before idem kept a manifest; the next start writes one");
        }
        damaged = !report.damage.is_empty();
    } else {
        println!("log: none yet in {}", dir.display());
    }
    let db = data_dir.join(SqliteStore::FILE_NAME);
    if db.exists() {
        idem_sqlite::quick_check(&db).map_err(|source| ToolError::Events { db: db.clone(), source })?;
        println!("events: {} passes SQLite's quick_check", db.display());
    }
    if damaged {
        return Err(ToolError::Damaged { data_dir: data_dir.to_owned() });
    }
    Ok(())
}

/// `idem repair`: what a damaged log would lose to start again; with `yes`, does it.
pub fn repair(data_dir: &Path, yes: bool) -> Result<(), ToolError> {
    let dir = log_dir(data_dir);
    if !dir.exists() {
        println!("log: none in {}; nothing to repair", dir.display());
        return Ok(());
    }
    let report = idem_log::repair(&OsDisk, &dir, yes).map_err(ToolError::Repair)?;
    if report.damage.is_empty() {
        println!("log: nothing to repair: every segment the manifest lists is there and whole");
        return Ok(());
    }
    println!("log: damaged:");
    for damage in &report.damage {
        println!("  - {damage}");
    }
    println!("{}", if yes { "done:" } else { "idem repair --yes would:" });
    for action in &report.actions {
        println!("  - {action}");
    }
    let uncounted = match report.uncounted {
        0 => String::new(),
        n => format!(", plus {n} damaged stretch(es) whose records could not be counted"),
    };
    let verb = if yes { "dropped" } else { "to drop" };
    println!("acknowledged records {verb}: {}{uncounted}", report.lost_records);
    if yes {
        for saved in &report.saved {
            println!("the file as it was before: {}", saved.display());
        }
        println!("idem can start on {} again", data_dir.display());
    } else {
        println!(
            "nothing was changed; run `idem repair --yes --data-dir {}` to do it (each file changed is copied to {} first)",
            data_dir.display(),
            dir.join("damaged").display()
        );
    }
    Ok(())
}

/// `idem backup DIR`: the log copied at one instant (compaction pauses meanwhile), and the events
/// through SQLite's `VACUUM INTO`, while idem serves.
pub fn backup(from: &Path, to: &Path) -> Result<(), ToolError> {
    let log_from = log_dir(from);
    if log_from.exists() {
        let report = idem_log::backup(&OsDisk, &log_from, &log_dir(to)).map_err(ToolError::LogBackup)?;
        println!("log: {} segments, {} bytes, {} records", report.segments, report.bytes, report.records);
    }
    let db = from.join(SqliteStore::FILE_NAME);
    if db.exists() {
        idem_sqlite::backup(&db, &to.join(SqliteStore::FILE_NAME)).map_err(ToolError::EventsBackup)?;
        println!("events: {}", to.join(SqliteStore::FILE_NAME).display());
    }
    eprintln!("idem: backup written to {}", to.display());
    Ok(())
}

/// The embedded store's files (the log's segments, `idem.db` and its `-wal`, `-shm`) in bytes, and
/// the bytes an unprivileged writer may still use on their file system: what the disk gauges show.
pub fn size_on_disk(data_dir: &Path) -> (u64, Option<u64>) {
    let sizes = |dir: &Path, wanted: fn(&str) -> bool| -> u64 {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| wanted(&e.file_name().to_string_lossy()))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    };
    let size =
        sizes(data_dir, |name| name.starts_with("idem.db")) + sizes(&log_dir(data_dir), |name| name.ends_with(".log"));
    (size, OsDisk.free_bytes(data_dir))
}
