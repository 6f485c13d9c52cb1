//! The shared conformance suite on a temporary SQLite file, plus what only the embedded store has:
//! its file survives a reopen, and a second process cannot open the same data dir.

use std::sync::Arc;

use idem_conformance::{Harness, START, new_claim, ns};
use idem_core::{ClaimStore, ManualClock, StoreLifecycle};
use idem_sqlite::{OpenError, SqliteOptions, SqliteStore};

async fn sqlite() -> Harness {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = SqliteStore::open(dir.path(), clock.clone(), SqliteOptions::default()).expect("open");
    Harness { store: Arc::new(store), clock, guard: Box::new(dir) }
}

idem_conformance::suite!(sqlite);

#[tokio::test]
async fn claims_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = SqliteStore::open(dir.path(), clock.clone(), SqliteOptions::default()).expect("open");
    store.claim(&ns("n"), vec![new_claim(&["kept"], Some("1"), None)]).await.expect("claim");
    store.close().await;
    drop(store);
    let store = SqliteStore::open(dir.path(), clock, SqliteOptions::default()).expect("reopen");
    let again = store.claim(&ns("n"), vec![new_claim(&["kept"], Some("2"), None)]).await.expect("claim");
    assert!(!again[0].claimed, "the claim was on disk");
}

#[tokio::test]
async fn a_second_store_on_the_same_dir_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let _first = SqliteStore::open(dir.path(), clock.clone(), SqliteOptions::default()).expect("open");
    let second = SqliteStore::open(dir.path(), clock, SqliteOptions::default());
    assert!(matches!(second, Err(OpenError::Locked(_))), "second open must be refused");
}
