//! The event conformance suite on a temporary SQLite file, plus what only this store has: events
//! survive a reopen, a closed store refuses work, and a second process cannot open the same data
//! dir. (Claims and leased keys are the log engine's: `idem-log`'s tests.)

use std::sync::Arc;

use idem_conformance::{Harness, START};
use idem_core::event::{Accept, NewEvent};
use idem_core::{EventStore, ManualClock, StoreError, StoreLifecycle};
use idem_sqlite::{OpenError, SqliteOptions, SqliteStore};

async fn sqlite() -> Harness<dyn EventStore> {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = SqliteStore::open(dir.path(), clock.clone(), SqliteOptions::default()).expect("open");
    Harness { store: Arc::new(store), clock, guard: Box::new(dir) }
}

idem_conformance::event_suite!(sqlite);

fn event(id: &str) -> NewEvent {
    NewEvent::new("s".into(), id.into(), b"{}".to_vec(), None)
}

#[tokio::test]
async fn events_survive_a_reopen_and_a_closed_store_refuses_work() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let store = SqliteStore::open(dir.path(), clock.clone(), SqliteOptions::default()).expect("open");
    store.check_ready().await.expect("an open store is ready");
    let Accept::Accepted { receipt_id: first } = store.accept_event(event("kept")).await.expect("accept") else {
        panic!("a new event is accepted")
    };
    store.close().await;
    assert!(matches!(store.accept_event(event("after")).await, Err(StoreError::Closed)), "closed");
    drop(store);
    let store = SqliteStore::open(dir.path(), clock, SqliteOptions::default()).expect("reopen");
    let again = store.accept_event(event("kept")).await.expect("accept");
    assert!(matches!(again, Accept::Duplicate { receipt_id, .. } if receipt_id == first), "the event was on disk");
}

#[tokio::test]
async fn a_second_store_on_the_same_dir_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let _first = SqliteStore::open(dir.path(), clock.clone(), SqliteOptions::default()).expect("open");
    let second = SqliteStore::open(dir.path(), clock, SqliteOptions::default());
    assert!(matches!(second, Err(OpenError::Locked(_))), "second open must be refused");
}
