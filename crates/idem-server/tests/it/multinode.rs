//! Three `idem serve` processes sharing one PostgreSQL: races spread across the nodes have exactly
//! one winner, identical gateway requests reach the upstream once (also when the upstream is
//! slower than `upstream_timeout` and the lease, and its node is shut down meanwhile), and events
//! survive a node killed mid-delivery. Skipped, loudly, without IDEM_TEST_DATABASE_URL.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use idem_server::cli::client::ApiClient;
use serde_json::json;

use crate::support::binary::{Idem, free_port};
use crate::support::metric;
use crate::support::pg::TestSchema;
use crate::support::receiver::Receiver;
use crate::support::upstream::Upstream;

/// The token every gateway request carries: the routes are scoped by `Authorization`, as by default.
const CALLER: &str = "node-test-caller";

struct Cluster {
    nodes: Vec<Idem>,
    gateways: Vec<ApiClient>,
    _dir: tempfile::TempDir,
    _schema: TestSchema,
}

impl Cluster {
    fn api(&self, i: usize) -> ApiClient {
        ApiClient::new(&self.nodes[i].url, None).expect("client")
    }
}

async fn cluster(upstream: &str, handler: &str) -> Option<Cluster> {
    let schema = TestSchema::create("multinode").await?;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut nodes = Vec::new();
    let mut gateways = Vec::new();
    for i in 0..3 {
        let gateway_port = free_port();
        let config = dir.path().join(format!("node{i}.toml"));
        std::fs::write(
            &config,
            format!(
                "[store]\ntype = \"postgres\"\nurl = \"{}\"\npool_size = 8\n\n\
                 [gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\nupstream = \"{upstream}\"\n\n\
                 [[gateway.routes]]\npath = \"/orders\"\nkey = \"required\"\nin_flight = \"wait\"\n\n\
                 [[sources]]\nname = \"partner\"\nhandler_url = \"{handler}\"\nevent_id = \"/id\"\n\
                 signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nattempt_timeout = \"2s\"\n\
                 backoff = [\"50ms\"]\nmax_attempts = 10\nconcurrency = 4\n\n\
                 [[sources]]\nname = \"flaky\"\nhandler_url = \"{handler}/flaky\"\nevent_id = \"/id\"\n\
                 signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nmax_attempts = 1\nconcurrency = 16\n\
                 attempt_timeout = \"2s\"\n",
                schema.url
            ),
        )
        .expect("write config");
        let data = dir.path().join(format!("data{i}"));
        nodes.push(Idem::serve(&data, &["--config", config.to_str().expect("utf-8")]));
        gateways
            .push(ApiClient::new(&format!("http://127.0.0.1:{gateway_port}"), Some(CALLER.into())).expect("client"));
    }
    Some(Cluster { nodes, gateways, _dir: dir, _schema: schema })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_one_database() {
    let upstream = Upstream::start().await;
    let receiver = Receiver::start(Duration::from_millis(20)).await;
    let Some(mut c) = cluster(&upstream.url, &receiver.url).await else { return };

    // 500 concurrent claims of one key, spread across the three nodes: one winner.
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let client = c.api(i % 3);
            tokio::spawn(async move {
                client
                    .send(Method::POST, "/v1/claims/race", Some(&json!({"key": "one", "data": i})))
                    .await
                    .expect("claim")
                    .status
                    .as_u16()
            })
        })
        .collect();
    let mut created = 0;
    for task in tasks {
        match task.await.expect("task") {
            201 => created += 1,
            200 => {}
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(created, 1, "exactly one of 500 claims across 3 nodes wins");

    // 200 concurrent identical gateway requests across the nodes: one upstream call.
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let gateway = c.gateways[i % 3].clone();
            tokio::spawn(async move {
                let headers =
                    [("content-type", "application/json"), ("idempotency-key", "shared"), ("x-delay-ms", "300")];
                gateway
                    .send_with(Method::POST, "/orders", Some(Bytes::from_static(b"{}")), &headers)
                    .await
                    .expect("request")
            })
        })
        .collect();
    let mut bodies = std::collections::HashSet::new();
    for task in tasks {
        let reply = task.await.expect("task");
        assert_eq!(reply.status, 201, "{}", String::from_utf8_lossy(&reply.body));
        bodies.insert(reply.body);
    }
    assert_eq!(upstream.count("/orders"), 1, "the upstream saw exactly one of 200 requests across 3 nodes");
    assert_eq!(bodies.len(), 1, "all 200 got the same answer");

    // A duplicate waiting on node 1 for node 0's request is woken by NOTIFY as soon as it completes,
    // not by its once-a-second poll.
    let first = {
        let gateway = c.gateways[0].clone();
        tokio::spawn(async move {
            let headers =
                [("content-type", "application/json"), ("idempotency-key", "notified"), ("x-delay-ms", "400")];
            gateway
                .send_with(Method::POST, "/orders", Some(Bytes::from_static(b"{}")), &headers)
                .await
                .expect("request")
        })
    };
    while upstream.count("/orders") < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    let headers = [("content-type", "application/json"), ("idempotency-key", "notified")];
    let waited = c.gateways[1]
        .send_with(Method::POST, "/orders", Some(Bytes::from_static(b"{}")), &headers)
        .await
        .expect("request");
    let elapsed = started.elapsed();
    assert_eq!(waited.status, 201);
    assert_eq!(waited.body, first.await.expect("task").body, "the waiter got the first request's answer");
    assert!(
        elapsed < Duration::from_millis(900),
        "woken by the other node's notification, not a 1 s poll: {elapsed:?}"
    );

    // Events accepted on node 0 are delivered by all three; node 1 is killed mid-delivery.
    let api = c.api(0);
    let mut receipts = Vec::new();
    for n in 0..200 {
        let body = Bytes::from(format!("{{\"id\":\"evt-{n}\"}}"));
        let reply = api
            .send_with(Method::POST, "/v1/sources/partner/events", Some(body), &[("content-type", "application/json")])
            .await
            .expect("intake");
        assert_eq!(reply.status, 202);
        receipts.push(reply.json()["receipt_id"].as_str().expect("id").to_owned());
    }
    while receiver.distinct().len() < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    c.nodes[1].kill9();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let delivered = receiver.distinct();
        let missing = receipts.iter().filter(|r| !delivered.contains(*r)).count();
        if missing == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{missing} events were never delivered by the surviving nodes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The operations API across three nodes on one database: of 500 begins of one key spread over the
/// nodes exactly one starts, and a begin waiting on node 2 is woken by node 0's completion through
/// the database's notification, not by the lease running out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_across_three_nodes() {
    let upstream = Upstream::start().await;
    let receiver = Receiver::start(Duration::ZERO).await;
    let Some(c) = cluster(&upstream.url, &receiver.url).await else { return };
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let client = c.api(i % 3);
            tokio::spawn(async move {
                let client_token = format!("begin-{i:04}-of-the-race");
                let body = json!({"key": "charge-1", "request": {"amount": 5}, "client_token": client_token});
                // As the clients do: a 503 (the store not answering within the node's deadline, as
                // on a machine loaded far past its cores) is asked again with the same client
                // token, so a begin whose outcome was unknown learns that it won.
                for _ in 0..10 {
                    let reply =
                        client.send(Method::POST, "/v1/operations/payments/begin", Some(&body)).await.expect("begin");
                    if reply.status != 503 {
                        return (reply.status.as_u16(), reply.json());
                    }
                    eprintln!("a begin was answered 503, asked again: {}", reply.json());
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                panic!("ten 503s in a row")
            })
        })
        .collect();
    let mut started = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            (201, answer) => started.push(answer),
            (409, _) => {}
            (other, answer) => panic!("unexpected {other}: {answer}"),
        }
    }
    assert_eq!(started.len(), 1, "exactly one of 500 begins across 3 nodes starts");

    let token = started[0]["token"].clone();
    let path = format!("/v1/operations/payments/{}", started[0]["id"].as_str().expect("id"));
    let waiter = {
        let client = c.api(2);
        tokio::spawn(async move {
            let t = Instant::now();
            let body = json!({"key": "charge-1", "request": {"amount": 5}, "wait_seconds": 20});
            let reply = client.send(Method::POST, "/v1/operations/payments/begin", Some(&body)).await.expect("begin");
            (reply.status.as_u16(), reply.json(), t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let body = json!({"token": token, "result": {"ok": true}});
    let done = c.api(0).send(Method::POST, &format!("{path}/complete"), Some(&body)).await.expect("complete");
    assert_eq!(done.status, 200);
    let (status, answer, waited) = waiter.await.expect("waiter");
    assert_eq!((status, &answer["result"]), (200, &json!({"ok": true})), "{answer}");
    assert!(waited < Duration::from_secs(3), "woken by node 0's completion through NOTIFY: {waited:?}");
    let read = c.api(1).send(Method::GET, &path, None).await.expect("get");
    assert_eq!(read.json()["status"], "completed", "every node reads the same record");
}

/// A handler that answers 500 until `healthy` is set, then 200.
async fn flaky_handler() -> (String, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let healthy = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&healthy);
    let app = axum::Router::new().route(
        "/flaky",
        axum::routing::post(move || {
            let ok = flag.load(Ordering::SeqCst);
            async move { if ok { http::StatusCode::OK } else { http::StatusCode::INTERNAL_SERVER_ERROR } }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, healthy)
}

async fn matching(client: &ApiClient, filter: serde_json::Value) -> u64 {
    let reply = client.send(Method::POST, "/v1/receipts/replay", Some(&filter)).await.expect("dry run");
    reply.json()["matching"].as_u64().expect("matching")
}

/// Six bulk replays of the same 300 dead letters at once, two on each of three nodes: every dead
/// letter is replayed exactly once in all (each step reads the status again under the row's lock),
/// and a repeat afterwards finds nothing. The handler is healthy by then, so a replayed receipt
/// completes and cannot turn dead again during the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_replays_racing_on_three_nodes_replay_each_dead_letter_once() {
    let (handler, healthy) = flaky_handler().await;
    let Some(c) = cluster("http://127.0.0.1:9", &handler).await else { return };
    for i in 0..300 {
        let reply = c
            .api(i % 3)
            .send_with(
                Method::POST,
                "/v1/sources/flaky/events",
                Some(Bytes::from(format!("{{\"id\":\"dl-{i}\"}}"))),
                &[("content-type", "application/json")],
            )
            .await
            .expect("intake");
        assert_eq!(reply.status, 202);
    }
    let dead = json!({"source": "flaky", "dry_run": true});
    let deadline = Instant::now() + Duration::from_secs(60);
    while matching(&c.api(0), dead.clone()).await < 300 {
        assert!(Instant::now() < deadline, "the 300 events never all went dead");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    healthy.store(true, std::sync::atomic::Ordering::SeqCst);
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let client = c.api(i % 3);
            tokio::spawn(async move {
                let reply = client
                    .send(Method::POST, "/v1/receipts/replay", Some(&json!({"source": "flaky"})))
                    .await
                    .expect("bulk replay");
                assert_eq!(reply.status, 202, "{}", String::from_utf8_lossy(&reply.body));
                reply.json()["queued"].as_u64().expect("queued")
            })
        })
        .collect();
    let mut queued = 0;
    for task in tasks {
        queued += task.await.expect("task");
    }
    assert_eq!(queued, 300, "each dead letter replayed by exactly one of six racing replays");
    let done = json!({"source": "flaky", "status": "completed", "dry_run": true});
    let deadline = Instant::now() + Duration::from_secs(60);
    while matching(&c.api(1), done.clone()).await < 300 {
        assert!(Instant::now() < deadline, "the replayed receipts never all completed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(matching(&c.api(2), dead).await, 0, "a repeat finds nothing");
    let page = c.api(0).send(Method::GET, "/v1/receipts?source=flaky&limit=1000", None).await.expect("list").json();
    let rounds: Vec<u64> =
        page["receipts"].as_array().expect("receipts").iter().filter_map(|r| r["round"].as_u64()).collect();
    assert_eq!((rounds.len(), rounds.iter().all(|&r| r == 2)), (300, true), "replayed once each: round 2");
    // Replays and the leases of the deliveries they queue lock receipts in one order: no
    // transaction waited for the database to end a deadlock (a second each, which under load added
    // up past call_timeout and answered a replay 503).
    for i in 0..3 {
        let deadlocks = metric(&c.api(i), "idem_store_retried_transactions_total{reason=\"deadlock\"}").await;
        assert_eq!(deadlocks, 0.0, "node {i} ran a transaction again after a deadlock");
    }
}

/// `n` nodes on one database in front of `upstream`, with one gateway route (`route` is its TOML
/// body after `path = "/orders"`): (nodes, their gateways).
async fn gateway_nodes(
    test: &str,
    n: usize,
    upstream: &str,
    route: &str,
) -> Option<(Vec<Idem>, Vec<ApiClient>, tempfile::TempDir, TestSchema)> {
    let schema = TestSchema::create(test).await?;
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut nodes, mut gateways) = (Vec::new(), Vec::new());
    for i in 0..n {
        let gateway_port = free_port();
        let config = dir.path().join(format!("node{i}.toml"));
        let toml = format!(
            "[store]\ntype = \"postgres\"\nurl = \"{}\"\npool_size = 8\n\n\
             [gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\nupstream = \"{upstream}\"\n\n\
             [[gateway.routes]]\npath = \"/orders\"\n{route}",
            schema.url
        );
        std::fs::write(&config, toml).expect("write config");
        nodes.push(Idem::serve(&dir.path().join(format!("data{i}")), &["--config", config.to_str().expect("utf-8")]));
        gateways
            .push(ApiClient::new(&format!("http://127.0.0.1:{gateway_port}"), Some(CALLER.into())).expect("client"));
    }
    Some((nodes, gateways, dir, schema))
}

async fn post(gateway: &ApiClient, key: &str, body: &'static str, delay_ms: &str) -> idem_server::cli::client::Reply {
    let headers = [("content-type", "application/json"), ("idempotency-key", key), ("x-delay-ms", delay_ms)];
    gateway
        .send_with(Method::POST, "/orders", Some(Bytes::from_static(body.as_bytes())), &headers)
        .await
        .expect("request")
}

/// The case on two nodes sharing PostgreSQL: an upstream taking 4 s behind
/// `upstream_timeout = 1s`, `lease = 3s`. Node 0's client gets 504 after about 1 s; on node 1 the
/// key is 409 (another body 422), and a race of 100 across both nodes reaches nobody. Node 0 is sent
/// SIGTERM meanwhile: it keeps the call running and its lease extended (node 1 still sees the key
/// held past 3 s), stores the answer, and only then exits. Node 1 replays the upstream's 201. The
/// upstream saw the key once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upstream_on_two_nodes_runs_once_and_survives_sigterm() {
    let upstream = Upstream::start().await;
    let route = "key = \"required\"\nupstream_timeout = \"1s\"\nlease = \"3s\"\n";
    let Some((mut nodes, gateways, _dir, _schema)) = gateway_nodes("slow", 2, &upstream.url, route).await else {
        return;
    };
    let start = Instant::now();
    let first = post(&gateways[0], "slow", "{}", "4000").await;
    let waited = start.elapsed();
    assert_eq!(first.status, 504, "{}", String::from_utf8_lossy(&first.body));
    assert!(first.headers.get("retry-after").is_some());
    assert!(waited >= Duration::from_secs(1) && waited < Duration::from_millis(2500), "504 after {waited:?}");
    assert_eq!(post(&gateways[1], "slow", "{}", "4000").await.status, 409, "held by node 0");
    assert_eq!(post(&gateways[1], "slow", "{\"other\":1}", "4000").await.status, 422);
    let race: Vec<_> = (0..100)
        .map(|i| {
            let gateway = gateways[i % 2].clone();
            tokio::spawn(async move { post(&gateway, "slow", "{}", "4000").await.status.as_u16() })
        })
        .collect();
    for task in race {
        assert_eq!(task.await.expect("task"), 409);
    }

    let mut node0 = nodes.remove(0);
    let exited = tokio::task::spawn_blocking(move || (node0.terminate(), Instant::now()));
    tokio::time::sleep_until((start + Duration::from_millis(3300)).into()).await;
    assert_eq!(post(&gateways[1], "slow", "{}", "4000").await.status, 409, "past 3 s: node 0 extends the lease");
    assert_eq!(upstream.count("/orders"), 1);

    let deadline = Instant::now() + Duration::from_secs(10);
    let answered = loop {
        let reply = post(&gateways[1], "slow", "{}", "4000").await;
        if reply.status != 409 || Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(answered.status, 201, "{}", String::from_utf8_lossy(&answered.body));
    assert_eq!(answered.headers.get("idempotent-replayed").map(|v| v.as_bytes()), Some(&b"true"[..]));
    assert_eq!(answered.json()["order_id"], 1, "the answer node 0 stored while shutting down");
    let (status, exited_at) = exited.await.expect("terminate");
    assert!(status.success(), "{status:?}");
    assert!(exited_at >= start + Duration::from_secs(4), "node 0 exited only after its call answered");
    assert_eq!(upstream.count("/orders"), 1, "the upstream saw the key once");
}
