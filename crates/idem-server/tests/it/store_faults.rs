//! PostgreSQL failing under idem (contract §10), injected through a proxy that breaks the path on
//! purpose ([`FaultyProxy`]) and through the server's own answers: every request is answered in
//! bounded time and never 500; idem recovers by itself once the database is back; a claim or a
//! begin whose answer was lost is told, on its retry with the same client token, that it won; a
//! gateway response the store could not take is stored once it can, and replayed. Skipped, loudly,
//! without IDEM_TEST_DATABASE_URL. (The suite in tests/faults does the same on a replicated
//! PostgreSQL with real failovers.)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use http::Method;
use idem_server::cli::client::{ApiClient, Reply};
use serde_json::{Value, json};

use crate::support::faulty::FaultyProxy;
use crate::support::pg::TestSchema;
use crate::support::{TestServer, assert_problem};

const CALL_TIMEOUT: Duration = Duration::from_secs(1);

fn options() -> idem_postgres::PgOptions {
    idem_postgres::PgOptions {
        pool_size: 4,
        connect_timeout: CALL_TIMEOUT,
        call_timeout: CALL_TIMEOUT,
        ..Default::default()
    }
}

struct Setup {
    schema: TestSchema,
    proxy: Arc<FaultyProxy>,
    server: TestServer,
}

async fn setup(test: &str, configure: impl FnOnce(&mut idem_server::Config)) -> Option<Setup> {
    let schema = TestSchema::create(test).await?;
    let proxy = Arc::new(FaultyProxy::start(schema.port()).await);
    let server = TestServer::start_postgres(&schema.url_through(proxy.port), &options(), configure).await;
    Some(Setup { schema, proxy, server })
}

async fn send(client: &ApiClient, method: Method, path: &str, body: Option<Value>) -> (Reply, Duration) {
    let started = Instant::now();
    let reply = client.send(method, path, body.as_ref()).await.expect("an answer");
    (reply, started.elapsed())
}

/// A 503 problem with Retry-After, of one of the two kinds a store fault gives.
fn assert_unavailable(reply: &Reply, took: Duration, what: &str) -> String {
    assert!(took < CALL_TIMEOUT + Duration::from_secs(1), "{what}: answered after {took:?}");
    let problem = assert_problem(reply, 503, what);
    assert!(reply.headers.contains_key("retry-after"), "{what}: 503 without Retry-After");
    let kind = problem["type"].as_str().unwrap_or("").to_owned();
    assert!(
        kind == "urn:idem:problem:store-unavailable" || kind == "urn:idem:problem:outcome-unknown",
        "{what}: {problem}"
    );
    kind
}

/// Sends until an answer that is not 503 comes, at most `within`; answers it and how long it took.
async fn until_recovered(client: &ApiClient, path: &str, body: Value, within: Duration) -> (Reply, Duration) {
    let started = Instant::now();
    loop {
        let (reply, _) = send(client, Method::POST, path, Some(body.clone())).await;
        assert_ne!(reply.status.as_u16(), 500, "never a 500: {}", String::from_utf8_lossy(&reply.body));
        if reply.status.as_u16() != 503 {
            return (reply, started.elapsed());
        }
        assert!(started.elapsed() < within, "still 503 after {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_database_is_answered_503_within_call_timeout_and_recovered_from() {
    let Some(s) = setup("blackhole", |_| {}).await else { return };
    let client = &s.server.client;
    s.server.post("/v1/claims/faults", json!({"key": "before"}), 201).await;

    s.proxy.black_hole();
    for i in 0..3 {
        let (reply, took) =
            send(client, Method::POST, "/v1/claims/faults", Some(json!({"key": format!("k{i}")}))).await;
        assert_unavailable(&reply, took, &format!("claim {i} in the black hole"));
    }
    let (reply, took) = send(client, Method::GET, "/v1/claims/faults/lookup", None).await;
    assert_ne!(reply.status.as_u16(), 500, "{took:?}");
    let (ready, took) = send(client, Method::GET, "/readyz", None).await;
    assert_eq!(ready.status.as_u16(), 503, "not ready while the database cannot be written");
    assert!(took < CALL_TIMEOUT + Duration::from_secs(1), "/readyz answered after {took:?}");

    s.proxy.heal();
    let (reply, took) =
        until_recovered(client, "/v1/claims/faults", json!({"key": "after"}), Duration::from_secs(10)).await;
    assert_eq!(reply.status.as_u16(), 201, "{}", String::from_utf8_lossy(&reply.body));
    eprintln!("recovered {took:?} after the path came back");
    let (ready, _) = send(client, Method::GET, "/readyz", None).await;
    assert_eq!(ready.status.as_u16(), 200);
    s.server.expect(Method::GET, &format!("/v1/claims/faults/{}", key_id("before")), None, 200).await;
}

fn key_id(key: &str) -> String {
    idem_core::Parts::single(key.into()).expect("valid").id().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_commit_answer_was_lost_is_told_it_won_on_retry() {
    let Some(s) = setup("lostcommit", |_| {}).await else { return };
    let client = &s.server.client;
    s.server.post("/v1/claims/faults", json!({"key": "warm-up"}), 201).await;

    // A single claim is one statement committing alone: lose the answer to the message that
    // carries its key (any other statement, the store's clock or a sweep, goes by untouched).
    s.proxy.lose_answer_after(b"order-7");
    let first = json!({"key": "order-7", "data": {"by": "alice"}, "client_token": "alice-call-1"});
    let (reply, took) = send(client, Method::POST, "/v1/claims/faults", Some(first.clone())).await;
    let kind = assert_unavailable(&reply, took, "the claim whose answer was lost");
    assert!(s.proxy.lost(), "the claim went by");
    assert_eq!(kind, "urn:idem:problem:outcome-unknown", "a lost commit answer is not 'nothing changed'");
    s.proxy.heal();

    // The commit was made: the row is there.
    let db = s.schema.connect().await;
    let rows = db.query("SELECT 1 FROM claims WHERE ns = 'faults'", &[]).await.expect("query");
    assert_eq!(rows.len(), 2, "the claim was stored although its answer was lost");

    let (retry, _) = until_recovered(client, "/v1/claims/faults", first, Duration::from_secs(10)).await;
    assert_eq!(retry.status.as_u16(), 201, "{}", String::from_utf8_lossy(&retry.body));
    assert_eq!(retry.json()["claimed"], true, "the retry with its client token is told it won");
    let other = json!({"key": "order-7", "data": {"by": "bob"}, "client_token": "bob-call-1"});
    let bob = s.server.post("/v1/claims/faults", other, 200).await;
    assert_eq!((bob["claimed"].clone(), bob["data"]["by"].clone()), (json!(false), json!("alice")));
    let plain = s.server.post("/v1/claims/faults", json!({"key": "order-7"}), 200).await;
    assert_eq!(plain["claimed"], false, "no client token, no claim to it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_whose_answer_was_lost_gets_its_lease_back_on_retry() {
    let Some(s) = setup("lostbegin", |_| {}).await else { return };
    let client = &s.server.client;
    s.server.post("/v1/operations/pay/begin", json!({"key": "warm-up"}), 201).await;

    // The begin is one statement committing alone: lose the answer to the message that carries
    // its key's id (matching any Execute also caught the store's clock or a sweep on another
    // connection now and then, and the begin went through).
    let ns = idem_core::Namespace::new("pay").expect("namespace");
    let id = idem_core::Parts::single("charge-9".into()).expect("valid").id();
    let store_id = idem_core::operation::store_id(&ns, &id);
    s.proxy.lose_answer_after(&store_id.0);
    let begin = json!({"key": "charge-9", "request": {"amount": 500}, "client_token": "worker-3/charge-9"});
    let (reply, took) = send(client, Method::POST, "/v1/operations/pay/begin", Some(begin.clone())).await;
    let kind = assert_unavailable(&reply, took, "the begin whose answer was lost");
    assert!(s.proxy.lost());
    assert_eq!(kind, "urn:idem:problem:outcome-unknown");
    s.proxy.heal();
    // The begin was made: the key is held, by a lease its caller was never told of.
    let db = s.schema.connect().await;
    let held = db.query("SELECT fence FROM requests WHERE state = 0 ORDER BY fence", &[]).await.expect("query");
    assert_eq!(held.len(), 2, "the warm-up's and the lost begin's");
    let lost_fence: i64 = held[1].get(0);

    let (retry, _) = until_recovered(client, "/v1/operations/pay/begin", begin.clone(), Duration::from_secs(10)).await;
    assert_eq!(retry.status.as_u16(), 201, "{}", String::from_utf8_lossy(&retry.body));
    let started = retry.json();
    assert_eq!(started["fence"], lost_fence, "the retry holds the lease the lost begin took");
    let again = s.server.post("/v1/operations/pay/begin", begin, 201).await;
    assert_eq!((&again["token"], &again["fence"]), (&started["token"], &started["fence"]), "the same lease");
    let other = json!({"key": "charge-9", "request": {"amount": 500}, "client_token": "worker-4/charge-9"});
    s.server.expect(Method::POST, "/v1/operations/pay/begin", Some(other), 409).await;
    let id = started["id"].as_str().expect("id");
    let done = json!({"token": started["token"], "result": {"charge": "ch_1"}});
    s.server.post(&format!("/v1/operations/pay/{id}/complete"), done, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_database_is_503_never_500_and_recovered_from() {
    let Some(s) = setup("readonly", |_| {}).await else { return };
    let client = &s.server.client;
    s.server.post("/v1/claims/faults", json!({"key": "before"}), 201).await;
    s.server.post("/v1/operations/pay/begin", json!({"key": "before"}), 201).await;

    // What a demoted server answers every write, with the connections still open.
    let name = s.schema.name();
    let db = s.schema.connect().await;
    let demote = format!(
        "CREATE FUNCTION {name}.read_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
           RAISE EXCEPTION 'cannot execute % in a read-only transaction', TG_OP USING ERRCODE = '25006'; END $$;
         CREATE TRIGGER demoted BEFORE INSERT OR UPDATE OR DELETE ON {name}.claims FOR EACH ROW EXECUTE FUNCTION {name}.read_only();
         CREATE TRIGGER demoted BEFORE INSERT OR UPDATE OR DELETE ON {name}.requests FOR EACH ROW EXECUTE FUNCTION {name}.read_only();
         CREATE TRIGGER demoted BEFORE INSERT OR UPDATE OR DELETE ON {name}.meta FOR EACH ROW EXECUTE FUNCTION {name}.read_only();"
    );
    db.batch_execute(&demote).await.expect("demote");
    for i in 0..20 {
        let (reply, took) =
            send(client, Method::POST, "/v1/claims/faults", Some(json!({"key": format!("k{i}")}))).await;
        let kind = assert_unavailable(&reply, took, &format!("claim {i} on a read-only server"));
        assert_eq!(kind, "urn:idem:problem:store-unavailable", "refused: nothing was changed");
        let (reply, took) = send(client, Method::POST, "/v1/operations/pay/begin", Some(json!({"key": "k"}))).await;
        assert_unavailable(&reply, took, "a begin on a read-only server");
    }
    let (ready, _) = send(client, Method::GET, "/readyz", None).await;
    assert_eq!(ready.status.as_u16(), 503, "not ready while writes are refused");
    s.server.expect(Method::GET, &format!("/v1/claims/faults/{}", key_id("before")), None, 200).await;

    db.batch_execute(&format!("DROP TRIGGER demoted ON {name}.claims; DROP TRIGGER demoted ON {name}.requests; DROP TRIGGER demoted ON {name}.meta"))
        .await
        .expect("promote");
    let (reply, took) =
        until_recovered(client, "/v1/claims/faults", json!({"key": "after"}), Duration::from_secs(10)).await;
    assert_eq!(reply.status.as_u16(), 201);
    eprintln!("recovered {took:?} after the server took writes again");
}

/// The upstream of the gateway test: records each call's fencing number, and black-holes the
/// database path as it answers, so that the gateway cannot store the response.
async fn fencing_upstream(proxy: Arc<FaultyProxy>, seen: Arc<std::sync::Mutex<Vec<String>>>) -> String {
    let app = axum::Router::new().route(
        "/orders",
        axum::routing::post(move |headers: HeaderMap| {
            let (proxy, seen) = (Arc::clone(&proxy), Arc::clone(&seen));
            async move {
                let fence = headers.get("idem-fencing-token").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                seen.lock().expect("lock").push(fence.clone());
                proxy.black_hole();
                (http::StatusCode::CREATED, axum::Json(json!({"order": 1, "fence": fence})))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn gateway(upstream: &str) -> impl FnOnce(&mut idem_server::Config) {
    let upstream = upstream.to_owned();
    move |c| {
        let text = format!(
            "[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n[[gateway.routes]]\npath = \"/orders\"\nkey = \"required\"\nlease = \"20s\"\nscope = [\"header:authorization\"]\n"
        );
        let parsed: idem_server::Config = toml::from_str(&text).expect("gateway config");
        c.gateway = parsed.gateway;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_the_store_could_not_take_is_kept_stored_and_replayed() {
    let Some(schema) = TestSchema::create("unstored").await else { return };
    let proxy = Arc::new(FaultyProxy::start(schema.port()).await);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let upstream = fencing_upstream(Arc::clone(&proxy), Arc::clone(&seen)).await;
    let url = schema.url_through(proxy.port);
    let node = TestServer::start_postgres(&url, &options(), gateway(&upstream)).await;
    let gw = ApiClient::new(node.gateway_url.as_deref().expect("gateway"), None).expect("client");
    let order = |key: &str| {
        let client = gw.clone();
        let key = key.to_owned();
        async move {
            client
                .send_with(
                    Method::POST,
                    "/orders",
                    Some(bytes::Bytes::from_static(b"{\"item\":\"book\"}")),
                    &[
                        ("idempotency-key", key.as_str()),
                        ("content-type", "application/json"),
                        ("authorization", "Bearer alice"),
                    ],
                )
                .await
                .expect("an answer")
        }
    };

    // The upstream answers, and the path to the database is gone as it does.
    let first = order("\"order-1\"").await;
    assert_eq!(
        first.status.as_u16(),
        201,
        "the client gets the upstream's answer: {}",
        String::from_utf8_lossy(&first.body)
    );
    let fence: u64 = seen.lock().expect("lock")[0].parse().expect("a numeric Idem-Fencing-Token");
    assert!(fence > 0);
    // A retry on this node meanwhile: replayed from memory, the store still away.
    let retry = order("\"order-1\"").await;
    assert_eq!(retry.status.as_u16(), 201);
    assert_eq!(retry.headers.get("idempotent-replayed").and_then(|v| v.to_str().ok()), Some("true"));
    assert_eq!(retry.body, first.body);

    proxy.heal();
    // Stored as soon as the store answers again.
    let db = schema.connect().await;
    let stored_by = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = db.query("SELECT 1 FROM requests WHERE state = 1", &[]).await.expect("query");
        if rows.len() == 1 {
            break;
        }
        assert!(Instant::now() < stored_by, "the kept response was not stored within 10 s of the store's return");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A node that never saw the request (no memory of it) replays it from the store.
    let other = TestServer::start_postgres(&url, &options(), gateway(&upstream)).await;
    let other_gw = ApiClient::new(other.gateway_url.as_deref().expect("gateway"), None).expect("client");
    let replay = other_gw
        .send_with(
            Method::POST,
            "/orders",
            Some(bytes::Bytes::from_static(b"{\"item\":\"book\"}")),
            &[
                ("idempotency-key", "\"order-1\""),
                ("content-type", "application/json"),
                ("authorization", "Bearer alice"),
            ],
        )
        .await
        .expect("an answer");
    assert_eq!(replay.status.as_u16(), 201);
    assert_eq!(replay.headers.get("idempotent-replayed").and_then(|v| v.to_str().ok()), Some("true"));
    assert_eq!(replay.body, first.body, "the first execution's response");
    assert_eq!(seen.lock().expect("lock").len(), 1, "the upstream ran the key once");
    drop(proxy);
}

/// An upstream that takes `takes` to answer `201` to a POST on any path, counting its calls.
async fn slow_upstream(calls: Arc<AtomicUsize>, takes: Duration) -> String {
    // Any path: each test's route its own, so that its metrics are its own too.
    let app = axum::Router::new().fallback(axum::routing::post(move || {
        let calls = Arc::clone(&calls);
        async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(takes).await;
            (http::StatusCode::CREATED, axum::Json(json!({"order": n})))
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A begin held up on its way to the database (here 1.6 s of a 2 s lease, a stalled path that
/// comes back) has used most of the lease the store stamped when it was asked. The gateway counts
/// the lease from before the begin was sent and extends one more than half used before it forwards,
/// so the response is stored and the retry replayed: the upstream runs once. Counting from the
/// begin's answer instead, the lease ended in the store while the upstream ran, the response was
/// not stored ("lease ran out before the response came back") and the retry ran the key again, as
/// two of the fault suite's partitions did (#36).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_held_up_on_the_way_still_runs_its_key_once() {
    let Some(schema) = TestSchema::create("held_up").await else { return };
    let proxy = Arc::new(FaultyProxy::start(schema.port()).await);
    let calls = Arc::new(AtomicUsize::new(0));
    let upstream = slow_upstream(Arc::clone(&calls), Duration::from_millis(600)).await;
    let call_timeout = Duration::from_secs(3);
    let options =
        idem_postgres::PgOptions { pool_size: 4, connect_timeout: call_timeout, call_timeout, ..Default::default() };
    let node = TestServer::start_postgres(&schema.url_through(proxy.port), &options, move |c| {
        let text = format!(
            "[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n[[gateway.routes]]\npath = \"/orders\"\n\
             key = \"required\"\nlease = \"2s\"\nupstream_timeout = \"1500ms\"\nscope = [\"header:authorization\"]\n"
        );
        let parsed: idem_server::Config = toml::from_str(&text).expect("gateway config");
        c.gateway = parsed.gateway;
    })
    .await;
    let gw = ApiClient::new(node.gateway_url.as_deref().expect("gateway"), None).expect("client");
    let order = || {
        let client = gw.clone();
        async move {
            let headers = [
                ("idempotency-key", "\"order-1\""),
                ("content-type", "application/json"),
                ("authorization", "Bearer alice"),
            ];
            let body = Some(bytes::Bytes::from_static(b"{\"item\":\"book\"}"));
            client.send_with(Method::POST, "/orders", body, &headers).await.expect("an answer")
        }
    };

    proxy.black_hole();
    let first = tokio::spawn(order());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    proxy.heal();
    let first = first.await.expect("task");
    assert_eq!(first.status.as_u16(), 201, "{}", String::from_utf8_lossy(&first.body));
    let retry = order().await;
    assert_eq!(retry.status.as_u16(), 201, "{}", String::from_utf8_lossy(&retry.body));
    assert_eq!(retry.headers.get("idempotent-replayed").and_then(|v| v.to_str().ok()), Some("true"));
    assert_eq!(retry.body, first.body, "the first execution's response");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the upstream ran the key once");
    drop(proxy);
}

/// A node cut off from the store past its lease, with no retry meanwhile: its upstream answered
/// (`201` to the client, the response kept for the store), and when the path comes back the store
/// takes it, since no other request took the key after the lease ran out (the lease is still this
/// node's: its fencing number is the key's last). A retry on another node is replayed from the
/// store; the upstream ran once. Before, the store refused a response whose lease had ended, and
/// the retry ran the key again (2 and 4 keys in two trials: #39).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_comes_back_after_its_lease_is_kept_when_no_one_took_the_key() {
    let Some(schema) = TestSchema::create("late_answer").await else { return };
    let proxy = Arc::new(FaultyProxy::start(schema.port()).await);
    let calls = Arc::new(AtomicUsize::new(0));
    let upstream = slow_upstream(Arc::clone(&calls), Duration::from_millis(800)).await;
    let call_timeout = Duration::from_millis(700);
    let options =
        idem_postgres::PgOptions { pool_size: 4, connect_timeout: call_timeout, call_timeout, ..Default::default() };
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n[[gateway.routes]]\npath = \"/late-orders\"\n\
         key = \"required\"\nlease = \"2s\"\nupstream_timeout = \"1500ms\"\nscope = [\"header:authorization\"]\n"
    );
    let gateway = toml::from_str::<idem_server::Config>(&text).expect("gateway config").gateway;
    let cut_off = {
        let gateway = gateway.clone();
        TestServer::start_postgres(&schema.url_through(proxy.port), &options, move |c| c.gateway = gateway).await
    };
    let order = |node: &TestServer| {
        let client = ApiClient::new(node.gateway_url.as_deref().expect("gateway"), None).expect("client");
        async move {
            let headers = [
                ("idempotency-key", "\"late-1\""),
                ("content-type", "application/json"),
                ("authorization", "Bearer bob"),
            ];
            let body = Some(bytes::Bytes::from_static(b"{\"item\":\"lamp\"}"));
            client.send_with(Method::POST, "/late-orders", body, &headers).await.expect("an answer")
        }
    };

    let first = tokio::spawn(order(&cut_off));
    // The begin went through; the upstream is working: cut the node off from the store.
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.black_hole();
    let first = first.await.expect("task");
    assert_eq!(first.status.as_u16(), 201, "the client gets its answer: {}", String::from_utf8_lossy(&first.body));
    // Cut off for 3 s: well past the 2 s lease, and no request for the key meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.heal();
    let stored = r#"idem_gateway_unstored_total{route="/late-orders",outcome="stored"}"#;
    let started = Instant::now();
    while crate::support::metric(&cut_off.client, stored).await < 1.0 {
        assert!(started.elapsed() < Duration::from_secs(10), "the late response was never stored");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Asked of the store, not of the first node's memory: a second node on the same database.
    let other =
        TestServer::start_postgres(&schema.url_through(schema.port()), &options, move |c| c.gateway = gateway).await;
    let replay = order(&other).await;
    assert_eq!(replay.status.as_u16(), 201, "{}", String::from_utf8_lossy(&replay.body));
    assert_eq!(replay.headers.get("idempotent-replayed").and_then(|v| v.to_str().ok()), Some("true"));
    assert_eq!(replay.body, first.body, "the late response, stored");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the upstream ran the key once");
    drop(proxy);
}
