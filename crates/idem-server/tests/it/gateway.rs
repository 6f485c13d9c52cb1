//! The Idempotency-Key gateway in front of a real upstream on a real socket that counts what it
//! receives: one test per row of the contract's table, races of hundreds of requests, an upstream
//! slower than `upstream_timeout` (and than the lease), other spellings of a guarded path, and
//! idem's own answers in Stripe's shape on a route (or a gateway) that asks for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use idem_core::SystemClock;
use idem_core::gateway::{InFlightPolicy, KeyPolicy};
use idem_gateway::{ErrorShape, RoutePolicy};
use idem_server::cli::client::{ApiClient, Reply};
use idem_server::config::{ErrorStyle, GatewayConfig, Route, Upstream as UpstreamUrl};
use serde_json::json;

use crate::support::TestServer;
use crate::support::upstream::Upstream;

/// Who the tests' requests come from, unless a test says otherwise: the default scope asks for it.
const CALLER: &str = "Bearer test-caller";

struct Gateway {
    server: TestServer,
    client: ApiClient,
    upstream: Upstream,
}

/// A route with the contract's defaults.
fn route(path: &str) -> RoutePolicy {
    RoutePolicy::new(idem_core::gateway::PathPattern::parse(path).expect("valid path"))
}

/// idem with a gateway in front of a fresh upstream; `routes` edits the default `/orders` route.
async fn gateway(routes: impl FnOnce(&mut Vec<RoutePolicy>)) -> Gateway {
    gateway_with(routes, |_| {}).await
}

async fn gateway_with(routes: impl FnOnce(&mut Vec<RoutePolicy>), more: impl FnOnce(&mut GatewayConfig)) -> Gateway {
    let upstream = Upstream::start().await;
    let mut list = vec![RoutePolicy { key: KeyPolicy::Required, ..route("/orders") }];
    routes(&mut list);
    let mut config = GatewayConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        upstream: UpstreamUrl::parse(&upstream.url).expect("upstream URL"),
        max_stored_response: 1 << 20,
        cache_bytes: 1 << 20,
        max_background_calls: 1000,
        max_unstored_bytes: 1 << 20,
        path_case: Default::default(),
        errors: None,
        errors_template: None,
        max_call: None,
        routes: list.into_iter().map(Route::from).collect(),
        jwt: None,
        identity: None,
        tls: None,
    };
    more(&mut config);
    let server = TestServer::start_with(|c| c.gateway = Some(config), Arc::new(SystemClock)).await;
    let client = ApiClient::new(server.gateway_url.as_deref().expect("gateway url"), None).expect("client");
    Gateway { server, client, upstream }
}

impl Gateway {
    async fn post(&self, path: &str, key: Option<&str>, body: &str, extra: &[(&str, &str)]) -> Reply {
        let mut headers = vec![("content-type", "application/json")];
        if let Some(key) = key {
            headers.push(("idempotency-key", key));
        }
        if !extra.iter().any(|(name, _)| name.eq_ignore_ascii_case("authorization")) {
            headers.push(("authorization", CALLER));
        }
        headers.extend_from_slice(extra);
        self.client.send_with(Method::POST, path, Some(Bytes::from(body.to_owned())), &headers).await.expect("request")
    }
}

fn replayed(reply: &Reply) -> bool {
    reply.headers.get("idempotent-replayed").is_some_and(|v| v == "true")
}

fn problem_type(reply: &Reply) -> String {
    assert_eq!(reply.headers.get("content-type").map(|v| v.as_bytes()), Some(&b"application/problem+json"[..]));
    reply.json()["type"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn first_time_is_forwarded_and_a_retry_is_replayed() {
    let g = gateway(|_| {}).await;
    let first =
        g.post("/orders", Some("\"8e03978e-40d5-43e8-bc93-6894a57f9324\""), r#"{"item":"book","qty":1}"#, &[]).await;
    assert_eq!(first.status, 201);
    assert!(!replayed(&first));
    let again =
        g.post("/orders", Some("\"8e03978e-40d5-43e8-bc93-6894a57f9324\""), r#"{"item":"book","qty":1}"#, &[]).await;
    assert_eq!(again.status, 201, "the stored status");
    assert!(replayed(&again), "marked Idempotent-Replayed: true");
    assert_eq!(again.body, first.body, "the stored body");
    assert_eq!(again.headers.get("x-order-id"), first.headers.get("x-order-id"), "the stored headers");
    assert_eq!(g.upstream.count("/orders"), 1, "the upstream was called once");
    assert_eq!(
        g.upstream.keys(),
        vec![Some("\"8e03978e-40d5-43e8-bc93-6894a57f9324\"".to_owned())],
        "the key is forwarded unchanged"
    );
    let bare = g.post("/orders", Some("8e03978e-40d5-43e8-bc93-6894a57f9324"), r#"{"item":"book","qty":1}"#, &[]).await;
    assert!(replayed(&bare), "the bare token is the same key as the sf-string");
    g.server.stop().await;
}

#[tokio::test]
async fn reordered_json_is_the_same_request_and_a_different_body_is_422() {
    let g = gateway(|_| {}).await;
    g.post("/orders", Some("k1"), r#"{"item":"book","qty":1}"#, &[]).await;
    let reordered = g.post("/orders", Some("k1"), "{ \"qty\": 1,\n \"item\": \"book\" }", &[]).await;
    assert!(replayed(&reordered), "key order and whitespace do not matter");
    let other = g.post("/orders", Some("k1"), r#"{"item":"book","qty":2}"#, &[]).await;
    assert_eq!(other.status, 422);
    assert_eq!(problem_type(&other), "urn:idem:problem:idempotency-key-reused");
    let other_query = g.post("/orders?coupon=1", Some("k1"), r#"{"item":"book","qty":1}"#, &[]).await;
    assert_eq!(other_query.status, 422, "the query is part of the fingerprint");
    assert_eq!(g.upstream.count("/orders"), 1, "nothing forwarded for a mismatch");
    g.server.stop().await;
}

#[tokio::test]
async fn missing_and_malformed_keys_are_400() {
    let g = gateway(|routes| routes.push(route("/optional"))).await;
    let missing = g.post("/orders", None, "{}", &[]).await;
    assert_eq!(missing.status, 400);
    assert_eq!(problem_type(&missing), "urn:idem:problem:missing-idempotency-key");
    let long = "k".repeat(256);
    for bad in ["", "\"unterminated", "\"a\"b", long.as_str()] {
        let reply = g.post("/orders", Some(bad), "{}", &[]).await;
        assert_eq!(reply.status, 400, "{bad:?}");
        assert_eq!(problem_type(&reply), "urn:idem:problem:invalid-idempotency-key");
    }
    assert_eq!(g.upstream.count("/orders"), 0, "nothing forwarded");
    // An optional route forwards a request without a key, every time.
    assert_eq!(g.post("/optional", None, "{}", &[]).await.status, 404, "the upstream's own answer");
    g.server.stop().await;
}

#[tokio::test]
async fn callers_with_different_authorization_never_share_a_response() {
    let g = gateway(|_| {}).await;
    let alice = g.post("/orders", Some("same-key"), "{}", &[("authorization", "Bearer alice")]).await;
    let bob = g.post("/orders", Some("same-key"), "{}", &[("authorization", "Bearer bob")]).await;
    assert!(!replayed(&bob), "bob's request executes");
    assert_ne!(alice.body, bob.body, "bob never sees alice's order");
    assert!(replayed(&g.post("/orders", Some("same-key"), "{}", &[("authorization", "Bearer alice")]).await));
    assert_eq!(g.upstream.count("/orders"), 2);
    g.server.stop().await;
}

#[tokio::test]
async fn transient_failures_release_the_key_and_5xx_can_be_stored() {
    let g = gateway(|routes| {
        routes.push(route("/flaky"));
        routes.push(route("/status/*"));
    })
    .await;
    let first = g.post("/flaky", Some("f"), "{}", &[]).await;
    assert_eq!(first.status, 503, "the 503 goes back");
    let retry = g.post("/flaky", Some("f"), "{}", &[]).await;
    assert_eq!(retry.status, 201, "the key was released: the retry executes");
    assert!(replayed(&g.post("/flaky", Some("f"), "{}", &[]).await), "and its success is kept");
    for code in [408, 425, 429, 500] {
        let path = format!("/status/{code}");
        g.post(&path, Some("s"), "{}", &[]).await;
        let again = g.post(&path, Some("s"), "{}", &[]).await;
        assert_eq!((again.status.as_u16(), replayed(&again)), (code, false), "{code} releases the key");
        assert_eq!(g.upstream.count(&path), 2, "{code} executed twice");
    }
    for code in [400, 404] {
        let (path, key) = (format!("/status/{code}"), format!("kept-{code}"));
        g.post(&path, Some(&key), "{}", &[]).await;
        assert!(replayed(&g.post(&path, Some(&key), "{}", &[]).await), "{code} is kept");
    }
    g.server.stop().await;
}

#[tokio::test]
async fn a_stored_5xx_is_replayed_when_the_route_says_so() {
    let g = gateway(|routes| routes.push(RoutePolicy { store_5xx: true, ..route("/status/*") })).await;
    assert_eq!(g.post("/status/500", Some("s"), "{}", &[]).await.status, 500);
    let again = g.post("/status/500", Some("s"), "{}", &[]).await;
    assert!(replayed(&again) && again.status == 500);
    assert_eq!(g.upstream.count("/status/500"), 1);
    g.server.stop().await;
}

#[tokio::test]
async fn an_unreachable_upstream_is_502_and_releases_the_key() {
    let g = gateway_with(|_| {}, |c| c.upstream = UpstreamUrl::parse("http://127.0.0.1:9").expect("URL")).await;
    let first = g.post("/orders", Some("k"), "{}", &[]).await;
    assert_eq!(first.status, 502);
    assert_eq!(problem_type(&first), "urn:idem:problem:upstream-unavailable");
    let second = g.post("/orders", Some("k"), "{}", &[]).await;
    assert_eq!(second.status, 502, "not 409: the key was released, so the retry executes again");
    g.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_in_flight_is_409_with_retry_after() {
    let g = gateway(|_| {}).await;
    let first = {
        let client = g.client.clone();
        tokio::spawn(async move {
            let headers =
                [("content-type", "application/json"), ("idempotency-key", "slow"), ("authorization", CALLER)];
            client.send_with(Method::POST, "/orders?delay_ms=700", Some(Bytes::from_static(b"{}")), &headers).await
        })
    };
    while g.upstream.count("/orders") == 0 {
        tokio::task::yield_now().await;
    }
    let duplicate = g.post("/orders?delay_ms=700", Some("slow"), "{}", &[]).await;
    assert_eq!(duplicate.status, 409);
    assert_eq!(problem_type(&duplicate), "urn:idem:problem:request-in-flight");
    assert!(duplicate.headers.get("retry-after").is_some());
    assert_eq!(first.await.expect("task").expect("request").status, 201);
    assert_eq!(g.upstream.count("/orders"), 1);
    g.server.stop().await;
}

/// 200 concurrent identical requests: one upstream call, 200 identical answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_of_200_identical_requests_calls_the_upstream_once() {
    let g = gateway(|routes| routes[0].in_flight = InFlightPolicy::Wait).await;
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let client = g.client.clone();
            tokio::spawn(async move {
                let headers =
                    [("content-type", "application/json"), ("idempotency-key", "raced"), ("authorization", CALLER)];
                client
                    .send_with(Method::POST, "/orders?delay_ms=200", Some(Bytes::from_static(b"{\"a\":1}")), &headers)
                    .await
            })
        })
        .collect();
    let mut bodies = std::collections::HashSet::new();
    for task in tasks {
        let reply = task.await.expect("task").expect("request");
        assert_eq!(reply.status, 201);
        bodies.insert(reply.body);
    }
    assert_eq!(g.upstream.count("/orders"), 1, "exactly one upstream call");
    assert_eq!(bodies.len(), 1, "200 identical responses");
    g.server.stop().await;
}

/// 50 keys interleaved, 4 requests each, all at once: 50 upstream calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_of_50_keys_interleaved_calls_the_upstream_once_per_key() {
    let g = gateway(|routes| routes[0].in_flight = InFlightPolicy::Wait).await;
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let client = g.client.clone();
            tokio::spawn(async move {
                let key = format!("key-{}", i % 50);
                let headers = [
                    ("content-type", "application/json"),
                    ("idempotency-key", key.as_str()),
                    ("authorization", CALLER),
                ];
                let reply = client
                    .send_with(Method::POST, "/orders?delay_ms=50", Some(Bytes::from_static(b"{}")), &headers)
                    .await;
                (key, reply.expect("request"))
            })
        })
        .collect();
    let mut per_key = std::collections::HashMap::<String, std::collections::HashSet<Bytes>>::new();
    for task in tasks {
        let (key, reply) = task.await.expect("task");
        assert_eq!(reply.status, 201);
        per_key.entry(key).or_default().insert(reply.body);
    }
    assert_eq!(g.upstream.count("/orders"), 50);
    assert!(per_key.values().all(|bodies| bodies.len() == 1), "each key's answers are identical");
    g.server.stop().await;
}

/// `/orders` with `upstream_timeout = 1s` and `lease = 3s`.
fn slow_route(routes: &mut [RoutePolicy]) {
    routes[0] = RoutePolicy {
        upstream_timeout: Duration::from_secs(1),
        ..routes[0].clone().with_lease(Duration::from_secs(3))
    };
}

fn retry_after(reply: &Reply) -> Option<u64> {
    reply.headers.get("retry-after")?.to_str().ok()?.parse().ok()
}

/// Retries `key` until its answer is no longer 409 (the upstream answered), for at most 10 s.
async fn once_answered(g: &Gateway, path: &str, key: &str, body: &str, extra: &[(&str, &str)]) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = g.post(path, Some(key), body, extra).await;
        if reply.status != 409 || Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The issue's case: an upstream taking 4 s behind `upstream_timeout = 1s`, `lease = 3s`. The
/// client gets 504 with Retry-After after about 1 s; the same key is 409 then, and still 409 past
/// the 3 s the lease would have lasted, while the call runs; another body is 422. Once the upstream
/// answers, a retry is its 201 replayed. The upstream saw the key once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upstream_is_504_then_its_answer_is_replayed_and_it_ran_once() {
    let g = gateway(|routes| slow_route(routes)).await;
    let slow = [("x-delay-ms", "4000")];
    let start = Instant::now();
    let first = g.post("/orders", Some("slow"), "{}", &slow).await;
    let waited = start.elapsed();
    assert_eq!(first.status, 504, "{}", String::from_utf8_lossy(&first.body));
    assert_eq!(problem_type(&first), "urn:idem:problem:upstream-timeout");
    assert_eq!(retry_after(&first), Some(1));
    assert!(waited >= Duration::from_secs(1) && waited < Duration::from_millis(2500), "504 after {waited:?}");

    let again = g.post("/orders", Some("slow"), "{}", &slow).await;
    assert_eq!((again.status.as_u16(), problem_type(&again).as_str()), (409, "urn:idem:problem:request-in-flight"));
    let other = g.post("/orders", Some("slow"), r#"{"other":1}"#, &slow).await;
    assert_eq!(other.status, 422, "a different body under the key is a mismatch, not a new execution");
    tokio::time::sleep_until((start + Duration::from_millis(3300)).into()).await;
    let past_lease = g.post("/orders", Some("slow"), "{}", &slow).await;
    assert_eq!(past_lease.status, 409, "past the first lease the key is still held: it is extended");
    assert_eq!(g.upstream.count("/orders"), 1);

    let answered = once_answered(&g, "/orders", "slow", "{}", &slow).await;
    assert_eq!(answered.status, 201, "{}", String::from_utf8_lossy(&answered.body));
    assert!(replayed(&answered), "the upstream's own answer, replayed");
    assert_eq!(answered.json()["order_id"], 1);
    assert!(start.elapsed() >= Duration::from_secs(4));
    assert_eq!(g.upstream.count("/orders"), 1, "the upstream saw the key once");
    assert_eq!(g.upstream.keys(), vec![Some("slow".to_owned())]);
    // The recorder is the process's, shared with the other tests: look for the series, not values.
    let metrics = g.server.client.send(Method::GET, "/metrics", None).await.expect("metrics");
    let text = String::from_utf8_lossy(&metrics.body);
    for needle in [
        r#"idem_gateway_background_calls{route="/orders"}"#,
        r#"idem_gateway_background_calls_total{route="/orders",outcome="forwarded"}"#,
        r#"idem_gateway_requests_total{route="/orders",outcome="upstream_timeout"}"#,
    ] {
        assert!(text.contains(needle), "metrics lack {needle}");
    }
    g.server.stop().await;
}

/// 200 identical requests racing while the first one's call runs on in the background: they wait
/// (`in_flight = "wait"`), are woken when it answers, and all get its answer. One upstream call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_race_during_a_slow_call_reaches_the_upstream_once() {
    let g = gateway(|routes| {
        slow_route(routes);
        routes[0].in_flight = InFlightPolicy::Wait;
    })
    .await;
    let first = g.post("/orders", Some("raced"), "{}", &[("x-delay-ms", "2500")]).await;
    assert_eq!(first.status, 504);
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let client = g.client.clone();
            tokio::spawn(async move {
                let headers =
                    [("content-type", "application/json"), ("idempotency-key", "raced"), ("authorization", CALLER)];
                client.send_with(Method::POST, "/orders", Some(Bytes::from_static(b"{}")), &headers).await
            })
        })
        .collect();
    let mut bodies = std::collections::HashSet::new();
    for task in tasks {
        let reply = task.await.expect("task").expect("request");
        assert_eq!(reply.status, 201, "{}", String::from_utf8_lossy(&reply.body));
        bodies.insert(reply.body);
    }
    assert_eq!(g.upstream.count("/orders"), 1, "exactly one upstream call");
    assert_eq!(bodies.len(), 1, "200 identical answers: the slow call's");
    g.server.stop().await;
}

/// Past `max_background_calls` the slow call is dropped at its 504, and its key stays held until
/// the lease ends (Retry-After says when): 409 before, a new execution after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_background_bound_the_key_is_held_until_the_lease_ends() {
    let g = gateway_with(
        |routes| {
            routes[0] = RoutePolicy {
                upstream_timeout: Duration::from_millis(300),
                ..routes[0].clone().with_lease(Duration::from_millis(1500))
            };
        },
        |c| c.max_background_calls = 0,
    )
    .await;
    let start = Instant::now();
    let dropped = g.post("/orders", Some("h"), "{}", &[("x-delay-ms", "3000")]).await;
    assert_eq!((dropped.status.as_u16(), retry_after(&dropped)), (504, Some(2)), "Retry-After: the lease's end");
    assert!(problem_type(&dropped).ends_with("upstream-timeout"));
    let detail = dropped.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("max_background_calls") && detail.contains("held until"), "{detail}");
    assert_eq!(g.post("/orders", Some("h"), "{}", &[]).await.status, 409, "held, not released early");
    tokio::time::sleep_until((start + Duration::from_millis(1600)).into()).await;
    let retry = g.post("/orders", Some("h"), "{}", &[]).await;
    assert_eq!((retry.status.as_u16(), replayed(&retry)), (201, false), "the lease ended: a retry executes again");
    assert_eq!(g.upstream.count("/orders"), 2);
    g.server.stop().await;
}

/// Other spellings of a `required` route's path are that route: no key, 400, nothing forwarded.
/// With a key, `/orders` and `/orders/` are one execution. The upstream receives the client's path
/// byte for byte.
#[tokio::test]
async fn other_spellings_of_a_guarded_path_cannot_bypass_it() {
    let g = gateway(|_| {}).await;
    let spellings = ["/orders/", "//orders", "/x/../orders", "/%6Frders"];
    for path in spellings {
        let reply = g.post(path, None, "{}", &[]).await;
        assert_eq!(reply.status, 400, "{path}");
        assert_eq!(problem_type(&reply), "urn:idem:problem:missing-idempotency-key", "{path}");
    }
    assert_eq!(g.upstream.raw(), Vec::<String>::new(), "none reached the upstream");

    let first = g.post("/orders", Some("one"), "{}", &[]).await;
    assert_eq!((first.status.as_u16(), replayed(&first)), (201, false));
    let slash = g.post("/orders/", Some("one"), "{}", &[]).await;
    assert_eq!((slash.status.as_u16(), replayed(&slash)), (201, true), "the same request: one execution");
    assert_eq!(slash.body, first.body);

    for (i, path) in spellings.iter().enumerate() {
        g.post(&format!("{path}?n={i}"), Some(&format!("raw-{i}")), "{}", &[]).await;
    }
    let expected: Vec<String> = std::iter::once("/orders".to_owned())
        .chain(spellings.iter().enumerate().map(|(i, p)| format!("{p}?n={i}")))
        .collect();
    assert_eq!(g.upstream.raw(), expected, "forwarded byte for byte as the client sent it");
    g.server.stop().await;
}

#[tokio::test]
async fn a_response_over_the_cap_passes_through_and_releases_the_key() {
    let g = gateway_with(|routes| routes.push(route("/big")), |c| c.max_stored_response = 1000).await;
    let big = g.post("/big?bytes=5000", Some("b"), "{}", &[]).await;
    assert_eq!((big.status.as_u16(), big.body.len()), (200, 5000), "passed through whole");
    let again = g.post("/big?bytes=5000", Some("b"), "{}", &[]).await;
    assert!(!replayed(&again), "not stored: a retry executes again");
    assert_eq!(g.upstream.count("/big"), 2);
    let small = g.post("/big?bytes=10", Some("s"), "{}", &[]).await;
    assert_eq!(small.body.len(), 10);
    assert!(replayed(&g.post("/big?bytes=10", Some("s"), "{}", &[]).await));
    g.server.stop().await;
}

#[tokio::test]
async fn unmatched_requests_pass_straight_through() {
    let g = gateway(|_| {}).await;
    let plain = g.client.send_with(Method::GET, "/plain", None, &[]).await.expect("request");
    assert_eq!((plain.status.as_u16(), &plain.body[..]), (200, &b"hello"[..]));
    for _ in 0..2 {
        g.client.send_with(Method::GET, "/orders", None, &[("idempotency-key", "k")]).await.expect("request");
    }
    assert_eq!(
        g.upstream.count("/orders"),
        0,
        "GET /orders is not a POST: not guarded, and the upstream has no GET route"
    );
    g.server.stop().await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_not_forwarded() {
    let upstream_body = "x".repeat(2 << 20);
    let g = gateway(|_| {}).await;
    let reply = g.post("/orders", Some("k"), &upstream_body, &[]).await;
    let problem = crate::support::assert_problem(&reply, 413, "a gateway body over the limit");
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains("limits.max_body_bytes")), "{problem}");
    assert_eq!(g.upstream.count("/orders"), 0);
    g.server.stop().await;
}

#[tokio::test]
async fn gateway_metrics_count_outcomes_by_route() {
    let g = gateway(|_| {}).await;
    g.post("/orders", Some("m"), "{}", &[]).await;
    g.post("/orders", Some("m"), "{}", &[]).await;
    g.post("/orders", None, "{}", &[]).await;
    let metrics = g.server.client.send(Method::GET, "/metrics", None).await.expect("metrics");
    let text = String::from_utf8_lossy(&metrics.body);
    for needle in [
        r#"idem_gateway_requests_total{route="/orders",outcome="forwarded"}"#,
        r#"idem_gateway_requests_total{route="/orders",outcome="replayed"}"#,
        r#"idem_gateway_requests_total{route="/orders",outcome="missing_key"}"#,
        "idem_gateway_upstream_duration_seconds_bucket",
    ] {
        assert!(text.contains(needle), "metrics lack {needle}");
    }
    g.server.stop().await;
}

#[tokio::test]
async fn json_bodies_are_compared_as_json_only_when_they_say_so() {
    let g = gateway(|_| {}).await;
    let text = |body: &'static str| {
        let client = g.client.clone();
        async move {
            let headers = [("content-type", "text/plain"), ("idempotency-key", "t"), ("authorization", CALLER)];
            client
                .send_with(Method::POST, "/orders", Some(Bytes::from_static(body.as_bytes())), &headers)
                .await
                .expect("request")
        }
    };
    assert_eq!(text("{\"a\":1,\"b\":2}").await.status, 201);
    assert_eq!(text("{\"b\":2,\"a\":1}").await.status, 422, "a text body counts byte for byte");
    let _ = json!({});
    g.server.stop().await;
}

/// The `error` of an answer in Stripe's shape, `(type, code)`; it has a message, and no problem
/// member.
fn stripe_error(reply: &Reply) -> (String, String) {
    let body = String::from_utf8_lossy(&reply.body);
    assert_eq!(reply.headers.get("content-type").map(|v| v.as_bytes()), Some(&b"application/json"[..]), "{body}");
    let json = reply.json();
    let error = &json["error"];
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()) && json.get("type").is_none(), "{body}");
    let field = |name: &str| error[name].as_str().unwrap_or_default().to_owned();
    (field("type"), field("code"))
}

/// `/orders` with `errors = "stripe"` (and `upstream_timeout = 1s`, `lease = 3s`) beside
/// `/status/{code}` with the default: 504, 409, 422 and 400 in Stripe's shape with their statuses
/// and `Retry-After`, while the other route's 422 is problem+json, and the upstream's own answer,
/// replayed, is untouched. One upstream call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_route_answers_in_stripes_shape_and_the_others_in_problem_json() {
    let g = gateway(|routes| {
        slow_route(routes);
        routes[0].errors = ErrorShape::Stripe;
        routes.push(route("/status/{code}"));
    })
    .await;
    let slow = [("x-delay-ms", "2500")];
    let timed_out = g.post("/orders", Some("s"), "{}", &slow).await;
    assert_eq!((timed_out.status.as_u16(), retry_after(&timed_out)), (504, Some(1)));
    assert_eq!(stripe_error(&timed_out), ("api_error".into(), "upstream-timeout".into()));
    let held = g.post("/orders", Some("s"), "{}", &slow).await;
    assert_eq!(held.status, 409);
    assert!(retry_after(&held).is_some(), "Retry-After kept");
    assert_eq!(stripe_error(&held), ("idempotency_error".into(), "request-in-flight".into()));
    let reused = g.post("/orders", Some("s"), r#"{"amount":2}"#, &slow).await;
    assert_eq!(reused.status, 422);
    assert_eq!(stripe_error(&reused), ("idempotency_error".into(), "idempotency-key-reused".into()));
    let missing = g.post("/orders", None, "{}", &[]).await;
    assert_eq!(missing.status, 400);
    assert_eq!(stripe_error(&missing), ("invalid_request_error".into(), "missing-idempotency-key".into()));

    assert_eq!(g.post("/status/201", Some("p"), "{}", &[]).await.status, 201);
    let other_route = g.post("/status/201", Some("p"), r#"{"amount":2}"#, &[]).await;
    assert_eq!(other_route.status, 422);
    assert_eq!(problem_type(&other_route), "urn:idem:problem:idempotency-key-reused");

    let answered = once_answered(&g, "/orders", "s", "{}", &slow).await;
    assert!(answered.status == 201 && replayed(&answered), "{}", String::from_utf8_lossy(&answered.body));
    assert_eq!(answered.json()["order_id"], 1, "the upstream's own body");
    assert_eq!(g.upstream.count("/orders"), 1);
    g.server.stop().await;
}

/// `[gateway] errors = "stripe"` with an upstream that is down: a route that sets nothing and a
/// request on no route answer 502 in Stripe's shape; a route that says `problem` keeps it.
#[tokio::test]
async fn the_gateways_errors_is_every_routes_that_sets_none() {
    let g = gateway_with(
        |routes| routes.push(route("/status/{code}")),
        |c| {
            c.upstream = UpstreamUrl::parse("http://127.0.0.1:9").expect("URL");
            c.errors = Some(ErrorStyle::Stripe);
            // As a route written without `errors` reads: the gateway's.
            c.routes[0].2 = None;
        },
    )
    .await;
    let inherited = g.post("/orders", Some("k"), "{}", &[]).await;
    assert_eq!(inherited.status, 502);
    assert_eq!(stripe_error(&inherited), ("api_error".into(), "upstream-unavailable".into()));
    let own = g.post("/status/201", Some("k"), "{}", &[]).await;
    assert_eq!((own.status.as_u16(), problem_type(&own).as_str()), (502, "urn:idem:problem:upstream-unavailable"));
    let unrouted = g.client.send_with(Method::GET, "/plain", None, &[]).await.expect("request");
    assert_eq!(unrouted.status, 502);
    assert_eq!(stripe_error(&unrouted), ("api_error".into(), "upstream-unavailable".into()));
    g.server.stop().await;
}

/// How a raw upstream answers each request it reads (and counts).
#[derive(Clone, Copy)]
enum Raw {
    /// `201` promising 1,000 bytes, then 10 of them, then the connection closes.
    BodyBreaks,
    /// The connection closes once the request was read, before any answer.
    ClosesAfterRequest,
    /// Reads the request and never answers.
    Hangs,
}

/// An upstream on a raw socket that misbehaves as `how` says; answers its URL and its count of
/// requests read.
async fn raw_upstream(how: Raw) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // Headers, then the body its Content-Length promises (the tests send "{}").
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                seen.fetch_add(1, Ordering::SeqCst);
                match how {
                    Raw::BodyBreaks => {
                        let head =
                            b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n";
                        let _ = socket.write_all(head).await;
                        let _ = socket.write_all(b"{\"order\":1").await;
                    }
                    Raw::ClosesAfterRequest => {}
                    Raw::Hangs => std::future::pending::<()>().await,
                }
            });
        }
    });
    (url, count)
}

/// A route on `path` in front of a raw upstream.
async fn raw_gateway(
    path: &str,
    how: Raw,
    edit: impl FnOnce(&mut RoutePolicy),
) -> (Gateway, Arc<std::sync::atomic::AtomicUsize>) {
    let (url, count) = raw_upstream(how).await;
    let path = path.to_owned();
    let g = gateway_with(
        |routes| {
            let mut policy = RoutePolicy { key: KeyPolicy::Required, ..route(&path) };
            edit(&mut policy);
            routes[0] = policy;
        },
        |c| c.upstream = UpstreamUrl::parse(&url).expect("URL"),
    )
    .await;
    (g, count)
}

/// The upstream answered `201` and its body broke off after 10 of 1,000 promised bytes: it has
/// acted. The key is not given up: the client gets a `502` saying the outcome is unknown, and every
/// retry gets the same `502` replayed; the upstream saw the key once (it saw it 7 times when the
/// key was released: #39).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_breaks_after_its_status_keeps_the_key_and_no_retry_runs_it_again() {
    let (g, count) = raw_gateway("/orders", Raw::BodyBreaks, |_| {}).await;
    let first = g.post("/orders", Some("broken"), "{}", &[]).await;
    assert_eq!(first.status, 502, "{}", String::from_utf8_lossy(&first.body));
    assert_eq!(problem_type(&first), "urn:idem:problem:upstream-outcome-unknown");
    let detail = first.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("after it answered 201"), "{detail}");
    for _ in 0..5 {
        let retry = g.post("/orders", Some("broken"), "{}", &[]).await;
        assert_eq!((retry.status.as_u16(), replayed(&retry)), (502, true), "the retry is answered the same");
        assert_eq!(retry.body, first.body);
    }
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1, "the upstream ran the key once");
    g.server.stop().await;
}

/// The request was sent and the connection closed before any answer: the upstream may have acted.
/// The key keeps a `502` (outcome unknown) and a retry does not run it again; an upstream that
/// could not be reached at all releases the key (`an_unreachable_upstream_is_502_and_releases_the_key`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_breaks_after_the_request_was_sent_keeps_the_key() {
    let (g, count) = raw_gateway("/orders", Raw::ClosesAfterRequest, |_| {}).await;
    let first = g.post("/orders", Some("sent"), "{}", &[]).await;
    assert_eq!(first.status, 502, "{}", String::from_utf8_lossy(&first.body));
    assert_eq!(problem_type(&first), "urn:idem:problem:upstream-outcome-unknown");
    let retry = g.post("/orders", Some("sent"), "{}", &[]).await;
    assert_eq!((retry.status.as_u16(), replayed(&retry)), (502, true));
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1, "the upstream saw the request once");
    g.server.stop().await;
}

/// An upstream that never answers: the client gets `504` at `upstream_timeout`, the call runs on in
/// the background with its lease extended, and at `max_call` it is abandoned: the key is left to its
/// lease (no longer extended), `409` until it ends, then a retry runs again. Counted as
/// `outcome="max_call"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_hangs_is_abandoned_at_max_call_and_its_key_left_to_its_lease() {
    let (g, count) = raw_gateway("/hang", Raw::Hangs, |r| {
        *r = RoutePolicy {
            upstream_timeout: Duration::from_millis(500),
            max_call: Duration::from_millis(1500),
            ..r.clone().with_lease(Duration::from_secs(2))
        }
    })
    .await;
    let start = Instant::now();
    let first = g.post("/hang", Some("hung"), "{}", &[]).await;
    assert_eq!(first.status, 504);
    assert!(start.elapsed() < Duration::from_millis(1400), "answered at upstream_timeout");
    // At 1 s the lease (2 s) was extended to 3 s; the call is abandoned at 1.5 s.
    tokio::time::sleep_until((start + Duration::from_millis(2000)).into()).await;
    let series = r#"idem_gateway_background_calls_total{route="/hang",outcome="max_call"}"#;
    assert_eq!(crate::support::metric(&g.server.client, series).await, 1.0);
    assert_eq!(g.post("/hang", Some("hung"), "{}", &[]).await.status, 409, "held until the lease ends");
    tokio::time::sleep_until((start + Duration::from_millis(3200)).into()).await;
    let retry = g.post("/hang", Some("hung"), "{}", &[]).await;
    assert_eq!(retry.status, 504, "the lease ended: the retry runs the request again");
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 2);
    g.server.stop().await;
}
