//! Time, expiry and compaction together, where the engine once wedged: compaction retired a
//! segment that expired index entries still pointed into, and from then on every sweep failed
//! (with every command that shared its group). And one command that fails must fail alone.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use idem_conformance::{START, new_claim, ns, parts};
use idem_core::request::{Begin, NewRequest};
use idem_core::{ClaimStore, ManualClock, RequestStore, StoreError, StoreLifecycle};
use idem_log::{LogOptions, LogStore};

fn options() -> LogOptions {
    LogOptions {
        segment_bytes: 16 * 1024,
        compact_every: Duration::from_secs(3600),
        mark_every: None,
        ..LogOptions::default()
    }
}

fn open(dir: &Path, clock: &Arc<ManualClock>) -> LogStore {
    LogStore::open(dir, clock.clone(), options()).expect("open")
}

/// The log's bytes up to the end of each segment's last group (not the zeros ahead of the head).
fn on_disk(dir: &Path) -> u64 {
    idem_log::check(&idem_log::disk::OsDisk, dir).expect("check").bytes
}

#[tokio::test]
async fn expired_claims_in_a_compacted_segment_never_wedge_the_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = open(dir.path(), &clock);
    let n = ns("expiring");
    let data = format!("\"{}\"", "x".repeat(500));
    for batch in 0..60 {
        let items =
            (0..20).map(|i| new_claim(&["k", &format!("{batch}-{i}")], Some(&data), Some(Duration::from_secs(1))));
        store.claim(&n, items.collect()).await.expect("claim");
    }
    store.claim(&n, vec![new_claim(&["forever"], None, None)]).await.expect("claim");
    let peak = on_disk(dir.path());
    clock.advance(Duration::from_secs(2));
    assert_eq!(store.count_claims().await.expect("count"), vec![("expiring".to_owned(), 1)], "live, unswept");

    // Some expired claims swept (so that some segments are more than half dead), the rest not:
    // compaction retires segments that unswept expired entries still point into.
    store.sweep_expired(800).await.expect("sweep");
    let compacted = store.compact_now().await.expect("compact");
    assert!(compacted > 0, "segments were compacted");
    // Every sweep, claim and begin goes on.
    while store.sweep_expired(100).await.expect("a sweep after compaction") == 100 {}
    let again = store.claim(&n, vec![new_claim(&["k", "0-0"], None, None)]).await.expect("claim an expired key");
    assert!(again[0].claimed, "an expired key whose segment was compacted is new");
    store.compact_now().await.expect("compact");
    assert!(on_disk(dir.path()) * 2 < peak, "space came back: {} of {peak}", on_disk(dir.path()));
    assert_eq!(store.count_claims().await.expect("count"), vec![("expiring".to_owned(), 2)]);
    store.close().await;
    drop(store);
    let store = open(dir.path(), &clock);
    assert!(store.get(&n, &parts(&["forever"]).id()).await.expect("get").is_some());
    assert!(store.get(&n, &parts(&["k", "0-0"]).id()).await.expect("get").is_some());
    assert!(store.get(&n, &parts(&["k", "5-5"]).id()).await.expect("get").is_none());
}

#[tokio::test]
async fn an_ended_lease_in_a_compacted_segment_frees_its_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = open(dir.path(), &clock);
    let request = |key: &str| NewRequest {
        id: idem_conformance::id(&[key]),
        fingerprint: [3; 32],
        lease: Duration::from_secs(5),
        keep: Duration::from_secs(5),
        held: vec![b'h'; 400],
        client: None,
    };
    for i in 0..200 {
        let begun = store.begin_request(request(&format!("r{i}"))).await.expect("begin");
        assert!(matches!(begun, Begin::Started { .. }));
    }
    // Past the lease and past the time a lease that ran out is kept for its holder.
    clock.advance(Duration::from_secs(10) + idem_core::request::ENDED_LEASE_KEPT);
    store.sweep_requests(150).await.expect("sweep some");
    assert!(store.compact_now().await.expect("compact") > 0, "segments were compacted");
    for i in 0..200 {
        let begun = store.begin_request(request(&format!("r{i}"))).await.expect("begin after compaction");
        assert!(matches!(begun, Begin::Started { .. }), "r{i} is free again");
    }
    while store.sweep_requests(100).await.expect("sweep") == 100 {}
}

/// A key that never expired, replaced (a plain `SET` of the Redis protocol) by a record that
/// expires soon: once the new record's segment is compacted away, the old record, still in a
/// segment kept for its live neighbours, must not come back at the next start. The tombstone the
/// update wrote outlives the new record's segment for that.
#[tokio::test]
async fn a_claim_replaced_by_one_that_expired_never_comes_back() {
    use idem_core::{ClaimChange, ClaimUpdate, Keep, UpdateWhen};
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = open(dir.path(), &clock);
    let n = ns("replaced");
    let data = format!("\"{}\"", "x".repeat(500));
    // The old record among neighbours that stay live: its segment is never more than half dead.
    store.claim(&n, vec![new_claim(&["k"], Some("\"old\""), None)]).await.expect("claim");
    let neighbours = (0..25).map(|i| new_claim(&["stays", &i.to_string()], Some(&data), None));
    store.claim(&n, neighbours.collect()).await.expect("claim");
    // Claims that expire soon, past the old record's segment; the new record among them.
    let expiring = |batch: usize| -> Vec<idem_core::NewClaim> {
        let key = |i: usize| format!("{batch}-{i}");
        (0..20).map(|i| new_claim(&["gone", &key(i)], Some(&data), Some(Duration::from_secs(1)))).collect()
    };
    for batch in 0..3 {
        store.claim(&n, expiring(batch)).await.expect("claim");
    }
    let soon = Some(START.plus(Duration::from_secs(1)));
    let new = serde_json::value::RawValue::from_string("\"new\"".into()).expect("json");
    let set = ClaimChange::Put { data: Keep::Set(Some(new)), expires_at: Keep::Set(soon) };
    let out = store.update(&n, ClaimUpdate { parts: parts(&["k"]), when: UpdateWhen::Always, change: set }).await;
    assert!(out.expect("update").applied);
    for batch in 3..40 {
        store.claim(&n, expiring(batch)).await.expect("claim");
    }
    clock.advance(Duration::from_secs(2));
    assert!(store.get(&n, &parts(&["k"]).id()).await.expect("get").is_none(), "expired");
    while store.sweep_expired(100).await.expect("sweep") == 100 {}
    assert!(store.compact_now().await.expect("compact") > 0, "the new record's segment went");
    store.close().await;
    drop(store);
    let store = open(dir.path(), &clock);
    assert!(store.get(&n, &parts(&["k"]).id()).await.expect("get").is_none(), "the old record stayed dead");
    assert!(store.get(&n, &parts(&["stays", "3"]).id()).await.expect("get").is_some());
    let again = store.claim(&n, vec![new_claim(&["k"], None, None)]).await.expect("claim");
    assert!(again[0].claimed, "the key is free");
}

/// A record that cannot be read fails the one command that needs it; every other command, in
/// the same group or not, succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failing_command_fails_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = Arc::new(open(dir.path(), &clock));
    let n = ns("n");
    store.claim(&n, vec![new_claim(&["victim"], Some("\"VICTIMDATA\""), None)]).await.expect("claim");
    let segment = dir.path().join("00000001.log");
    let mut bytes = std::fs::read(&segment).expect("read");
    let at = bytes.windows(10).position(|w| w == b"VICTIMDATA").expect("the record");
    bytes[at] = b'W';
    std::fs::write(&segment, &bytes).expect("damage");

    let mut tasks = Vec::new();
    for round in 0..5 {
        for i in 0..40 {
            let (store, n) = (Arc::clone(&store), n.clone());
            tasks.push(tokio::spawn(async move {
                store.claim(&n, vec![new_claim(&["ok", &format!("{round}-{i}")], None, None)]).await
            }));
        }
        let (store, n) = (Arc::clone(&store), n.clone());
        tasks.push(tokio::spawn(async move {
            let failed = store.delete(&n, &parts(&["victim"]).id()).await;
            assert!(matches!(failed, Err(StoreError::Internal(_))), "the damaged record fails its command: {failed:?}");
            Ok(Vec::new())
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("every other command succeeds");
    }
    for round in 0..5 {
        for i in 0..40 {
            let key = format!("{round}-{i}");
            assert!(store.get(&n, &parts(&["ok", &key]).id()).await.expect("get").is_some());
        }
    }
}
