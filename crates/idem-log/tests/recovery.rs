//! The log format under damage, after a crash (the process stopped without closing the store, so
//! the manifest's mark is where the log began): a log cut at any byte, or at any sector with zeros
//! after the cut (the zero-filled space ahead of the head), recovers exactly the groups that were
//! whole before the cut, and damage before the last group stops start-up naming the file and the
//! offset, as `idem check` does without starting. (After a clean close the mark is at the end, and
//! any cut is damage: `tests/damage.rs`.)

use std::path::{Path, PathBuf};
use std::sync::Arc;

use idem_conformance::{START, new_claim, ns, parts};
use idem_core::{ClaimStore, ManualClock, StoreLifecycle};
use idem_log::disk::OsDisk;
use idem_log::{LogOptions, LogStore, OpenError};
use proptest::prelude::*;

const CLAIMS: usize = 24;

/// A log of `CLAIMS` claims, one group each; answers the directory and the segment's length after
/// each acknowledgement.
fn written_log() -> (tempfile::TempDir, Vec<u64>) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let ends = runtime.block_on(async {
        let store = LogStore::open(dir.path(), Arc::new(ManualClock::new(START)), options()).expect("open");
        let mut ends = Vec::new();
        for i in 0..CLAIMS {
            let data = format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(i * 7));
            store.claim(&ns("n"), vec![new_claim(&["k", &i.to_string()], Some(&data), None)]).await.expect("claim");
            // Where the records end: the file itself is zero-filled beyond them.
            ends.push(idem_log::check(&OsDisk, dir.path()).expect("check").bytes);
        }
        // Not closed: as after a crash, the manifest's mark stays where the log began.
        drop(store);
        ends
    });
    (dir, ends)
}

fn segment(dir: &Path) -> PathBuf {
    dir.join("00000001.log")
}

/// A store that moves its mark only when closed.
fn options() -> LogOptions {
    LogOptions { mark_every: None, ..LogOptions::default() }
}

fn copy_log(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().expect("temp dir");
    std::fs::copy(segment(from), segment(to.path())).expect("copy");
    std::fs::copy(from.join("MANIFEST"), to.path().join("MANIFEST")).expect("copy");
    to
}

/// Which of the claims a reopened log holds.
fn recovered(dir: &Path) -> Result<Vec<bool>, OpenError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let store = LogStore::open(dir, Arc::new(ManualClock::new(START)), options())?;
        let mut found = Vec::new();
        for i in 0..CLAIMS {
            found.push(store.get(&ns("n"), &parts(&["k", &i.to_string()]).id()).await.expect("get").is_some());
        }
        store.close().await;
        Ok(found)
    })
}

static LOG: std::sync::OnceLock<(tempfile::TempDir, Vec<u64>)> = std::sync::OnceLock::new();

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_cut_recovers_exactly_the_whole_groups_before_it(fraction in 0.0f64..1.0, zeroed_after: bool) {
        let (dir, ends) = LOG.get_or_init(written_log);
        let total = *ends.last().expect("claims");
        // The segment's header was synced when it was created: a crash cuts after it.
        let cut = 16 + (fraction * (total - 16) as f64) as u64;
        // Zeros after the cut are sectors that did not land: the cut is at a sector's start.
        let cut = if zeroed_after { (cut - cut % 512).max(16) } else { cut };
        let copy = copy_log(dir.path());
        let original = std::fs::read(segment(dir.path())).expect("read");
        std::fs::OpenOptions::new().write(true).open(segment(copy.path())).expect("open").set_len(cut).expect("cut");
        if zeroed_after {
            // A crash while writing into the zero-filled space ahead of the head.
            std::fs::OpenOptions::new().write(true).open(segment(copy.path())).expect("open").set_len(cut + 4096).expect("pad");
        }
        let found = recovered(copy.path()).expect("a cut log opens");
        // A group is whole if the cut left it whole, or (padded with zeros) if every byte the cut
        // took from it was a zero (a commit frame ends in the zero bytes of its little count).
        let whole = |end: u64| {
            end <= cut || (zeroed_after && original[cut as usize..end as usize].iter().all(|&b| b == 0))
        };
        let expected: Vec<bool> = ends.iter().map(|&end| whole(end)).collect();
        prop_assert_eq!(&found, &expected);
        // The repaired log opens again to the same state, and accepts writes.
        prop_assert_eq!(recovered(copy.path()).expect("reopens"), expected);
    }

    #[test]
    fn a_flipped_byte_in_an_acknowledged_group_is_reported_never_read(at in 16u64..1000, bit in 0u8..8) {
        let (dir, ends) = LOG.get_or_init(written_log);
        let last_group_start = ends[ends.len() - 2];
        let at = 16 + at % (last_group_start - 16);
        let copy = copy_log(dir.path());
        let mut bytes = std::fs::read(segment(copy.path())).expect("read");
        bytes[at as usize] ^= 1 << bit;
        std::fs::write(segment(copy.path()), &bytes).expect("write");
        let report = idem_log::check(&OsDisk, copy.path()).expect("check");
        let Some(damage) = report.damage.first() else { panic!("check found damage at {at}") };
        prop_assert!(damage.file.ends_with("00000001.log"));
        prop_assert!(damage.offset <= at, "damage reported at {} for a flip at {at}", damage.offset);
        match recovered(copy.path()) {
            Err(e @ OpenError::Damaged(_)) => prop_assert!(e.to_string().contains("00000001.log") && e.to_string().contains("byte")),
            other => prop_assert!(false, "start-up must stop, got {:?}", other.map(|_| ())),
        }
    }
}
