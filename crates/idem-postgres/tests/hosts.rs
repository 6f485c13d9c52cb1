//! Starting on a replicated PostgreSQL (contract §10): a multi-host URL whose first host does not
//! answer, or is read-only, is passed over; when every host is read-only or unreachable, the error
//! says so host by host, and never shows the URL's password. On the database
//! IDEM_TEST_DATABASE_URL names; skipped, loudly, without it.

use std::sync::Arc;

use idem_core::SystemClock;
use idem_postgres::{PgOptions, PgStore, TimeSource};

fn base() -> Option<tokio_postgres::Config> {
    match std::env::var("IDEM_TEST_DATABASE_URL") {
        Ok(url) => Some(url.parse().expect("a PostgreSQL URL")),
        Err(_) => {
            idem_conformance::skipped("IDEM_TEST_DATABASE_URL is not set: a multi-host test did not run");
            None
        }
    }
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn url(base: &tokio_postgres::Config, hosts: &[u16], dbname: &str) -> String {
    let user = base.get_user().unwrap_or("postgres");
    let list: Vec<String> = hosts.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    format!("postgres://{user}:not-a-real-secret@{}/{dbname}", list.join(","))
}

fn port(base: &tokio_postgres::Config) -> u16 {
    base.get_ports().first().copied().unwrap_or(5432)
}

fn options() -> PgOptions {
    PgOptions { pool_size: 2, connect_timeout: std::time::Duration::from_secs(2), ..PgOptions::default() }
}

#[tokio::test]
async fn a_first_host_that_does_not_answer_is_passed_over() {
    let Some(base) = base() else { return };
    let dbname = base.get_dbname().unwrap_or("postgres").to_owned();
    let url = url(&base, &[dead_port(), port(&base)], &dbname);
    let store = PgStore::connect(&url, &options(), TimeSource::Given(Arc::new(SystemClock))).await;
    assert!(store.is_ok(), "connected through the second host: {:?}", store.err().map(|e| e.to_string()));
}

#[tokio::test]
async fn every_host_read_only_or_unreachable_is_said_in_words() {
    let Some(base) = base() else { return };
    // A database whose sessions are read-only: what a standby answers to SHOW transaction_read_only.
    let dbname = format!("idem_read_only_{}", std::process::id());
    let (admin, connection) = base.connect(tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {dbname}")).await.expect("drop");
    admin.batch_execute(&format!("CREATE DATABASE {dbname}")).await.expect("create");
    admin
        .batch_execute(&format!("ALTER DATABASE {dbname} SET default_transaction_read_only = on"))
        .await
        .expect("read-only");
    let dead = dead_port();
    let url = url(&base, &[port(&base), dead], &dbname);
    let error = match PgStore::connect(&url, &options(), TimeSource::Given(Arc::new(SystemClock))).await {
        Ok(_) => panic!("connected to a read-only database"),
        Err(e) => e.to_string(),
    };
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {dbname}")).await.expect("drop");
    assert!(error.contains(&format!("127.0.0.1:{}: read-only", port(&base))), "{error}");
    assert!(error.contains(&format!("127.0.0.1:{dead}:")), "{error}");
    assert!(error.to_lowercase().contains("refused"), "{error}");
    assert!(!error.contains("not-a-real-secret"), "the password is never shown: {error}");
}

/// A first host that accepts TCP and then says nothing (a dead host behind a load balancer, a
/// half-open path) costs each new connection half a second, not `connect_timeout` one host after
/// the other, and the pool's next connections go to the host that last accepted writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_first_host_is_not_waited_out() {
    use idem_core::ClaimStore;
    let Some(base) = base() else { return };
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let silent_port = silent.local_addr().expect("addr").port();
    // Accepts, and keeps every socket open without a word.
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            sockets.push(socket);
        }
    });
    let dbname = base.get_dbname().unwrap_or("postgres").to_owned();
    let url = url(&base, &[silent_port, port(&base)], &dbname);
    let options =
        PgOptions { pool_size: 4, connect_timeout: std::time::Duration::from_secs(5), ..PgOptions::default() };
    let started = std::time::Instant::now();
    let store = PgStore::connect(&url, &options, TimeSource::Given(Arc::new(SystemClock))).await.expect("connected");
    let ns = idem_conformance::ns("silent");
    // Four at once: the pool makes four connections.
    let claims = (0..4).map(|i| store.claim(&ns, vec![idem_conformance::new_claim(&[&format!("k{i}")], None, None)]));
    for claimed in futures_util::future::join_all(claims).await {
        claimed.expect("a claim through the second host");
    }
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(4),
        "start-up and four connections took {took:?}: hosts waited out one by one"
    );
    held.abort();
}
