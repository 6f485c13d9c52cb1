//! The claim and request conformance suites on a log in a temporary directory, plus what only
//! this engine has: reopening replays the log, a second process is kept out, compaction keeps
//! what is live, and a write that fails mid-group leaves nothing of the group behind.

use std::sync::Arc;
use std::time::Duration;

use idem_conformance::{Harness, START, new_claim, ns, parts};
use idem_core::request::{Begin, NewRequest};
use idem_core::{ClaimStore, ManualClock, RequestStore, StoreError, StoreLifecycle};
use idem_log::sim::{FaultOp, SimDisk};
use idem_log::{LogOptions, LogStore, OpenError};

fn open(dir: &std::path::Path, clock: Arc<ManualClock>, options: LogOptions) -> LogStore {
    LogStore::open(dir, clock, options).expect("open")
}

async fn log() -> Harness<LogStore> {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = open(dir.path(), clock.clone(), LogOptions::default());
    Harness { store: Arc::new(store), clock, guard: Box::new(dir) }
}

async fn claims() -> Harness<dyn ClaimStore> {
    let h = log().await;
    Harness { store: h.store, clock: h.clock, guard: h.guard }
}

async fn requests() -> Harness<dyn RequestStore> {
    let h = log().await;
    Harness { store: h.store, clock: h.clock, guard: h.guard }
}

idem_conformance::claim_suite!(claims);
idem_conformance::request_suite!(requests);

fn request(key: &str, lease: Duration) -> NewRequest {
    NewRequest {
        id: idem_conformance::id(&[key]),
        fingerprint: [1; 32],
        lease,
        keep: lease,
        held: b"held".to_vec(),
        client: None,
    }
}

#[tokio::test]
async fn everything_acknowledged_survives_a_reopen_and_deletes_stay_deleted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = open(dir.path(), clock.clone(), LogOptions::default());
    let n = ns("n");
    store.claim(&n, vec![new_claim(&["kept", "a"], Some("1"), None)]).await.expect("claim");
    store.claim(&n, vec![new_claim(&["gone"], None, None)]).await.expect("claim");
    store.claim(&n, vec![new_claim(&["short"], None, Some(Duration::from_secs(5)))]).await.expect("claim");
    assert!(store.delete(&n, &parts(&["gone"]).id()).await.expect("delete"));
    let Begin::Started { token, .. } =
        store.begin_request(request("done", Duration::from_secs(30))).await.expect("begin")
    else {
        panic!("a new key starts")
    };
    assert!(
        store
            .complete_request(&idem_conformance::id(&["done"]), token, b"result", Duration::from_secs(60))
            .await
            .expect("complete")
            .is_some()
    );
    store.close().await;
    drop(store);

    clock.advance(Duration::from_secs(10));
    let store = open(dir.path(), clock, LogOptions::default());
    let again = store.claim(&n, vec![new_claim(&["kept", "a"], Some("2"), None)]).await.expect("claim");
    assert!(!again[0].claimed, "the claim was on disk");
    assert_eq!(again[0].record.data.as_deref().map(|d| d.get()), Some("1"));
    assert!(store.prefix_exists(&n, &parts(&["kept"])).await.expect("prefix"));
    assert!(store.get(&n, &parts(&["gone"]).id()).await.expect("get").is_none(), "a delete stays deleted");
    assert!(store.get(&n, &parts(&["short"]).id()).await.expect("get").is_none(), "expired while closed");
    let replay = store.begin_request(request("done", Duration::from_secs(30))).await.expect("begin");
    assert!(matches!(replay, Begin::Completed { result, .. } if result == b"result"));
}

#[tokio::test]
async fn a_second_store_on_the_same_dir_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let _first = open(dir.path(), clock.clone(), LogOptions::default());
    let second = LogStore::open(dir.path(), clock, LogOptions::default());
    assert!(matches!(second, Err(OpenError::Locked(_))), "second open must be refused");
}

#[tokio::test]
async fn a_write_failing_mid_group_fails_the_group_whole_and_nothing_of_it_survives() {
    a_failed_group_leaves_nothing(FaultOp::Write).await;
}

#[tokio::test]
async fn a_failed_sync_fails_its_group_whole_and_nothing_of_it_survives() {
    a_failed_group_leaves_nothing(FaultOp::Sync).await;
}

/// A 50-claim group whose write or sync fails (a failing write writes part of its bytes first):
/// it fails whole with `Unavailable`, none of it is visible, writes go on (the failed claim can be
/// made again, and is new), and after a clean restart, and after any power cut, the claims before
/// and after are there and the failed group is not.
async fn a_failed_group_leaves_nothing(fail: FaultOp) {
    let disk = SimDisk::new(7);
    let dir = std::path::Path::new("/data/log");
    let clock = Arc::new(ManualClock::new(START));
    let options = LogOptions { disk: Arc::new(disk.clone()), mark_every: None, ..LogOptions::default() };
    let store = open(dir, clock.clone(), options);
    let n = ns("n");
    store.claim(&n, vec![new_claim(&["before"], None, None)]).await.expect("claim");
    disk.fail_next(fail);
    let items = (0..50).map(|i| new_claim(&["batch", &i.to_string()], None, None)).collect();
    let failed = store.claim(&n, items).await;
    assert!(matches!(failed, Err(StoreError::Unavailable(_))), "the group failed: {failed:?}");
    assert!(!store.prefix_exists(&n, &parts(&["batch"])).await.expect("prefix"), "nothing of it is visible");
    assert!(store.get(&n, &parts(&["batch", "0"]).id()).await.expect("get").is_none());
    let retry = store.claim(&n, vec![new_claim(&["batch", "0"], None, None)]).await.expect("writes resume");
    assert!(retry[0].claimed, "the failed claim can be made again, and is new");

    let mut disks: Vec<SimDisk> = (0..40).map(|seed| disk.crash(seed)).collect();
    store.close().await;
    drop(store);
    disks.push(disk);
    for disk in disks {
        let options = LogOptions { disk: Arc::new(disk), mark_every: None, ..LogOptions::default() };
        let store = open(dir, clock.clone(), options);
        for key in [&["before"][..], &["batch", "0"]] {
            assert!(store.get(&n, &parts(key).id()).await.expect("get").is_some(), "{key:?} was acknowledged");
        }
        assert!(
            store.get(&n, &parts(&["batch", "1"]).id()).await.expect("get").is_none(),
            "the failed group never comes back"
        );
        store.close().await;
    }
}

#[tokio::test]
async fn compaction_reclaims_dead_records_and_keeps_every_live_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let options =
        LogOptions { segment_bytes: 64 * 1024, compact_every: Duration::from_secs(3600), ..LogOptions::default() };
    let store = open(dir.path(), clock.clone(), options.clone());
    let n = ns("n");
    for round in 0..40 {
        let items = (0..50).map(|i| new_claim(&["k", &format!("{round}-{i}")], Some("\"payload\""), None)).collect();
        store.claim(&n, items).await.expect("claim");
    }
    // Every other claim deleted, and a tombstone's target kept alive elsewhere.
    for round in 0..40 {
        for i in (0..50).step_by(2) {
            assert!(store.delete(&n, &parts(&["k", &format!("{round}-{i}")]).id()).await.expect("delete"));
        }
    }
    let before: u64 = store.space().values().map(|s| s.size).sum();
    let compacted = store.compact_now().await.expect("compact");
    assert!(compacted > 0, "some segment was worth compacting");
    let space = store.space();
    let (size, garbage): (u64, u64) = space.values().fold((0, 0), |(s, g), x| (s + x.size, g + x.garbage));
    assert!(size < before, "space was reclaimed: {size} of {before}");
    assert!(garbage * 2 <= size + 64 * 1024, "under 2x the live data after compaction: {garbage} dead of {size}");
    every_odd_claim_is_there(&store).await;
    store.close().await;
    drop(store);
    every_odd_claim_is_there(&open(dir.path(), clock, options)).await;
}

async fn every_odd_claim_is_there(store: &LogStore) {
    for round in 0..40 {
        for i in 0..50 {
            let found = store.get(&ns("n"), &parts(&["k", &format!("{round}-{i}")]).id()).await.expect("get");
            assert_eq!(found.is_some(), i % 2 == 1, "claim {round}-{i}");
        }
    }
}

/// The newest segment is zero-filled ahead of its last group (so that a group's sync does not
/// change the file's size); the zeros read as the end of the log, not as a torn group, and every
/// older segment is cut back to its last group when the next one starts.
#[tokio::test]
async fn the_head_is_zero_filled_ahead_and_sealed_segments_are_cut_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let options =
        LogOptions { segment_bytes: 64 * 1024, compact_every: Duration::from_secs(3600), ..LogOptions::default() };
    let store = open(dir.path(), clock.clone(), options.clone());
    for round in 0..60 {
        claim_fifty(&store, round).await;
    }
    // One more group: answered after the writer has started the segment the last round filled.
    store.claim(&ns("n"), vec![new_claim(&["last"], None, None)]).await.expect("claim");
    let report = check(dir.path());
    assert!(report.damage.is_empty(), "a zero-filled head is no damage: {report:?}");
    assert!(report.segments > 2, "segments were rolled: {report:?}");
    assert_eq!(report.torn, None, "the zeros are the end of the log, not a torn group");
    let on_disk: u64 = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().expect("metadata").len())
        .sum();
    assert_eq!(on_disk - report.bytes, idem_log::PREALLOCATE, "only the newest segment runs on in zeros");
    store.close().await;
    drop(store);

    // Reopened: the next groups go into the zeros, and all of it is there after another reopen.
    let store = open(dir.path(), clock.clone(), options.clone());
    for round in 60..65 {
        claim_fifty(&store, round).await;
    }
    store.close().await;
    drop(store);
    let store = open(dir.path(), clock, options);
    for round in 0..65 {
        for i in [0, 49] {
            let key = format!("{round}-{i}");
            assert!(store.get(&ns("n"), &parts(&["k", &key]).id()).await.expect("get").is_some(), "claim {key}");
        }
    }
    assert_eq!(check(dir.path()).torn, None);
}

fn check(dir: &std::path::Path) -> idem_log::CheckReport {
    idem_log::check(&idem_log::disk::OsDisk, dir).expect("check")
}

async fn claim_fifty(store: &LogStore, round: usize) {
    let items = (0..50).map(|i| new_claim(&["k", &format!("{round}-{i}")], Some("\"payload\""), None)).collect();
    store.claim(&ns("n"), items).await.expect("claim");
}
