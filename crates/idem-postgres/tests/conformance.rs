//! The shared conformance suite on a real PostgreSQL: the URL comes from IDEM_TEST_DATABASE_URL
//! (`.ci/run` sets it); each test gets a schema of its own, dropped afterwards. Without the URL
//! every test says loudly that it was skipped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

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

idem_conformance::suite!(postgres);

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
