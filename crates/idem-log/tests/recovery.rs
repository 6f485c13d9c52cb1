//! The log format under damage: a log cut at any byte, with or without zeros after the cut (the
//! zero-filled space ahead of the head), recovers exactly the groups that were whole before the
//! cut (a prefix of what was acknowledged), and damage before the last group stops
//! start-up naming the file and the offset, as `idem check` does without starting.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use idem_conformance::{START, new_claim, ns, parts};
use idem_core::{ClaimStore, ManualClock, StoreLifecycle};
use idem_log::{LogOptions, LogStore, OpenError};
use proptest::prelude::*;

const CLAIMS: usize = 24;

/// A log of `CLAIMS` claims, one group each; answers the directory and the segment's length after
/// each acknowledgement.
fn written_log() -> (tempfile::TempDir, Vec<u64>) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let ends = runtime.block_on(async {
        let store = LogStore::open(dir.path(), Arc::new(ManualClock::new(START)), LogOptions::default()).expect("open");
        let mut ends = Vec::new();
        for i in 0..CLAIMS {
            let data = format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(i * 7));
            store.claim(&ns("n"), vec![new_claim(&["k", &i.to_string()], Some(&data), None)]).await.expect("claim");
            // Where the records end: the file itself is zero-filled beyond them.
            ends.push(idem_log::check(dir.path()).expect("check").bytes);
        }
        store.close().await;
        ends
    });
    (dir, ends)
}

fn segment(dir: &Path) -> PathBuf {
    dir.join("00000001.log")
}

fn copy_log(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().expect("temp dir");
    std::fs::copy(segment(from), segment(to.path())).expect("copy");
    to
}

/// Which of the claims a reopened log holds.
fn recovered(dir: &Path) -> Result<Vec<bool>, OpenError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let store = LogStore::open(dir, Arc::new(ManualClock::new(START)), LogOptions::default())?;
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
        let cut = (fraction * total as f64) as u64;
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
        let report = idem_log::check(copy.path());
        let Err(damage) = report else { panic!("check found damage at {at}") };
        prop_assert!(damage.file.ends_with("00000001.log"));
        prop_assert!(damage.offset <= at, "damage reported at {} for a flip at {at}", damage.offset);
        match recovered(copy.path()) {
            Err(OpenError::Damaged(d)) => prop_assert!(d.to_string().contains("00000001.log") && d.to_string().contains("byte")),
            other => prop_assert!(false, "start-up must stop, got {:?}", other.map(|_| ())),
        }
    }
}
