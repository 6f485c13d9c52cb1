//! The runnable examples in `examples/` (seeds 000 and 002), run against a real server. Each
//! example checks its own expectations and exits non-zero when one fails.

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
async fn survey_first_tap_wins() {
    let s = TestServer::start().await;
    let out = run_example(example("survey/survey.py"), s.url.clone()).await;
    assert!(out.contains("saved answer"), "{out}");
    assert!(out.contains("ignored duplicate tap"), "{out}");
    s.stop().await;
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
    let out = run_example(example("articles/articles.py"), s.url.clone()).await;
    assert!(out.contains("announced 540 new articles"), "{out}");
    assert!(out.contains("second run: 0 new"), "{out}");
    s.stop().await;
}
