//! The embedded store as the server runs it — the log engine for claims and keys beside SQLite for
//! events — through every conformance suite; and an older data dir, whose claims and results are
//! in `idem.db`, moved into the log on its first start.

use std::sync::Arc;
use std::time::Duration;

use idem_conformance::{Harness, START, id, new_claim, ns, parts};
use idem_core::request::{Begin, NewRequest};
use idem_core::{ClaimStore, EventStore, ManualClock, RequestStore, StoreLifecycle, Stores};
use idem_server::embedded::{log_dir, open};
use idem_sqlite::{SqliteOptions, SqliteStore};

/// The stores as `idem serve` opens them on a fresh data dir.
async fn embedded() -> (Stores, Arc<ManualClock>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let stores = open(dir.path(), clock.clone()).await.expect("open");
    (stores, clock, dir)
}

async fn claims() -> Harness<dyn ClaimStore> {
    let (stores, clock, dir) = embedded().await;
    Harness { store: stores.claims, clock, guard: Box::new(dir) }
}

async fn requests() -> Harness<dyn RequestStore> {
    let (stores, clock, dir) = embedded().await;
    Harness { store: stores.requests, clock, guard: Box::new(dir) }
}

async fn events() -> Harness<dyn EventStore> {
    let (stores, clock, dir) = embedded().await;
    Harness { store: stores.events, clock, guard: Box::new(dir) }
}

idem_conformance::claim_suite!(claims);
idem_conformance::request_suite!(requests);
idem_conformance::event_suite!(events);

#[tokio::test]
async fn ready_when_open_and_closed_after_close() {
    let (stores, _clock, _dir) = embedded().await;
    stores.lifecycle.check_ready().await.expect("ready");
    stores.lifecycle.close().await;
    let claim = stores.claims.claim(&ns("c"), vec![new_claim(&["after"], None, None)]).await;
    assert!(matches!(claim, Err(idem_core::StoreError::Closed)), "the log closed: {claim:?}");
    let event = idem_core::event::NewEvent::new("s".into(), "e".into(), b"{}".to_vec(), None);
    let accepted = stores.events.accept_event(event).await;
    assert!(matches!(accepted, Err(idem_core::StoreError::Closed)), "the events closed: {accepted:?}");
}

#[tokio::test]
async fn an_older_data_dir_keeps_its_claims_and_results_in_the_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let n = ns("survey");
    {
        // A data dir as an idem before the log engine left it: claims and a stored result in
        // idem.db's own tables (made by its migrations; SQLite keeps only events now).
        let old = SqliteStore::open(dir.path(), clock.clone(), SqliteOptions::default()).expect("open sqlite");
        old.close().await;
        drop(old);
        let db = rusqlite::Connection::open(dir.path().join(SqliteStore::FILE_NAME)).expect("open idem.db");
        let claim = |p: &[&str], data: Option<&str>, expires_at: Option<i64>| {
            let parts = parts(p);
            db.execute(
                "INSERT INTO claims (ns, id, parts, data, created_at, expires_at) VALUES ('survey', ?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![&parts.id().0[..], parts.encode(), data, START.millis(), expires_at],
            )
            .expect("a legacy claim");
        };
        for i in 0..2_500 {
            claim(&["q1", &format!("user-{i}")], Some("{\"a\":1}"), None);
        }
        claim(&["short"], None, Some(START.plus(Duration::from_secs(60)).millis()));
        db.execute(
            "INSERT INTO requests (id, fingerprint, state, token, until, response) VALUES (?1, ?2, 1, NULL, ?3, ?4)",
            rusqlite::params![
                &id(&["order-1"]).0[..],
                &[3u8; 32][..],
                START.plus(Duration::from_secs(3600)).millis(),
                &b"stored"[..]
            ],
        )
        .expect("a legacy result");
    }
    assert!(!log_dir(dir.path()).exists());

    let stores = open(dir.path(), clock.clone()).await.expect("open embedded");
    let store = &stores.claims;
    assert!(log_dir(dir.path()).exists(), "the log was made");
    let found = store.get(&n, &parts(&["q1", "user-2499"]).id()).await.expect("get").expect("moved");
    assert_eq!(found.data.as_deref().map(|d| d.get()), Some("{\"a\":1}"));
    assert_eq!(found.created_at, START, "times are kept");
    assert!(store.prefix_exists(&n, &parts(&["q1"])).await.expect("prefix"));
    let short = store.get(&n, &parts(&["short"]).id()).await.expect("get").expect("moved");
    assert_eq!(short.expires_at, Some(START.plus(Duration::from_secs(60))), "expiry is kept");
    let again = store.claim(&n, vec![new_claim(&["q1", "user-7"], None, None)]).await.expect("claim");
    assert!(!again[0].claimed, "an old claim still dedups");
    let retry = NewRequest {
        id: id(&["order-1"]),
        fingerprint: [3; 32],
        lease: Duration::from_secs(30),
        keep: Duration::from_secs(30),
        held: vec![],
        client: None,
    };
    let begun = stores.requests.begin_request(retry).await.expect("begin");
    assert!(matches!(begun, Begin::Completed { result, .. } if result == b"stored"));
    assert_eq!(store.count_claims().await.expect("count"), vec![("survey".to_owned(), 2_501)]);
    stores.lifecycle.close().await;
    drop(stores);

    // The second start reads the log and copies nothing again.
    let stores = open(dir.path(), clock).await.expect("reopen");
    assert_eq!(stores.claims.count_claims().await.expect("count"), vec![("survey".to_owned(), 2_501)]);
}
