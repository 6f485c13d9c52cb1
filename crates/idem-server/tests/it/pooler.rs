//! idem through PgBouncer in transaction mode (Debian's `pgbouncer`, a process of the test's own
//! in front of the test's schema). Two `idem serve` nodes with `[store] pooler = "transaction"`,
//! one with `direct_url` (it hears notifications) and one without (it looks again), answer a mixed
//! run (claims single and batched, gateway first executions and replays, operations begun,
//! completed and begun again) with no 5xx. A node without the setting answers the one clear
//! error: `503` naming the setting, `/readyz` too, logged once, never a `500`. Skipped, loudly,
//! without IDEM_TEST_DATABASE_URL or pgbouncer. IDEM_PGBOUNCER_REQUESTS sets the size of the run
//! (2,000 here; 10,000 by hand, docs/storage.md).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::Method;
use idem_conformance::pgbouncer::{PgBouncer, Target};
use idem_server::cli::client::{ApiClient, Reply};
use serde_json::{Value, json};

use crate::support::binary::{Idem, free_port};
use crate::support::pg::TestSchema;
use crate::support::upstream::Upstream;

/// The token every gateway request carries (the routes are scoped by `Authorization`).
const CALLER: &str = "pooler-test-caller";

/// Requests sent at once.
const CONCURRENCY: usize = 32;

/// A PgBouncer in transaction mode in front of `schema`.
fn bouncer(schema: &TestSchema) -> Option<PgBouncer> {
    let config: tokio_postgres::Config = schema.url.parse().expect("a PostgreSQL URL");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let target = Target {
        host,
        port: schema.port(),
        user: config.get_user().unwrap_or("postgres").to_owned(),
        password: config.get_password().map(|p| String::from_utf8_lossy(p).into_owned()),
        dbname: config.get_dbname().unwrap_or("postgres").to_owned(),
        schema: Some(schema.name().to_owned()),
    };
    PgBouncer::start(&target, "transaction", &[], "idem through PgBouncer")
}

/// A node through `bouncer` with `store` lines added to its `[store]`, and its gateway's client.
fn node(dir: &std::path::Path, i: usize, bouncer: &PgBouncer, store: &str, upstream: &str) -> (Idem, ApiClient) {
    let gateway_port = free_port();
    let config = dir.join(format!("node{i}.toml"));
    let text = format!(
        "[store]\ntype = \"postgres\"\nurl = \"{}\"\npool_size = 8\n{store}\n\n\
         [gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\nupstream = \"{upstream}\"\n\n\
         [[gateway.routes]]\npath = \"/orders\"\nkey = \"required\"\nin_flight = \"wait\"\n",
        bouncer.url()
    );
    std::fs::write(&config, text).expect("write config");
    let idem = Idem::serve(&dir.join(format!("data{i}")), &["--config", config.to_str().expect("utf-8")]);
    let gateway = ApiClient::new(&format!("http://127.0.0.1:{gateway_port}"), Some(CALLER.into())).expect("client");
    (idem, gateway)
}

/// What a run's requests were answered, by kind of request and status.
type Tally = BTreeMap<(&'static str, u16), usize>;

/// Request `i` of the mixed run, on `api` and `gateway`: what kind it was and its answers (an
/// operation is begun, completed and begun again: three answers).
async fn one(i: usize, api: &ApiClient, gateway: &ApiClient) -> Vec<(&'static str, u16)> {
    let status = |reply: &Reply| reply.status.as_u16();
    let post =
        |path: String, body: Value| async move { api.send(Method::POST, &path, Some(&body)).await.expect("send") };
    match i % 6 {
        0 => vec![("claim (new)", status(&post("/v1/claims/mixed".into(), json!({"key": format!("new-{i}")})).await))],
        1 => {
            let body = json!({"key": format!("shared-{}", i % 40)});
            vec![("claim (often a duplicate)", status(&post("/v1/claims/mixed".into(), body).await))]
        }
        2 => {
            let items: Vec<Value> = (0..10).map(|j| json!({"key": format!("batch-{i}-{j}")})).collect();
            vec![("claim batch of 10", status(&post("/v1/claims/mixed/batch".into(), json!({"items": items})).await))]
        }
        3 | 4 => {
            // Keys used twice: the second is a replay (or waits for the first, then replays).
            let key = format!("order-{}", i / 6);
            let headers = [("content-type", "application/json"), ("idempotency-key", key.as_str())];
            let reply = gateway.send_with(Method::POST, "/orders", Some(Bytes::from_static(b"{}")), &headers).await;
            let reply = reply.expect("gateway");
            let replayed = reply.headers.contains_key(idem_gateway::engine::IDEMPOTENT_REPLAYED);
            vec![(if replayed { "gateway replay" } else { "gateway first execution" }, status(&reply))]
        }
        _ => operation(i, api).await,
    }
}

/// An operation begun, completed, and begun again (its completed result answered).
async fn operation(i: usize, api: &ApiClient) -> Vec<(&'static str, u16)> {
    let begin = json!({"key": format!("op-{i}"), "request": {"n": i}});
    let begun = api.send(Method::POST, "/v1/operations/mixed/begin", Some(&begin)).await.expect("begin");
    let mut answers = vec![("operation begin", begun.status.as_u16())];
    if begun.status.as_u16() != 201 {
        return answers;
    }
    let started: Value = serde_json::from_slice(&begun.body).expect("JSON");
    let path = format!("/v1/operations/mixed/{}/complete", started["id"].as_str().expect("id"));
    let done = json!({"token": started["token"], "result": {"ok": i}});
    let completed = api.send(Method::POST, &path, Some(&done)).await.expect("complete");
    answers.push(("operation complete", completed.status.as_u16()));
    let again = api.send(Method::POST, "/v1/operations/mixed/begin", Some(&begin)).await.expect("begin again");
    answers.push(("operation begin (completed)", again.status.as_u16()));
    answers
}

/// `requests` of the mixed run, `CONCURRENCY` at a time, spread over `nodes` (API, gateway).
async fn mixed_run(nodes: &[(ApiClient, ApiClient)], requests: usize) -> Tally {
    let next = Arc::new(AtomicUsize::new(0));
    let nodes = Arc::new(nodes.to_vec());
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (next, nodes) = (Arc::clone(&next), Arc::clone(&nodes));
            tokio::spawn(async move {
                let mut tally = Tally::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= requests {
                        return tally;
                    }
                    let (api, gateway) = &nodes[i % nodes.len()];
                    for answer in one(i, api, gateway).await {
                        *tally.entry(answer).or_default() += 1;
                    }
                }
            })
        })
        .collect();
    let mut tally = Tally::new();
    for worker in workers {
        for (answer, n) in worker.await.expect("worker") {
            *tally.entry(answer).or_default() += n;
        }
    }
    tally
}

fn requests() -> usize {
    std::env::var("IDEM_PGBOUNCER_REQUESTS").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_runs_through_pgbouncer_in_transaction_mode() {
    let Some(schema) = TestSchema::create("pooler").await else { return };
    let Some(bouncer) = bouncer(&schema) else { return };
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let direct = format!("pooler = \"transaction\"\ndirect_url = \"{}\"", schema.url);
    let nodes = [
        node(dir.path(), 0, &bouncer, &direct, &upstream.url),
        node(dir.path(), 1, &bouncer, "pooler = \"transaction\"", &upstream.url),
    ];
    let polling = |idem: &Idem| idem.started.iter().any(|line| line.contains("no notifications are heard"));
    assert!(!polling(&nodes[0].0) && polling(&nodes[1].0), "the node without direct_url says it looks again");
    let clients: Vec<(ApiClient, ApiClient)> = nodes
        .iter()
        .map(|(idem, gateway)| (ApiClient::new(&idem.url, None).expect("client"), gateway.clone()))
        .collect();
    for (api, _) in &clients {
        let ready = api.send(Method::GET, "/readyz", None).await.expect("readyz");
        assert_eq!(ready.status, 200, "{}", String::from_utf8_lossy(&ready.body));
    }

    let requests = requests();
    let started = Instant::now();
    let tally = mixed_run(&clients, requests).await;
    let elapsed = started.elapsed();
    let answers: usize = tally.values().sum();
    let table: Vec<String> = tally.iter().map(|((kind, status), n)| format!("  {kind}: {status} × {n}")).collect();
    eprintln!(
        "{requests} requests ({answers} answers) through PgBouncer in transaction mode in {elapsed:.1?}:\n{}",
        table.join("\n")
    );
    let failed: Vec<&String> = table.iter().filter(|line| line.contains(": 5")).collect();
    assert!(failed.is_empty(), "no 5xx through a transaction pooler with pooler = \"transaction\": {failed:?}");
    let expected = [200, 201];
    assert!(tally.keys().all(|(_, status)| expected.contains(status)), "only 200 and 201 in a run with no fault");
    // Every gateway key ran upstream once: its first execution; the second use replayed it.
    assert_eq!(upstream.count("/orders"), tally.get(&("gateway first execution", 201)).copied().unwrap_or(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_without_the_setting_is_a_clear_503_never_a_500() {
    let Some(schema) = TestSchema::create("pooler_unset").await else { return };
    let Some(bouncer) = bouncer(&schema) else { return };
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (idem, gateway) = node(dir.path(), 0, &bouncer, "", &upstream.url);
    let api = ApiClient::new(&idem.url, None).expect("client");

    let ready = api.send(Method::GET, "/readyz", None).await.expect("readyz");
    assert_clear(&ready, "/readyz");
    for i in 0..50 {
        let claim = api.send(Method::POST, "/v1/claims/unset", Some(&json!({"key": format!("k{i}")}))).await;
        assert_clear(&claim.expect("claim"), "a claim");
    }
    let begin = json!({"key": "op"});
    assert_clear(&api.send(Method::POST, "/v1/operations/unset/begin", Some(&begin)).await.expect("begin"), "a begin");
    let headers = [("content-type", "application/json"), ("idempotency-key", "k")];
    let keyed = gateway.send_with(Method::POST, "/orders", Some(Bytes::from_static(b"{}")), &headers).await;
    assert_clear(&keyed.expect("gateway"), "a gateway request");
    assert_eq!(upstream.count("/orders"), 0, "nothing was forwarded");

    let told: Vec<String> =
        idem.started.iter().cloned().chain(idem.log.try_iter()).filter(|line| line.contains("pooler")).collect();
    assert_eq!(told.len(), 1, "logged once: {told:#?}");
}

/// `503` problem+json whose detail names the pooler and the setting.
fn assert_clear(reply: &Reply, what: &str) {
    let body = String::from_utf8_lossy(&reply.body);
    assert_eq!(reply.status, 503, "{what}: {body}");
    assert!(reply.headers.contains_key("retry-after"), "{what}: Retry-After");
    let problem: Value = serde_json::from_slice(&reply.body).expect("problem+json");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("PgBouncer in transaction mode"), "{what}: names the pooler: {detail}");
    assert!(detail.contains("[store] pooler = \"transaction\""), "{what}: names the setting: {detail}");
}
