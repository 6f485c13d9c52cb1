//! The shared conformance suite on a real PostgreSQL: the URL comes from IDEM_TEST_DATABASE_URL
//! (`.ci/run` sets it); each test gets a schema of its own, dropped afterwards. Without the URL
//! every test says loudly that it was skipped. The suite runs twice: on the database, and through
//! a PgBouncer of each test's own in transaction mode with `pooler = "transaction"` (skipped,
//! loudly, where `pgbouncer` is not installed); and what a pooler met without the setting does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use idem_conformance::pgbouncer::{PgBouncer, Target};
use idem_conformance::{Harness, START};
use idem_core::ManualClock;
use idem_postgres::PgStore;

const URL_VAR: &str = "IDEM_TEST_DATABASE_URL";

/// Drops the test's schema when the harness goes.
struct Schema {
    url: String,
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                if let Ok((client, connection)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                    tokio::spawn(connection);
                    let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE")).await;
                }
            });
        })
        .join();
    }
}

async fn postgres() -> Option<Harness<PgStore>> {
    let (url, name) = fresh_schema().await?;
    let mut config: tokio_postgres::Config = url.parse().expect("valid URL");
    config.options(format!("-c search_path={name}"));
    let clock = Arc::new(ManualClock::new(START));
    let store = PgStore::with_config(
        config,
        &idem_postgres::PgOptions { pool_size: 8, ..Default::default() },
        idem_postgres::TimeSource::Given(clock.clone()),
    )
    .await
    .expect("open PgStore");
    Some(Harness { store: Arc::new(store), clock, guard: Box::new(Schema { url, name }) })
}

/// The same, through a PgBouncer of the test's own in transaction mode, with
/// `pooler = "transaction"`: every store operation works with no statement outliving its
/// transaction.
async fn through_pgbouncer() -> Option<Harness<PgStore>> {
    let (url, name) = fresh_schema().await?;
    let schema = Schema { url, name };
    let bouncer = pgbouncer(&schema, "transaction", &[], "the conformance suite")?;
    let clock = Arc::new(ManualClock::new(START));
    let options =
        idem_postgres::PgOptions { pool_size: 8, pooler: idem_postgres::Pooler::Transaction, ..Default::default() };
    let store = PgStore::connect(&bouncer.url(), &options, idem_postgres::TimeSource::Given(clock.clone()))
        .await
        .expect("open PgStore through PgBouncer");
    // PgBouncer goes first, then the schema.
    Some(Harness { store: Arc::new(store), clock, guard: Box::new((bouncer, schema)) })
}

/// A schema of the test's own on the test database: its URL and name.
async fn fresh_schema() -> Option<(String, String)> {
    let Ok(url) = std::env::var(URL_VAR) else {
        announce_skip();
        return None;
    };
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!("idem_test_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
    let (client, connection) =
        tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect to the test database");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"))
        .await
        .expect("create schema");
    Some((url, name))
}

/// A PgBouncer in `mode` in front of `schema`; `None` (said loudly) when it is not installed.
fn pgbouncer(schema: &Schema, mode: &str, extra: &[(&str, &str)], test: &str) -> Option<PgBouncer> {
    let config: tokio_postgres::Config = schema.url.parse().expect("valid URL");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let target = Target {
        host,
        port: config.get_ports().first().copied().unwrap_or(5432),
        user: config.get_user().unwrap_or("postgres").to_owned(),
        password: config.get_password().map(|p| String::from_utf8_lossy(p).into_owned()),
        dbname: config.get_dbname().unwrap_or("postgres").to_owned(),
        schema: Some(schema.name.clone()),
    };
    PgBouncer::start(&target, mode, extra, test)
}

idem_conformance::suite!(postgres);

/// The whole suite again, through PgBouncer in transaction mode.
mod pgbouncer_transaction_mode {
    idem_conformance::suite!(crate::through_pgbouncer);
}

/// Written straight to stderr, past the test harness's output capture, so that it shows.
fn announce_skip() {
    idem_conformance::skipped(&format!(
        "{URL_VAR} is not set: this PostgreSQL conformance test did not run (e.g. {URL_VAR}=postgres://postgres@127.0.0.1:5432/postgres)"
    ));
}

/// A node whose own clock runs an hour fast still stamps and expires claims by the database's
/// clock, so it agrees with every other node.
#[tokio::test]
async fn a_node_with_a_skewed_clock_keeps_database_time() {
    /// A wall clock an hour fast, and a monotonic clock that started a day ago.
    #[derive(Debug)]
    struct HourFast(std::time::Instant);
    impl idem_core::Ticks for HourFast {
        fn wall(&self) -> idem_core::Timestamp {
            idem_core::SystemClock.now().plus(std::time::Duration::from_secs(3600))
        }
        fn monotonic(&self) -> std::time::Duration {
            self.0.elapsed() + std::time::Duration::from_secs(86_400)
        }
    }
    use idem_core::Clock;
    let Some(harness) = postgres().await else { return };
    let Ok(url) = std::env::var(URL_VAR) else { return };
    let store = PgStore::connect(
        &url,
        &idem_postgres::PgOptions { pool_size: 2, ..Default::default() },
        idem_postgres::TimeSource::Database { ticks: Arc::new(HourFast(std::time::Instant::now())) },
    )
    .await
    .expect("open");
    let skew = store.clock().now().millis() - idem_core::SystemClock.now().millis();
    assert!(skew.abs() < 5_000, "the store keeps database time, not the node's: off by {skew} ms");
    drop(harness);
}

/// What a store met by a transaction pooler without the setting answers, to every call.
fn assert_misconfigured<T: std::fmt::Debug>(answer: Result<T, idem_core::StoreError>, what: &str) {
    match answer {
        Err(idem_core::StoreError::Misconfigured(text)) => assert_eq!(text, idem_postgres::MISCONFIGURED, "{what}"),
        other => panic!("{what}: {other:?}"),
    }
}

/// A store through PgBouncer in `mode` (with `extra` settings), without `pooler`; `warm`: server
/// connections PgBouncer holds idle before the store starts.
async fn without_the_setting(mode: &str, extra: &[(&str, &str)], warm: usize) -> Option<(PgStore, PgBouncer, Schema)> {
    let (url, name) = fresh_schema().await?;
    let schema = Schema { url, name };
    let bouncer = pgbouncer(&schema, mode, extra, "a pooler test")?;
    let mut held = Vec::new();
    for _ in 0..warm {
        let (client, connection) =
            tokio_postgres::connect(&bouncer.url(), tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(connection);
        client.batch_execute("BEGIN; SELECT 1").await.expect("hold a server connection");
        held.push(client);
    }
    for client in held {
        client.batch_execute("COMMIT").await.expect("give it back");
    }
    let options = idem_postgres::PgOptions { pool_size: 4, ..Default::default() };
    let time = idem_postgres::TimeSource::Given(Arc::new(ManualClock::new(START)));
    let store = PgStore::connect(&bouncer.url(), &options, time).await.expect("it starts all the same");
    Some((store, bouncer, schema))
}

/// PgBouncer in transaction mode met without `pooler = "transaction"` is found at start-up (the
/// probe sees one connection's server backend change between two transactions): every call then
/// answers the one clear error, readiness included, and no named statement is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_without_the_setting_is_found_at_start() {
    use idem_core::{ClaimStore, StoreLifecycle};
    let Some((store, _bouncer, _schema)) = without_the_setting("transaction", &[], 0).await else { return };
    assert_misconfigured(store.check_ready().await, "readiness");
    let ns = idem_conformance::ns("pooled");
    assert_misconfigured(store.claim(&ns, vec![idem_conformance::new_claim(&["a"], None, None)]).await, "a claim");
    assert_misconfigured(store.lookup(&ns, &[idem_conformance::id(&["a"])]).await, "a lookup");
}

/// One the probe cannot see (two idle server connections handed out in turn: the probe's second
/// transaction gets the other) is found by the first statement it loses (SQLSTATE 26000: bound on
/// a server connection it was not prepared on), and from then on every call answers so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_the_probe_misses_is_found_by_its_first_lost_statement() {
    use idem_core::{ClaimStore, StoreLifecycle};
    let round_robin = [("server_round_robin", "1")];
    let Some((store, _bouncer, _schema)) = without_the_setting("transaction", &round_robin, 2).await else { return };
    let ns = idem_conformance::ns("pooled");
    let mut answers = Vec::new();
    for _ in 0..20 {
        match store.lookup(&ns, &[idem_conformance::id(&["a"])]).await {
            Ok(found) => answers.push(format!("{found:?}")),
            Err(idem_core::StoreError::Misconfigured(_)) => break,
            Err(other) => panic!("a lost statement is the one clear error, not {other:?}"),
        }
    }
    assert!(answers.len() < 20, "no lookup lost its statement: {answers:?}");
    assert_misconfigured(store.check_ready().await, "readiness, once it is known");
    assert_misconfigured(store.claim(&ns, vec![idem_conformance::new_claim(&["a"], None, None)]).await, "a claim");
}

/// PgBouncer in session mode needs no setting: each client keeps its server connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_pooler_needs_no_setting() {
    use idem_core::{ClaimStore, StoreLifecycle};
    let Some((store, _bouncer, _schema)) = without_the_setting("session", &[], 2).await else { return };
    store.check_ready().await.expect("ready");
    let ns = idem_conformance::ns("pooled");
    for i in 0..20 {
        let claimed = store.claim(&ns, vec![idem_conformance::new_claim(&[&format!("k{i}")], None, None)]).await;
        assert!(claimed.expect("a claim through session pooling")[0].claimed);
    }
}

/// A duplicate is a read: a claim of a live key, a begin of a completed or held key, leave the
/// row as it was (no row lock: its `xmax` stays 0, so no transaction id, no WAL, no fsync) and draw
/// no fencing number; only an expired key is written, once, when it is taken again.
#[tokio::test]
async fn a_duplicate_is_a_read() {
    use idem_core::request::{Begin, NewRequest};
    use idem_core::{ClaimStore, RequestStore};
    let Some((url, name)) = fresh_schema().await else { return };
    let schema = Schema { url, name };
    let mut config: tokio_postgres::Config = schema.url.parse().expect("valid URL");
    config.options(format!("-c search_path={}", schema.name));
    let clock = Arc::new(ManualClock::new(START));
    let options = idem_postgres::PgOptions { pool_size: 2, ..Default::default() };
    let store = PgStore::with_config(config.clone(), &options, idem_postgres::TimeSource::Given(clock.clone()))
        .await
        .expect("open PgStore");
    let (raw, connection) = config.connect(tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    let xmax = |table: &'static str| {
        let raw = &raw;
        async move {
            let rows = raw.query(&format!("SELECT xmax::text FROM {table}"), &[]).await.expect("xmax");
            rows.iter().map(|row| row.get::<_, String>(0)).collect::<Vec<_>>()
        }
    };
    let fences = || async {
        raw.query_one("SELECT last_value FROM request_fences", &[]).await.expect("fences").get::<_, i64>(0)
    };

    let ns = idem_conformance::ns("dups");
    let ttl = Some(std::time::Duration::from_secs(60));
    let claim = || idem_conformance::new_claim(&["a"], None, ttl);
    assert!(store.claim(&ns, vec![claim()]).await.expect("claim")[0].claimed);
    for _ in 0..3 {
        assert!(!store.claim(&ns, vec![claim()]).await.expect("claim again")[0].claimed);
    }
    let batch = store.claim(&ns, vec![claim(), idem_conformance::new_claim(&["b"], None, ttl)]).await.expect("batch");
    assert_eq!((batch[0].claimed, batch[1].claimed), (false, true));
    assert_eq!(xmax("claims").await, ["0", "0"], "a duplicate claim locked the row");
    clock.advance(std::time::Duration::from_secs(61));
    assert!(store.claim(&ns, vec![claim()]).await.expect("claim after expiry")[0].claimed, "an expired key is taken");

    let request = NewRequest {
        id: idem_conformance::id(&["gateway", "k"]),
        fingerprint: [7; 32],
        lease: std::time::Duration::from_secs(30),
        keep: std::time::Duration::from_secs(30),
        held: Vec::new(),
        client: None,
    };
    let Begin::Started { token, .. } = store.begin_request(request.clone()).await.expect("begin") else {
        panic!("a new key is taken")
    };
    let drawn = fences().await;
    for _ in 0..3 {
        let again = store.begin_request(request.clone()).await.expect("begin while held");
        assert!(matches!(again, Begin::Held { .. }), "{again:?}");
    }
    store.complete_request(&request.id, token, b"201 {}", std::time::Duration::from_secs(60)).await.expect("complete");
    for _ in 0..3 {
        let replay = store.begin_request(request.clone()).await.expect("replay");
        assert!(matches!(replay, Begin::Completed { .. }), "{replay:?}");
    }
    assert_eq!(xmax("requests").await, ["0"], "a replay or a begin of a held key locked the row");
    assert_eq!(fences().await, drawn, "a begin that took nothing drew a fencing number");
}

/// Batch claims and prefix deletes of the same keys, on several connections at once, end without
/// an error: the delete locks in the order a batch takes its keys (and a deadlock with anything
/// else is run again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_claims_and_prefix_deletes_race_without_errors() {
    use idem_core::ClaimStore;
    let Some(harness) = postgres().await else { return };
    let store = Arc::clone(&harness.store);
    let ns = idem_conformance::ns("race");
    let prefix = idem_core::Parts::new(vec!["p".into()]).expect("prefix");
    let keys: Vec<String> = (0..300).map(|i| format!("{i:03}")).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for claimer in 0..4u64 {
        let (store, ns, keys) = (Arc::clone(&store), ns.clone(), keys.clone());
        tasks.spawn(async move {
            let mut seed = claimer * 7919 + 1;
            for _ in 0..25 {
                let mut order = keys.clone();
                for i in (1..order.len()).rev() {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    order.swap(i, (seed >> 33) as usize % (i + 1));
                }
                let batch = order.iter().map(|k| idem_conformance::new_claim(&["p", k], None, None)).collect();
                store.claim(&ns, batch).await.map(drop).map_err(|e| format!("a batch claim: {e}"))?;
            }
            Ok::<_, String>(())
        });
    }
    for _ in 0..2 {
        let (store, ns, prefix) = (Arc::clone(&store), ns.clone(), prefix.clone());
        tasks.spawn(async move {
            for _ in 0..25 {
                store
                    .delete_prefix(&ns, &prefix, 10_000)
                    .await
                    .map(drop)
                    .map_err(|e| format!("a prefix delete: {e}"))?;
            }
            Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("task").expect("no call failed");
    }
}
