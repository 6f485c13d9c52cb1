//! A node's wall clock stepped while a key runs (an NTP step at boot, a VM resumed, `date -s`):
//! leases are judged on the monotonic clock (the embedded store's steady clock; PostgreSQL's time
//! followed on the monotonic clock), so no step hands a running key to another request. The real
//! binary runs under libfaketime (Debian's `faketime`), its wall clock moved at run time through
//! `FAKETIME_TIMESTAMP_FILE`, its monotonic clock untouched. Before, on two nodes sharing
//! PostgreSQL, a step of 45 s forward let the stepped node take over a key the other was running,
//! and a step back let the other take over the stepped node's: each key ran twice (#40). Skipped,
//! loudly, without libfaketime.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use idem_server::cli::client::{ApiClient, Reply};
use serde_json::json;

use crate::support::binary::{Idem, free_port};
use crate::support::pg::TestSchema;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// An upstream that takes 4 s to answer `201`, counting its calls.
async fn slow_upstream(calls: Arc<AtomicUsize>) -> String {
    let app = axum::Router::new().fallback(axum::routing::post(move || {
        let calls = Arc::clone(&calls);
        async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(Duration::from_secs(4)).await;
            (http::StatusCode::CREATED, axum::Json(json!({"order": n})))
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The wall clock of the processes started with [`stepped_env`], moved by `seconds` from the real
/// one (the file is replaced whole, so that no read sees half of it).
fn step_to(file: &Path, seconds: i64) {
    let spec = if seconds >= 0 { format!("+{seconds}\n") } else { format!("{seconds}\n") };
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, spec).expect("write the faketime spec");
    std::fs::rename(&tmp, file).expect("replace the faketime spec");
}

/// The environment of a process whose wall clock follows `file` and whose monotonic clock is real.
fn stepped_env(file: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("LD_PRELOAD", LIBFAKETIME.to_owned()),
        ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
    ]
}

fn faketime_here() -> bool {
    if Path::new(LIBFAKETIME).exists() {
        return true;
    }
    idem_conformance::skipped("libfaketime is not installed (Debian: faketime): the clock-step tests did not run");
    false
}

/// A config with a gateway on `listen` in front of `upstream`: a 6 s lease, the client's wait 5 s.
fn config(dir: &Path, name: &str, listen: &str, upstream: &str, store: &str) -> PathBuf {
    let text = format!(
        "{store}[gateway]\nlisten = \"{listen}\"\nupstream = \"{upstream}\"\n\n[[gateway.routes]]\npath = \"/orders\"\n\
         key = \"required\"\nlease = \"6s\"\nupstream_timeout = \"5s\"\nscope = [\"header:authorization\"]\n"
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("write config");
    path
}

fn serve(dir: &Path, name: &str, config: &Path, env: &[(&'static str, String)]) -> Idem {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Idem::serve_with(&dir.join(name), &["--config", config.to_str().expect("utf-8")], &env, None)
}

async fn order(gateway: &ApiClient, key: &str) -> Reply {
    let headers = [("idempotency-key", key), ("content-type", "application/json"), ("authorization", "Bearer alice")];
    gateway.send_with(Method::POST, "/orders", Some(Bytes::from_static(b"{}")), &headers).await.expect("an answer")
}

/// `holder` runs the key; 1 s in, `stepped`'s wall clock moves by `step`; a retry through
/// `retrier` must find the key held (`409`), and the upstream runs it once.
async fn a_step_hands_nothing_over(
    holder: &ApiClient,
    retrier: &ApiClient,
    clock: &Path,
    step: i64,
    key: &str,
    calls: &AtomicUsize,
) {
    let before = calls.load(Ordering::SeqCst);
    let first = {
        let (holder, key) = (holder.clone(), key.to_owned());
        tokio::spawn(async move { order(&holder, &key).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    step_to(clock, step);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let retry = order(retrier, key).await;
    assert_eq!(retry.status.as_u16(), 409, "a step of {step} s handed over a running key: {retry:?}");
    let first = first.await.expect("task");
    assert_eq!(first.status.as_u16(), 201, "{}", String::from_utf8_lossy(&first.body));
    assert_eq!(calls.load(Ordering::SeqCst) - before, 1, "the upstream ran {key} once");
}

/// One node on the embedded store: stepped 45 s forward while it runs a key, a retry of the key
/// is still in flight (`409`), not a new execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_step_on_the_embedded_store_hands_no_key_over() {
    if !faketime_here() {
        return;
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let upstream = slow_upstream(Arc::clone(&calls)).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = dir.path().join("faketime.rc");
    step_to(&clock, 0);
    let listen = format!("127.0.0.1:{}", free_port());
    let config = config(dir.path(), "node", &listen, &upstream, "");
    let _node = serve(dir.path(), "data", &config, &stepped_env(&clock));
    let gateway = ApiClient::new(&format!("http://{listen}"), None).expect("client");
    a_step_hands_nothing_over(&gateway, &gateway, &clock, 45, "forward", &calls).await;
}

/// Two nodes sharing PostgreSQL, one of them stepped: 45 s forward while the other runs a key (the
/// stepped node must not take it over), then 45 s back while the stepped node runs one (the other
/// must not take it over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_step_on_one_of_two_nodes_hands_no_key_over() {
    if !faketime_here() {
        return;
    }
    let Some(schema) = TestSchema::create("clock_steps").await else { return };
    let calls = Arc::new(AtomicUsize::new(0));
    let upstream = slow_upstream(Arc::clone(&calls)).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = dir.path().join("faketime.rc");
    step_to(&clock, 0);
    let store = format!("[store]\ntype = \"postgres\"\nurl = \"{}\"\npool_size = 4\n\n", schema.url);
    let (steady_listen, stepped_listen) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let steady_config = config(dir.path(), "steady", &steady_listen, &upstream, &store);
    let stepped_config = config(dir.path(), "stepped", &stepped_listen, &upstream, &store);
    let _steady = serve(dir.path(), "steady-data", &steady_config, &[]);
    let _stepped = serve(dir.path(), "stepped-data", &stepped_config, &stepped_env(&clock));
    let steady = ApiClient::new(&format!("http://{steady_listen}"), None).expect("client");
    let stepped = ApiClient::new(&format!("http://{stepped_listen}"), None).expect("client");
    a_step_hands_nothing_over(&steady, &stepped, &clock, 45, "forward", &calls).await;
    a_step_hands_nothing_over(&stepped, &steady, &clock, -45, "back", &calls).await;
}
