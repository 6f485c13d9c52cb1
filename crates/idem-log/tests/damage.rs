//! Damage told from a torn tail, on a real directory.
//!
//! After a clean close the manifest's mark is at the very end of the log, so each of these is
//! damage, which `idem check` reports (file, offset, records lost) and start-up refuses: a sealed
//! segment deleted, a sealed segment cut short, the newest segment cut in its middle, a byte
//! flipped in its last group. `repair` without applying changes nothing; applied, it lets the log
//! open again with every record outside the damaged stretch. After a crash (no close), a last
//! group whose commit reached the disk while an earlier sector of it did not is what a power cut
//! leaves: start-up drops it without complaint; the same group with a flipped byte instead is not.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use idem_conformance::{START, new_claim, ns, parts};
use idem_core::{ClaimStore, ManualClock, StoreLifecycle};
use idem_log::disk::OsDisk;
use idem_log::{LogOptions, LogStore, OpenError};

const CLAIMS: usize = 400;

fn options() -> LogOptions {
    LogOptions {
        segment_bytes: 12 * 1024,
        compact_every: Duration::from_secs(3600),
        mark_every: None,
        ..LogOptions::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

fn key(i: usize) -> String {
    format!("claim-{i:04}")
}

/// A log of `CLAIMS` claims of about 100 bytes, ten per group, in several segments; closed
/// cleanly, or (`close: false`) left as a crash leaves it.
fn written(close: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    runtime().block_on(async {
        let store = LogStore::open(dir.path(), Arc::new(ManualClock::new(START)), options()).expect("open");
        for chunk in (0..CLAIMS).collect::<Vec<_>>().chunks(10) {
            let items = chunk.iter().map(|i| new_claim(&[&key(*i)], Some(&format!("\"{}\"", "d".repeat(60))), None));
            store.claim(&ns("n"), items.collect()).await.expect("claim");
        }
        if close {
            store.close().await;
        }
    });
    dir
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    out.sort();
    out
}

fn copy(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().expect("temp dir");
    for entry in std::fs::read_dir(from).expect("dir").filter_map(Result::ok) {
        if entry.path().is_file() {
            std::fs::copy(entry.path(), to.path().join(entry.file_name())).expect("copy");
        }
    }
    to
}

/// Which of the claims the log holds, or why it does not open.
fn present(dir: &Path) -> Result<Vec<bool>, OpenError> {
    runtime().block_on(async {
        let store = LogStore::open(dir, Arc::new(ManualClock::new(START)), options())?;
        let mut found = Vec::new();
        for i in 0..CLAIMS {
            found.push(store.get(&ns("n"), &parts(&[&key(i)]).id()).await.expect("get").is_some());
        }
        store.close().await;
        Ok(found)
    })
}

fn bytes_of(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .map(|p| (p.clone(), std::fs::read(&p).expect("read")))
        .collect();
    out.sort();
    out
}

/// `damage` is reported by check (naming `file`), refused by start-up, left alone by a dry
/// repair, and repaired: afterwards the log opens, and holds every claim but at most as many as
/// repair said it dropped (and at least `kept`).
fn damage_is_found_and_repaired(damage: impl FnOnce(&Path) -> PathBuf, kept: usize) {
    let original = written(true);
    let dir = copy(original.path());
    let file = damage(dir.path());
    let name = file.file_name().expect("name").to_string_lossy().into_owned();

    let report = idem_log::check(&OsDisk, dir.path()).expect("check");
    assert!(!report.damage.is_empty(), "check finds the damage");
    let first = report.damage[0].to_string();
    assert!(first.contains(&name) && first.contains("byte"), "names file and offset: {first}");
    match present(dir.path()) {
        Err(e @ OpenError::Damaged(_)) => {
            let message = e.to_string();
            assert!(message.contains(&name) && message.contains("idem repair"), "{message}");
        }
        other => panic!("start-up must refuse the damage, got {:?}", other.map(|_| ())),
    }

    let before = bytes_of(dir.path());
    let dry = idem_log::repair(&OsDisk, dir.path(), false).expect("dry run");
    assert!(!dry.actions.is_empty(), "it says what it would do");
    assert_eq!(bytes_of(dir.path()), before, "a dry run changes nothing");

    let done = idem_log::repair(&OsDisk, dir.path(), true).expect("repair");
    let found = present(dir.path()).expect("the repaired log opens");
    let missing = found.iter().filter(|f| !**f).count();
    assert!(found.iter().filter(|f| **f).count() >= kept, "kept what was intact: {missing} missing");
    if done.uncounted == 0 {
        assert!(missing as u64 <= done.lost_records, "{missing} missing, {} reported dropped", done.lost_records);
    }
    assert!(idem_log::check(&OsDisk, dir.path()).expect("check").damage.is_empty(), "clean after repair");
    // It also accepts writes, and keeps them.
    runtime().block_on(async {
        let store = LogStore::open(dir.path(), Arc::new(ManualClock::new(START)), options()).expect("open");
        store.claim(&ns("n"), vec![new_claim(&["after-repair"], None, None)]).await.expect("claim");
        store.close().await;
    });
    assert!(idem_log::check(&OsDisk, dir.path()).expect("check").damage.is_empty());
}

#[test]
fn a_deleted_sealed_segment_is_damage() {
    damage_is_found_and_repaired(
        |dir| {
            let all = segments(dir);
            assert!(all.len() > 3, "several segments");
            std::fs::remove_file(&all[1]).expect("delete");
            all[1].clone()
        },
        CLAIMS / 2,
    );
}

#[test]
fn a_sealed_segment_cut_short_is_damage() {
    damage_is_found_and_repaired(
        |dir| {
            let all = segments(dir);
            let len = std::fs::metadata(&all[0]).expect("meta").len();
            std::fs::OpenOptions::new().write(true).open(&all[0]).expect("open").set_len(len / 2).expect("cut");
            all[0].clone()
        },
        CLAIMS / 2,
    );
}

/// The newest segment's length without the zeros that run on after its last group.
fn head_end(dir: &Path) -> u64 {
    let report = idem_log::check(&OsDisk, dir).expect("check");
    let sealed: u64 = segments(dir).iter().rev().skip(1).map(|p| std::fs::metadata(p).expect("meta").len()).sum();
    report.bytes - sealed
}

#[test]
fn the_newest_segment_cut_in_its_middle_is_damage() {
    damage_is_found_and_repaired(
        |dir| {
            let end = head_end(dir);
            let head = segments(dir).pop().expect("head");
            std::fs::OpenOptions::new().write(true).open(&head).expect("open").set_len(end / 2).expect("cut");
            head
        },
        CLAIMS / 2,
    );
}

#[test]
fn a_byte_flipped_in_the_last_group_is_damage() {
    damage_is_found_and_repaired(
        |dir| {
            let end = head_end(dir);
            let head = segments(dir).pop().expect("head");
            let mut bytes = std::fs::read(&head).expect("read");
            bytes[end as usize - 40] ^= 0x08;
            std::fs::write(&head, &bytes).expect("write");
            head
        },
        CLAIMS - 10,
    );
}

#[test]
fn a_byte_flipped_in_a_middle_group_keeps_every_group_after_it() {
    let original = written(true);
    let dir = copy(original.path());
    let head = segments(dir.path()).pop().expect("head");
    let mut bytes = std::fs::read(&head).expect("read");
    bytes[100] ^= 0x01;
    std::fs::write(&head, &bytes).expect("write");
    let done = idem_log::repair(&OsDisk, dir.path(), true).expect("repair");
    assert!(done.actions.iter().any(|a| a.contains("padding")), "{:?}", done.actions);
    let found = present(dir.path()).expect("opens");
    let missing = found.iter().filter(|f| !**f).count();
    assert_eq!(missing, 10, "exactly the damaged group of ten is gone");
    assert!(*found.last().expect("claims"), "the groups after the damage are kept");
}

/// The last group, many sectors long, written by a crash in an order that left its commit frame on
/// disk and one earlier sector of it not (zeros): what a power cut can leave.
#[test]
fn a_torn_last_group_whose_commit_landed_before_an_earlier_sector_is_not_damage() {
    let dir = last_big_group_uncommitted(|bytes, start, end| {
        let sector = (start / 512 + 2) * 512;
        assert!(sector + 512 < end, "the group spans several sectors");
        bytes[sector..sector + 512].fill(0);
    });
    assert!(idem_log::check(&OsDisk, dir.path()).expect("check").damage.is_empty());
    let found = present(dir.path()).expect("a crash-only state opens");
    assert!(found.iter().all(|f| *f), "every earlier claim is there");
}

#[test]
fn the_same_last_group_with_a_flipped_byte_is_damage_even_after_a_crash() {
    let dir = last_big_group_uncommitted(|bytes, start, _| bytes[start + 700] ^= 0x10);
    assert!(!idem_log::check(&OsDisk, dir.path()).expect("check").damage.is_empty());
    assert!(matches!(present(dir.path()), Err(OpenError::Damaged(_))));
}

/// The claims of `written(false)` and then one big group (past the manifest's mark, as after a
/// crash), then `hurt` applied to the segment's bytes with the group's start and end.
fn last_big_group_uncommitted(hurt: impl FnOnce(&mut Vec<u8>, usize, usize)) -> tempfile::TempDir {
    let dir = written(false);
    let start = head_end(dir.path()) as usize;
    runtime().block_on(async {
        // A segment long enough that this group does not start a new one.
        let options = LogOptions { segment_bytes: 1 << 20, ..options() };
        let store = LogStore::open(dir.path(), Arc::new(ManualClock::new(START)), options).expect("open");
        let items =
            (0..6).map(|i| new_claim(&["big", &i.to_string()], Some(&format!("\"{}\"", "b".repeat(400))), None));
        store.claim(&ns("big"), items.collect()).await.expect("claim");
        // Not closed: the mark stays before this group.
    });
    let end = head_end(dir.path()) as usize;
    let head = segments(dir.path()).pop().expect("head");
    let mut bytes = std::fs::read(&head).expect("read");
    hurt(&mut bytes, start, end);
    std::fs::write(&head, &bytes).expect("write");
    dir
}
