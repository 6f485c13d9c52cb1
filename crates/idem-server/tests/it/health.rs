//! Health: liveness, readiness (including a store that cannot be written), metrics, OpenAPI.

use http::Method;
use serde_json::json;

use crate::support::{TestServer, assert_problem};

#[tokio::test]
async fn health_and_readiness() {
    let s = TestServer::start().await;
    assert_eq!(s.expect(Method::GET, "/healthz", None, 200).await["status"], "ok");
    assert_eq!(s.expect(Method::GET, "/readyz", None, 200).await["status"], "ready");
    s.stop().await;
}

/// Another process holds the events' SQLite file's write lock: event intake answers 503
/// problem+json, /readyz fails, claims (in the log) and reads go on, nothing already stored is
/// harmed, and intake resumes by itself once the lock goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_written_is_503_and_recovers() {
    let receiver = crate::support::receiver::Receiver::start(std::time::Duration::ZERO).await;
    let handler = receiver.url.clone();
    let s = TestServer::start_with(
        move |c| {
            c.sources = vec![
                toml::from_str(&format!(
                    "name = \"locked\"\nhandler_url = \"{handler}\"\nevent_id = \"/id\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n"
                ))
                .expect("source"),
            ];
        },
        std::sync::Arc::new(idem_core::SystemClock),
    )
    .await;
    s.post("/v1/sources/locked/events", json!({"id": "before"}), 202).await;

    let db = s.dir.path().join(idem_sqlite::SqliteStore::FILE_NAME);
    let intruder = hold_write_lock(&db);
    let reply = s
        .client
        .send(Method::POST, "/v1/sources/locked/events", Some(&json!({"id": "during"})))
        .await
        .expect("request");
    let problem = assert_problem(&reply, 503, "intake while the file is locked");
    assert!(reply.headers.get("retry-after").is_some(), "503 says when to retry");
    assert!(!problem["detail"].as_str().unwrap_or("").contains("lock"), "no internal error text: {problem}");
    let ready = s.client.send(Method::GET, "/readyz", None).await.expect("request");
    assert_problem(&ready, 503, "readyz while the file is locked");
    s.post("/v1/claims/ns", json!({"key": "claims go on"}), 201).await;
    let listed = s.expect(Method::GET, "/v1/receipts?source=locked", None, 200).await;
    assert_eq!(listed["receipts"].as_array().map(Vec::len), Some(1), "reads keep working: {listed}");

    drop(intruder);
    s.expect(Method::GET, "/readyz", None, 200).await;
    s.post("/v1/sources/locked/events", json!({"id": "during"}), 202).await;
    s.stop().await;
}

/// Holds an exclusive write transaction on the database file from a separate connection, the way
/// another program would, until dropped.
fn hold_write_lock(db: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).expect("open the same file");
    conn.execute_batch("BEGIN EXCLUSIVE").expect("take the write lock");
    conn
}

#[tokio::test]
async fn metrics_name_namespaces_outcomes_errors_and_batches() {
    let s = TestServer::start().await;
    s.post("/v1/claims/metrics_ns", json!({"key": "a"}), 201).await;
    s.post("/v1/claims/metrics_ns", json!({"key": "a"}), 200).await;
    s.post("/v1/claims/metrics_ns/lookup", json!({"prefix": ["a"]}), 200).await;
    let _ = s.client.send(Method::POST, "/v1/claims/metrics_ns", Some(&json!({"key": ""}))).await;
    let reply = s.client.send(Method::GET, "/metrics", None).await.expect("request");
    let text = String::from_utf8_lossy(&reply.body);
    for needle in [
        r#"idem_claims_total{namespace="metrics_ns",outcome="claimed"}"#,
        r#"idem_claims_total{namespace="metrics_ns",outcome="existing"}"#,
        r#"idem_lookups_total{namespace="metrics_ns",kind="prefix"}"#,
        r#"idem_errors_total{kind="invalid-request"}"#,
        "idem_http_request_duration_seconds_bucket",
        "idem_store_commit_batch_items_bucket",
        "idem_store_commit_seconds_bucket",
    ] {
        assert!(text.contains(needle), "metrics lack {needle}:\n{text}");
    }
    s.stop().await;
}

/// On the embedded store the live claims per namespace are read at each scrape (no table scan):
/// there from start-up for configured namespaces, exact right after claims and deletes.
#[tokio::test]
async fn live_claim_counts_are_exact_at_every_scrape() {
    let s = TestServer::start_with(
        |c| {
            c.namespaces.insert("counted_zero".into(), idem_server::config::NamespaceConfig::default());
        },
        std::sync::Arc::new(idem_core::SystemClock),
    )
    .await;
    let scrape = || async {
        let reply = s.client.send(Method::GET, "/metrics", None).await.expect("metrics");
        String::from_utf8_lossy(&reply.body).into_owned()
    };
    assert!(scrape().await.lines().any(|l| l == r#"idem_claims_stored{namespace="counted_zero"} 0"#));
    s.post("/v1/claims/counted/batch", json!({"items": [{"key": "a"}, {"key": "b"}, {"key": "c"}]}), 200).await;
    let line = r#"idem_claims_stored{namespace="counted"}"#;
    assert!(scrape().await.lines().any(|l| l == format!("{line} 3")), "three claims counted");
    let id = idem_core::Parts::new(vec!["a".into()]).expect("parts").id().to_string();
    s.expect(Method::DELETE, &format!("/v1/claims/counted/{id}"), None, 204).await;
    assert!(scrape().await.lines().any(|l| l == format!("{line} 2")), "a delete counts at once");
    s.stop().await;
}

#[tokio::test]
async fn openapi_describes_the_whole_v1_api() {
    let s = TestServer::start().await;
    let doc = s.expect(Method::GET, "/openapi.json", None, 200).await;
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
    let paths = doc["paths"].as_object().expect("paths");
    for (path, method) in [
        ("/v1/claims/{ns}", "post"),
        ("/v1/claims/{ns}/batch", "post"),
        ("/v1/claims/{ns}/lookup", "post"),
        ("/v1/claims/{ns}/prefix", "post"),
        ("/v1/claims/{ns}/{id}", "get"),
        ("/v1/claims/{ns}/{id}", "delete"),
    ] {
        assert!(paths.get(path).and_then(|p| p.get(method)).is_some(), "openapi lacks {method} {path}");
    }
    s.stop().await;
}

/// Every family on /metrics says what it is (`# HELP`); counters of configured namespaces, sources
/// and routes are there at zero before anything happened, so alerts and `rate()` work from the
/// start; `idem_build_info` names the version.
#[tokio::test]
async fn metrics_describe_themselves_and_start_at_zero() {
    let receiver = crate::support::receiver::Receiver::start(std::time::Duration::ZERO).await;
    let handler = receiver.url.clone();
    let s = TestServer::start_with(
        move |c| {
            c.namespaces.insert("zero_ns".into(), idem_server::config::NamespaceConfig::default());
            c.sources = vec![
                toml::from_str(&format!(
                    "name = \"zero-src\"\nhandler_url = \"{handler}\"\nevent_id = \"/id\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n"
                ))
                .expect("source"),
            ];
        },
        std::sync::Arc::new(idem_core::SystemClock),
    )
    .await;
    let reply = s.client.send(Method::GET, "/metrics", None).await.expect("metrics");
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    for line in [
        r#"idem_claims_total{namespace="zero_ns",outcome="claimed"} 0"#,
        r#"idem_operations_total{namespace="zero_ns",outcome="started"} 0"#,
        r#"idem_events_intake_total{source="zero-src",outcome="accepted"} 0"#,
        r#"idem_deliveries_total{source="zero-src",outcome="dead"} 0"#,
        r#"idem_receipts{source="zero-src",status="dead"} 0"#,
        &format!(r#"idem_build_info{{version="{}"}} 1"#, env!("CARGO_PKG_VERSION")),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    let families: Vec<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split(' ').next()).collect();
    assert!(families.len() > 10, "{families:?}");
    for family in families {
        assert!(text.contains(&format!("# HELP {family} ")), "{family} has no # HELP");
    }
    s.stop().await;
}
