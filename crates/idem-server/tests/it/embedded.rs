//! The embedded store as the server runs it — the log engine for claims and keys beside SQLite for
//! events — through every conformance suite; and an older data dir, whose claims and results are
//! in `idem.db`, moved into the log on its first start.

use std::sync::Arc;
use std::time::Duration;

use idem_conformance::{Harness, START, id, new_claim, ns, parts};
use idem_core::request::{Begin, NewRequest};
use idem_core::{ClaimStore, ManualClock, RequestStore, StoreLifecycle};
use idem_server::embedded::{EmbeddedStore, log_dir};
use idem_sqlite::{SqliteOptions, SqliteStore};

async fn embedded() -> Harness {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = EmbeddedStore::open(dir.path(), clock.clone()).await.expect("open");
    Harness { store: Arc::new(store), clock, guard: Box::new(dir) }
}

idem_conformance::suite!(embedded);

#[tokio::test]
async fn an_older_data_dir_keeps_its_claims_and_results_in_the_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let n = ns("survey");
    {
        let old = SqliteStore::open(dir.path(), clock.clone(), SqliteOptions::default()).expect("open sqlite");
        let items = (0..2_500).map(|i| new_claim(&["q1", &format!("user-{i}")], Some("{\"a\":1}"), None)).collect();
        old.claim(&n, items).await.expect("claim");
        old.claim(&n, vec![new_claim(&["short"], None, Some(Duration::from_secs(60)))]).await.expect("claim");
        let request =
            NewRequest { id: id(&["order-1"]), fingerprint: [3; 32], lease: Duration::from_secs(30), held: vec![] };
        let Begin::Started { token, .. } = old.begin_request(request).await.expect("begin") else { panic!("started") };
        assert!(
            old.complete_request(&id(&["order-1"]), token, b"stored", Duration::from_secs(3600))
                .await
                .expect("complete")
        );
        old.close().await;
    }
    assert!(!log_dir(dir.path()).exists());

    let store = EmbeddedStore::open(dir.path(), clock.clone()).await.expect("open embedded");
    assert!(log_dir(dir.path()).exists(), "the log was made");
    let found = store.get(&n, &parts(&["q1", "user-2499"]).id()).await.expect("get").expect("moved");
    assert_eq!(found.data.as_deref().map(|d| d.get()), Some("{\"a\":1}"));
    assert_eq!(found.created_at, START, "times are kept");
    assert!(store.prefix_exists(&n, &parts(&["q1"])).await.expect("prefix"));
    let short = store.get(&n, &parts(&["short"]).id()).await.expect("get").expect("moved");
    assert_eq!(short.expires_at, Some(START.plus(Duration::from_secs(60))), "expiry is kept");
    let again = store.claim(&n, vec![new_claim(&["q1", "user-7"], None, None)]).await.expect("claim");
    assert!(!again[0].claimed, "an old claim still dedups");
    let retry = NewRequest { id: id(&["order-1"]), fingerprint: [3; 32], lease: Duration::from_secs(30), held: vec![] };
    assert!(
        matches!(store.begin_request(retry).await.expect("begin"), Begin::Completed { result, .. } if result == b"stored")
    );
    assert_eq!(store.count_claims().await.expect("count"), vec![("survey".to_owned(), 2_501)]);
    store.close().await;
    drop(store);

    // The second start reads the log and copies nothing again.
    let store = EmbeddedStore::open(dir.path(), clock).await.expect("reopen");
    assert_eq!(store.count_claims().await.expect("count"), vec![("survey".to_owned(), 2_501)]);
}
