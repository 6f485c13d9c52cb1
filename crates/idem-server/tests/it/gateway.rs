//! The Idempotency-Key gateway in front of a real upstream on a real socket that counts what it
//! receives: one test per row of the contract's table, and races of hundreds of requests.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use idem_core::SystemClock;
use idem_core::gateway::{InFlightPolicy, KeyPolicy};
use idem_gateway::RoutePolicy;
use idem_server::cli::client::{ApiClient, Reply};
use idem_server::config::{GatewayConfig, Route, Upstream as UpstreamUrl};
use serde_json::json;

use crate::support::TestServer;
use crate::support::upstream::Upstream;

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
        routes: list.into_iter().map(Route::from).collect(),
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
            let headers = [("content-type", "application/json"), ("idempotency-key", "slow")];
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
                let headers = [("content-type", "application/json"), ("idempotency-key", "raced")];
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
                let headers = [("content-type", "application/json"), ("idempotency-key", key.as_str())];
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_upstream_keeps_the_key_until_the_lease_ends() {
    let lease = Duration::from_millis(400);
    let g = gateway(|routes| routes[0].lease = lease).await;
    let hung = g.post("/orders?delay_ms=3000", Some("h"), "{}", &[]).await;
    assert_eq!(hung.status, 504, "the upstream did not answer within the lease");
    assert_eq!(problem_type(&hung), "urn:idem:problem:upstream-timeout");
    assert_eq!(g.upstream.count("/orders"), 1);
    // The lease has just ended with the 504: the key is free again, and a retry executes.
    let retry = g.post("/orders", Some("h"), "{}", &[]).await;
    assert_eq!(retry.status, 201);
    assert_eq!(g.upstream.count("/orders"), 2);
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
            let headers = [("content-type", "text/plain"), ("idempotency-key", "t")];
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
