//! The runnable Python examples in `examples/` (seeds 001, 002, 003), each run twice in a row
//! against one real server: each checks its own expectations, exits non-zero when one fails, and
//! must pass again; and each says plainly what it needs when it is missing (idem, its config, a
//! package). (Seed 000's survey is a TypeScript bot now, on the TypeScript client; it is run
//! twice by `clients/typescript/test/examples.integration.test.mjs`.)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use idem_core::SystemClock;
use idem_server::config::{ConfigDuration, NamespaceConfig};

use crate::support::TestServer;

fn example(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(path)
}

async fn run_example(script: PathBuf, url: String) -> String {
    tokio::task::spawn_blocking(move || {
        let output =
            std::process::Command::new("python3").arg(&script).env("IDEM_URL", url).output().expect("python3 runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{} failed:\n{stdout}\n{stderr}", script.display());
        stdout
    })
    .await
    .expect("example ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn articles_are_announced_once() {
    let days = |d: u64| Some(ConfigDuration(Duration::from_secs(d * 86_400)));
    let s = TestServer::start_with(
        |c| {
            c.namespaces.insert("notified_articles".into(), NamespaceConfig { default_ttl: days(90) });
            c.namespaces.insert("rejected_articles".into(), NamespaceConfig { default_ttl: days(30) });
            c.limits.max_body_bytes = 4 << 20;
        },
        Arc::new(SystemClock),
    )
    .await;
    for round in 1..=2 {
        let out = run_example(example("articles/articles.py"), s.url.clone()).await;
        assert!(out.contains("announced 540 new articles"), "round {round}: {out}");
        assert!(out.contains("second run: 0 new"), "round {round}: {out}");
    }
    s.stop().await;
}

/// Runs a Python example that must fail for want of something, and returns what it said on
/// stderr: a plain message (no traceback) and a non-zero exit.
async fn run_failing(args: Vec<String>, env: Vec<(&'static str, String)>) -> String {
    tokio::task::spawn_blocking(move || {
        let output = std::process::Command::new("python3")
            .args(&args)
            .envs(env)
            .env_remove("PYTHONPATH")
            .output()
            .expect("python3 runs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!output.status.success(), "{args:?} should have failed:\n{stderr}");
        assert!(!stderr.contains("Traceback"), "{args:?} says what it needs, not a traceback:\n{stderr}");
        stderr
    })
    .await
    .expect("example ran")
}

fn arg(path: &str) -> String {
    example(path).display().to_string()
}

/// Without its config (the namespaces' TTLs), the articles example says so and how to fix it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn articles_without_their_config_say_what_they_need() {
    let s = TestServer::start().await;
    let stderr = run_failing(vec![arg("articles/articles.py")], vec![("IDEM_URL", s.url.clone())]).await;
    assert!(stderr.contains("--config examples/articles/idem.toml"), "{stderr}");
    s.stop().await;
}

/// Each example says plainly what it needs when it is missing: idem not running, idem without the
/// example's config, the `standardwebhooks` package not installed. (The orders client's missing
/// gateway is checked in its own test, where its upstream runs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_say_what_they_need_when_it_is_missing() {
    let nobody = format!("http://127.0.0.1:{}", crate::support::binary::free_port());
    let not_running = "idem is not reachable at";
    let stderr = run_failing(vec![arg("articles/articles.py")], vec![("IDEM_URL", nobody.clone())]).await;
    assert!(stderr.contains(not_running) && stderr.contains("--config examples/articles/idem.toml"), "{stderr}");
    let stderr = run_failing(vec![arg("partner-events/partner.py")], vec![("IDEM_URL", nobody.clone())]).await;
    assert!(stderr.contains(not_running) && stderr.contains("--config examples/partner-events/idem.toml"), "{stderr}");
    let stderr = run_failing(
        vec![arg("orders/client.py")],
        vec![("GATEWAY_URL", nobody.clone()), ("UPSTREAM_URL", nobody.clone())],
    )
    .await;
    assert!(stderr.contains("the orders upstream is not reachable") && stderr.contains("upstream.py"), "{stderr}");

    // idem runs, but without the partner example's source.
    let s = TestServer::start().await;
    let stderr = run_failing(
        vec![arg("partner-events/partner.py")],
        vec![("IDEM_URL", s.url.clone()), ("HANDLER_URL", nobody.clone())],
    )
    .await;
    assert!(
        stderr.contains("no source named 'partner'") && stderr.contains("examples/partner-events/idem.toml"),
        "{stderr}"
    );
    s.stop().await;

    // The handler without `standardwebhooks`: `python3 -S` leaves out site-packages, where pip puts it.
    let stderr =
        run_failing(vec!["-S".into(), arg("partner-events/handler.py"), "0".into(), "whsec_x".into()], vec![]).await;
    assert!(stderr.contains("pip install standardwebhooks"), "{stderr}");
}

/// Seed 001: the orders upstream behind the gateway, and a client that times out and retries with
/// the same key: the upstream ends with one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_are_created_once_however_often_the_client_retries() {
    let port = crate::support::binary::free_port();
    let mut upstream = std::process::Command::new("python3")
        .arg(example("orders/upstream.py"))
        .arg(port.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut ready = String::new();
    let stdout = upstream.stdout.take().expect("piped");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready).expect("upstream starts");
    assert!(ready.contains("orders upstream"), "{ready}");
    let upstream_url = format!("http://127.0.0.1:{port}");
    let gateway = idem_server::config::GatewayConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        upstream: idem_server::config::Upstream::parse(&upstream_url).expect("upstream URL"),
        max_stored_response: 1 << 20,
        cache_bytes: 1 << 20,
        max_background_calls: 1000,
        max_unstored_bytes: 1 << 20,
        routes: vec![idem_server::config::Route(idem_gateway::RoutePolicy {
            methods: vec![http::Method::POST],
            key: idem_core::gateway::KeyPolicy::Required,
            ..idem_gateway::RoutePolicy::new(idem_core::gateway::PathPattern::parse("/orders").expect("valid"))
        })],
        tls: None,
    };
    let client = example("orders/client.py");
    // Without idem's gateway the client says how to start it.
    let nobody = format!("http://127.0.0.1:{}", crate::support::binary::free_port());
    let stderr = run_failing(
        vec![client.display().to_string()],
        vec![("GATEWAY_URL", nobody), ("UPSTREAM_URL", upstream_url.clone())],
    )
    .await;
    assert!(
        stderr.contains("gateway is not reachable") && stderr.contains("--config examples/orders/idem.toml"),
        "{stderr}"
    );
    let s = TestServer::start_with(|c| c.gateway = Some(gateway), Arc::new(SystemClock)).await;
    let gateway_url = s.gateway_url.clone().expect("gateway url");
    for round in 1..=2 {
        let (client, gateway_url, upstream_url) = (client.clone(), gateway_url.clone(), upstream_url.clone());
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("python3")
                .arg(client)
                .env("GATEWAY_URL", gateway_url)
                .env("UPSTREAM_URL", upstream_url)
                .output()
                .expect("python3 runs")
        })
        .await
        .expect("client ran");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "round {round}: client failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("the upstream holds 1 new order(s)"), "round {round}: {stdout}");
        assert!(
            stdout.contains("timed out") || stdout.contains("409"),
            "round {round}: the client did have to retry: {stdout}"
        );
    }
    let _ = upstream.kill();
    let _ = upstream.wait();
    s.stop().await;
}

/// Seed 003: a partner sending events with resends and reused ids, a handler that verifies every
/// delivery with the `standardwebhooks` package (independent of idem), fails now and then, and
/// dedups by `webhook-id`. Every event is handled exactly once from the handler's point of view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partner_events_are_each_handled_once() {
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    ensure_standardwebhooks();
    let port = crate::support::binary::free_port();
    let mut handler = std::process::Command::new("python3")
        .arg(example("partner-events/handler.py"))
        .args([port.to_string(), SECRET.to_owned()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut ready = String::new();
    let stdout = handler.stdout.take().expect("piped");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready).expect("read");
    assert!(
        ready.contains("handler on"),
        "the handler needs `pip install standardwebhooks` (.ci/run installs it): {ready:?}"
    );
    let handler_url = format!("http://127.0.0.1:{port}");
    let source: idem_server::config::SourceConfig = toml::from_str(&format!(
        "name = \"partner\"\nhandler_url = \"{handler_url}/handle\"\nevent_id = \"/external_event_id\"\n\
         max_attempts = 5\nbackoff = [\"100ms\", \"300ms\", \"1s\"]\nsigning_secret = \"{SECRET}\"\n\
         result_webhook_url = \"{handler_url}/results\"\nresult_backoff = [\"50ms\"]\n"
    ))
    .expect("source config");
    let s = TestServer::start_with(|c| c.sources = vec![source], Arc::new(SystemClock)).await;
    for round in 1..=2 {
        let (idem_url, partner, handler_url) =
            (s.url.clone(), example("partner-events/partner.py"), handler_url.clone());
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("python3")
                .arg(partner)
                .env("IDEM_URL", idem_url)
                .env("HANDLER_URL", handler_url)
                .env("EVENTS", "400")
                .output()
                .expect("python3 runs")
        })
        .await
        .expect("partner ran");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "round {round}: partner failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("all 400 events processed once"), "round {round}: {stdout}");
    }
    let _ = handler.kill();
    let _ = handler.wait();
    s.stop().await;
}

/// The handler verifies with the PyPI package `standardwebhooks`; install it if it is missing, so
/// that `cargo test` works on a fresh machine as the README says.
fn ensure_standardwebhooks() {
    let present = |_: ()| {
        std::process::Command::new("python3")
            .args(["-c", "import standardwebhooks"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if present(()) {
        return;
    }
    let installed = std::process::Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "standardwebhooks"])
        .status();
    assert!(present(()), "the Python package standardwebhooks is needed and could not be installed: {installed:?}");
}
