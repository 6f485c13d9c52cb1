//! Single claims on PostgreSQL go in groups, one at a time per node (src/group.rs). A group held
//! up (here: waiting on a row another transaction inserted and has not committed) must not hold up the node's other
//! single claims for `call_timeout`: once it has been out a moment, the next group goes beside it.
//! On the database IDEM_TEST_DATABASE_URL names, a schema of its own; skipped, loudly, without it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_conformance::{START, new_claim, ns};
use idem_core::{ClaimStore, ManualClock};
use idem_postgres::PgStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_held_up_by_a_row_lock_does_not_hold_up_the_others() {
    let Ok(url) = std::env::var("IDEM_TEST_DATABASE_URL") else {
        idem_conformance::skipped("IDEM_TEST_DATABASE_URL is not set: a PostgreSQL group test did not run");
        return;
    };
    let schema = format!("idem_groups_{}", std::process::id());
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"))
        .await
        .expect("schema");
    let mut config: tokio_postgres::Config = url.parse().expect("valid URL");
    config.options(format!("-c search_path={schema}"));
    // A call_timeout far longer than the test allows the other claims: they must not wait it out.
    let options =
        idem_postgres::PgOptions { pool_size: 4, call_timeout: Duration::from_secs(20), ..Default::default() };
    let clock = Arc::new(ManualClock::new(START));
    let store = Arc::new(
        PgStore::with_config(config, &options, idem_postgres::TimeSource::Given(clock)).await.expect("open PgStore"),
    );

    // Another session inserts the key and does not commit: a claim of the key waits for it (the
    // row, ids and parts included, is copied from a claim of the same key in another namespace).
    store.claim(&ns("source"), vec![new_claim(&["k"], None, None)]).await.expect("first claim");
    let (locker, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    locker
        .batch_execute(&format!(
            "BEGIN; INSERT INTO {schema}.claims (ns, id, parts, data, created_at, expires_at) \
             SELECT 'held', id, parts, data, created_at, expires_at FROM {schema}.claims WHERE ns = 'source'"
        ))
        .await
        .expect("insert the key, uncommitted");
    let held = ns("held");
    let waiting = tokio::spawn({
        let (store, held) = (Arc::clone(&store), held.clone());
        async move { store.claim(&held, vec![new_claim(&["k"], None, None)]).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the claim of the locked key did not wait for the lock");

    // Claims of other keys, one after another: each is answered at once, not at call_timeout.
    let free = ns("free");
    let started = Instant::now();
    for i in 0..30 {
        let answer = store.claim(&free, vec![new_claim(&[&format!("k{i}")], None, None)]).await.expect("claim");
        assert!(answer[0].claimed, "claim {i} of a new key was not claimed");
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "30 claims beside a held-up one took {took:?}");

    // The other insert is rolled back: the held-up claim is answered, and it claimed the key.
    locker.batch_execute("ROLLBACK").await.expect("rollback");
    let answer = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("answered").expect("task");
    assert!(answer.expect("claim")[0].claimed, "the key was free once the other insert was rolled back");
    drop(store);
    let _ = admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await;
}
