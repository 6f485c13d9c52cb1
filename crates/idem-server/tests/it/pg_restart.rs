//! PostgreSQL restarts under load: while it is down, requests answer 503 problem+json and
//! `/readyz` fails; once it is back, idem recovers by itself, and every claim it acknowledged is
//! there; and idem started before its database answers health checks until the database comes,
//! then serves without a restart. The tests run a private PostgreSQL (initdb in a temporary directory, on a free port) so
//! that stopping it disturbs nothing else; it is skipped, loudly, where PostgreSQL's server
//! binaries are not installed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Method;
use idem_server::cli::client::ApiClient;
use serde_json::json;

use crate::support::binary::{Idem, free_port};

struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl PrivatePostgres {
    fn start() -> Option<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .find(|b| b.join("initdb").exists())?;
        let dir = tempfile::tempdir().ok()?;
        let data = dir.path().join("data");
        // PostgreSQL refuses to run as root: the cluster belongs to the `postgres` user.
        let chown = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()).status().ok()?;
        let initdb = as_postgres(&bin.join("initdb"), &["-D", path(&data), "-A", "trust", "-U", "postgres"])?;
        if !chown.success() || !initdb {
            return None;
        }
        let pg = Self { bin, dir, port: free_port() };
        pg.ctl("start").then_some(pg)
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn ctl(&self, action: &str) -> bool {
        let data = self.dir.path().join("data");
        let log = self.dir.path().join("log");
        let options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, path(self.dir.path()));
        let args: Vec<&str> = match action {
            "start" => vec!["start", "-w", "-D", path(&data), "-l", path(&log), "-o", &options],
            _ => vec!["stop", "-w", "-m", "fast", "-D", path(&data)],
        };
        as_postgres(&self.bin.join("pg_ctl"), &args).unwrap_or(false)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        self.ctl("stop");
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn as_postgres(program: &Path, args: &[&str]) -> Option<bool> {
    let status = Command::new("runuser").args(["-u", "postgres", "--"]).arg(program).args(args).output().ok()?;
    Some(status.status.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_under_load_is_503_then_recovers_losing_nothing() {
    let Some(pg) = PrivatePostgres::start() else {
        idem_conformance::skipped(
            "no PostgreSQL server binaries (or runuser): the restart-under-load test did not run",
        );
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let idem = Idem::serve(dir.path(), &["--store", "postgres", "--database-url", &pg.url()]);
    let client = ApiClient::new(&idem.url, None).expect("client");
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let unavailable = Arc::new(Mutex::new(0usize));
    let stop_at = Instant::now() + Duration::from_secs(6);
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (client, acknowledged, unavailable) =
                (client.clone(), Arc::clone(&acknowledged), Arc::clone(&unavailable));
            tokio::spawn(async move {
                for n in 0.. {
                    if Instant::now() > stop_at {
                        return;
                    }
                    let key = format!("w{w}-{n}");
                    let reply = client
                        .send(Method::POST, "/v1/claims/restart", Some(&json!({ "key": key })))
                        .await
                        .expect("idem answers");
                    match reply.status.as_u16() {
                        201 => acknowledged.lock().expect("lock").push(key),
                        503 => {
                            assert_eq!(
                                reply.headers.get("content-type").map(|v| v.as_bytes()),
                                Some(&b"application/problem+json"[..])
                            );
                            *unavailable.lock().expect("lock") += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        other => panic!("unexpected status {other}: {}", String::from_utf8_lossy(&reply.body)),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(pg.ctl("stop"), "PostgreSQL stopped");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ready = client.send(Method::GET, "/readyz", None).await.expect("readyz");
    assert_eq!(ready.status, 503, "not ready while the database is down");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(pg.ctl("start"), "PostgreSQL started again");
    for writer in writers {
        writer.await.expect("writer");
    }
    assert!(*unavailable.lock().expect("lock") > 0, "the outage was seen as 503s");
    let ready = client.send(Method::GET, "/readyz", None).await.expect("readyz");
    assert_eq!(ready.status, 200, "ready again without a restart of idem");
    let after = client.send(Method::POST, "/v1/claims/restart", Some(&json!({"key": "after"}))).await.expect("claim");
    assert_eq!(after.status, 201, "claims work again");
    let keys = acknowledged.lock().expect("lock").clone();
    assert!(keys.len() > 100, "the load ran: {}", keys.len());
    for chunk in keys.chunks(5_000) {
        let items: Vec<_> = chunk.iter().map(|k| json!({ "key": k })).collect();
        let found = client
            .send(Method::POST, "/v1/claims/restart/lookup", Some(&json!({ "items": items })))
            .await
            .expect("lookup")
            .json();
        let missing = found["results"].as_array().expect("results").iter().filter(|r| r["exists"] != true).count();
        assert_eq!(missing, 0, "acknowledged claims lost across the restart");
    }
}

/// idem started while its database is down does not exit (a crash loop, under Kubernetes): it
/// answers `/healthz` 200 and `/readyz` and the API 503 with `Retry-After`, says so once, and
/// serves within seconds of the database starting, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_started_before_postgres_waits_for_it() {
    let Some(pg) = PrivatePostgres::start() else {
        idem_conformance::skipped(
            "no PostgreSQL server binaries (or runuser): the start-before-the-database test did not run",
        );
        return;
    };
    assert!(pg.ctl("stop"), "PostgreSQL stopped before idem starts");
    let dir = tempfile::tempdir().expect("temp dir");
    let args = ["--store", "postgres", "--database-url", &pg.url()];
    let idem = Idem::serve_until_logged(dir.path(), &args, &[], None, "the store cannot be reached yet");
    let client = ApiClient::new(&idem.url, None).expect("client");
    let health = client.send(Method::GET, "/healthz", None).await.expect("healthz");
    assert_eq!(health.status, 200, "the process is up");
    for path in ["/readyz", "/v1/claims/later"] {
        let method = if path == "/readyz" { Method::GET } else { Method::POST };
        let reply = client.send(method, path, Some(&json!({"key": "k"}))).await.expect("an answer");
        assert_eq!(reply.status, 503, "{path} before the database: {}", String::from_utf8_lossy(&reply.body));
        assert!(reply.headers.contains_key("retry-after"), "{path}: 503 without Retry-After");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let up = Instant::now();
    assert!(pg.ctl("start"), "PostgreSQL started");
    idem.wait_for_log("idem listening", Duration::from_secs(15));
    let ready = client.send(Method::GET, "/readyz", None).await.expect("readyz");
    assert_eq!(ready.status, 200, "ready without a restart of idem");
    let took = up.elapsed();
    assert!(took < Duration::from_secs(10), "serving {took:?} after the database started");
    let claimed = client.send(Method::POST, "/v1/claims/later", Some(&json!({"key": "k"}))).await.expect("claim");
    assert_eq!(claimed.status, 201, "{}", String::from_utf8_lossy(&claimed.body));
}
