//! Event intake and receipts over HTTP: every bad input gets its 4xx and stores nothing;
//! receipts read, list and replay; and the real binary killed mid-delivery delivers every event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use idem_core::SystemClock;
use idem_core::event::{SigningSecret, sign};
use idem_server::cli::client::ApiClient;
use idem_server::config::SourceConfig;
use serde_json::json;

use crate::support::binary::Idem;
use crate::support::receiver::Receiver;
use crate::support::{TestServer, assert_problem};

type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, u16);

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A source named `name`, with `extra` config lines; its backoff is 50 ms unless `extra` sets one.
fn source(name: &str, handler: &str, extra: &str) -> SourceConfig {
    let backoff = if extra.contains("backoff") { "" } else { "backoff = [\"50ms\"]\n" };
    toml::from_str(&format!(
        "name = \"{name}\"\nhandler_url = \"{handler}\"\nevent_id = \"/external_event_id\"\nsigning_secret = \"{SECRET}\"\n\
         {backoff}{extra}"
    ))
    .expect("source config")
}

/// Sends one JSON event to `partner` and polls its receipt until it is `status`; `meanwhile` sees
/// every earlier answer.
async fn until_status(s: &TestServer, status: &str, meanwhile: impl Fn(&serde_json::Value)) -> serde_json::Value {
    let json = [("content-type", "application/json")];
    let reply = post(&s.client, "/v1/sources/partner/events", r#"{"external_event_id":"e1"}"#, &json).await;
    let id = reply.json()["receipt_id"].as_str().expect("id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let receipt = s.expect(Method::GET, &format!("/v1/receipts/{id}"), None, 200).await;
        if receipt["status"] == status {
            return receipt;
        }
        meanwhile(&receipt);
        assert!(Instant::now() < deadline, "never {status}: {receipt}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn post(client: &ApiClient, path: &str, body: &str, headers: &[(&str, &str)]) -> idem_server::cli::client::Reply {
    client.send_with(Method::POST, path, Some(Bytes::from(body.to_owned())), headers).await.expect("request")
}

#[tokio::test]
async fn bad_intake_gets_its_4xx_and_stores_nothing() {
    let receiver = Receiver::start(Duration::ZERO).await;
    let url = receiver.url.clone();
    let verified = source("signed", &url, &format!("verify_secret = \"{SECRET}\""));
    let by_header: SourceConfig = toml::from_str(&format!(
        "name = \"keyed\"\nhandler_url = \"{url}\"\nevent_id = \"header:Idempotency-Key\"\nsigning_secret = \"{SECRET}\"\n"
    ))
    .expect("config");
    let s = TestServer::start_with(
        |c| c.sources = vec![source("partner", &url, ""), verified, by_header],
        Arc::new(SystemClock),
    )
    .await;
    let json = [("content-type", "application/json")];
    // (path, body, headers, status)
    let cases: Vec<Case> = vec![
        ("/v1/sources/nobody/events", r#"{"external_event_id":"e1"}"#, json.to_vec(), 404),
        ("/v1/sources/partner/events", "not json", json.to_vec(), 400),
        ("/v1/sources/partner/events", r#"{"other":"e1"}"#, json.to_vec(), 400),
        ("/v1/sources/partner/events", r#"{"external_event_id":{"nested":1}}"#, json.to_vec(), 400),
        ("/v1/sources/partner/events", r#"{"external_event_id":""}"#, json.to_vec(), 400),
        ("/v1/sources/keyed/events", "{}", json.to_vec(), 400),
        ("/v1/sources/signed/events", r#"{"external_event_id":"e1"}"#, json.to_vec(), 401),
    ];
    for (path, body, headers, status) in &cases {
        let reply = post(&s.client, path, body, headers).await;
        assert_problem(&reply, *status, &format!("{path} {body}"));
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64;
    let secret = SigningSecret::parse(SECRET).expect("secret");
    let body = r#"{"external_event_id":"e1"}"#;
    for (ts, sig_body) in [(now - 600, body), (now, r#"{"external_event_id":"e2"}"#)] {
        let sig = sign(&secret, "msg_1", ts, sig_body.as_bytes());
        let ts = ts.to_string();
        let headers = [
            ("content-type", "application/json"),
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", ts.as_str()),
            ("webhook-signature", sig.as_str()),
        ];
        assert_problem(
            &post(&s.client, "/v1/sources/signed/events", body, &headers).await,
            401,
            "stale or forged signature",
        );
    }
    let listed = s.expect(Method::GET, "/v1/receipts?limit=1000", None, 200).await;
    assert_eq!(listed["receipts"].as_array().map(Vec::len), Some(0), "nothing was stored");

    let sig = sign(&secret, "msg_1", now, body.as_bytes());
    let now = now.to_string();
    let headers = [
        ("content-type", "application/json"),
        ("webhook-id", "msg_1"),
        ("webhook-timestamp", now.as_str()),
        ("webhook-signature", sig.as_str()),
    ];
    assert_eq!(
        post(&s.client, "/v1/sources/signed/events", body, &headers).await.status,
        202,
        "a good signature is accepted"
    );
    assert_eq!(
        post(&s.client, "/v1/sources/keyed/events", "raw bytes", &[("idempotency-key", "k-1")]).await.status,
        202
    );
    s.stop().await;
}

#[tokio::test]
async fn intake_answers_202_then_200_then_409_and_receipts_tell_the_story() {
    let receiver = Receiver::start(Duration::ZERO).await;
    let s =
        TestServer::start_with(|c| c.sources = vec![source("partner", &receiver.url, "")], Arc::new(SystemClock)).await;
    let json = [("content-type", "application/json")];
    let first = post(&s.client, "/v1/sources/partner/events", r#"{"external_event_id":"e1","amount":5}"#, &json).await;
    assert_eq!(first.status, 202);
    let receipt = first.json()["receipt_id"].as_str().expect("receipt id").to_owned();
    assert_eq!(first.json()["replay"], false);
    let again = post(&s.client, "/v1/sources/partner/events", r#"{"external_event_id":"e1","amount":5}"#, &json).await;
    assert_eq!(
        (again.status.as_u16(), again.json()["receipt_id"].as_str(), again.json()["replay"].as_bool()),
        (200, Some(receipt.as_str()), Some(true))
    );
    assert!(first.headers.get("idempotent-replayed").is_none(), "a new event is no replay");
    assert_eq!(again.headers.get("idempotent-replayed").and_then(|v| v.to_str().ok()), Some("true"));
    let other = post(&s.client, "/v1/sources/partner/events", r#"{"external_event_id":"e1","amount":6}"#, &json).await;
    assert_problem(&other, 409, "same id, other payload");

    let deadline = Instant::now() + Duration::from_secs(10);
    let done = loop {
        let r = s.expect(Method::GET, &format!("/v1/receipts/{receipt}"), None, 200).await;
        if r["status"] == "completed" || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(done["status"], "completed");
    assert_eq!(done["attempts"][0]["status_code"], 200);
    assert_eq!(done["attempts"][0]["n"], 1);
    assert_eq!(
        receiver.ids.lock().expect("lock").as_slice(),
        std::slice::from_ref(&receipt),
        "delivered once, webhook-id = receipt id"
    );
    let replayed = s.expect(Method::POST, &format!("/v1/receipts/{receipt}/replay"), None, 202).await;
    assert_eq!(
        replayed,
        json!({"receipt_id": receipt, "status": "accepted", "replayed": true}),
        "named for what it did"
    );
    let again = s.client.send(Method::POST, &format!("/v1/receipts/{receipt}/replay"), None).await.expect("replay");
    if again.status == 409 {
        let detail = assert_problem(&again, 409, "a replay while it is being delivered")["detail"].clone();
        assert!(detail.as_str().is_some_and(|d| d.contains("still being delivered") && !d.contains(" ;")), "{detail}");
    }
    s.expect(Method::GET, "/v1/receipts/rcpt_000000000000000000000000000000000000", None, 404).await;
    assert_problem(
        &s.client.send(Method::GET, "/v1/receipts?status=lost", None).await.expect("request"),
        400,
        "bad status filter",
    );
    assert_problem(
        &s.client.send(Method::GET, "/v1/receipts/not-a-receipt", None).await.expect("request"),
        400,
        "bad id",
    );
    s.stop().await;
}

/// The real binary takes 300 events, is killed with SIGKILL while delivering them to a slow
/// handler, and restarts: every accepted event is delivered at least once, and all complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_delivery_loses_no_accepted_event() {
    let receiver = Receiver::start(Duration::from_millis(20)).await;
    let handler_url = receiver.url.clone();

    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("idem.toml");
    std::fs::write(
        &config,
        format!(
            "[[sources]]\nname = \"partner\"\nhandler_url = \"{handler_url}\"\nevent_id = \"/external_event_id\"\n\
             signing_secret = \"{SECRET}\"\nattempt_timeout = \"2s\"\nbackoff = [\"50ms\"]\nmax_attempts = 10\nconcurrency = 4\n"
        ),
    )
    .expect("write config");
    let data = dir.path().join("data");
    let args = ["--config", config.to_str().expect("utf-8")];
    let mut idem = Idem::serve(&data, &args);
    let client = ApiClient::new(&idem.url, None).expect("client");
    let mut receipts = Vec::new();
    for n in 0..300 {
        let body = format!("{{\"external_event_id\":\"evt-{n}\"}}");
        let reply = post(&client, "/v1/sources/partner/events", &body, &[("content-type", "application/json")]).await;
        assert_eq!(reply.status, 202);
        receipts.push(reply.json()["receipt_id"].as_str().expect("id").to_owned());
    }
    while receiver.distinct().len() < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    idem.kill9();
    assert!(receiver.distinct().len() < 300, "killed mid-delivery");

    // What the killed process had leased waits for its lease (attempt_timeout + the same again);
    // everything else is delivered by the restarted process at once. In the end: all of it.
    let idem = Idem::serve(&data, &args);
    let client = ApiClient::new(&idem.url, None).expect("client");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = client.send(Method::GET, "/v1/receipts?limit=1000", None).await.expect("list").json();
        let all = page["receipts"].as_array().cloned().unwrap_or_default();
        assert_eq!(all.len(), 300, "every accepted receipt survived the kill");
        let open = all.iter().filter(|r| r["status"] != "completed").count();
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} receipts did not complete after the restart");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let delivered = receiver.distinct();
    let missing: Vec<_> = receipts.iter().filter(|r| !delivered.contains(*r)).collect();
    assert!(missing.is_empty(), "accepted events never delivered: {missing:?}");
}

/// Intake reads its body under `limits.max_body_bytes` like every other call: a 3 MB event is
/// accepted under a 10 MiB limit (no hidden 2 MiB default first), and over the limit the answer is
/// a problem+json 413 naming the setting, with nothing stored.
#[tokio::test]
async fn event_bodies_follow_limits_max_body_bytes() {
    let receiver = Receiver::start(Duration::ZERO).await;
    let url = receiver.url.clone();
    let big = |n: usize| format!(r#"{{"external_event_id":"big-{n}","pad":"{}"}}"#, "x".repeat(n));
    let json = [("content-type", "application/json")];
    let roomy = TestServer::start_with(
        |c| {
            c.limits.max_body_bytes = 10 << 20;
            c.sources = vec![source("partner", &url, "")];
        },
        Arc::new(SystemClock),
    )
    .await;
    let reply = post(&roomy.client, "/v1/sources/partner/events", &big(3_000_000), &json).await;
    assert_eq!(reply.status, 202, "3 MB under a 10 MiB limit: {:?}", reply.json());
    roomy.stop().await;

    let tight = TestServer::start_with(|c| c.sources = vec![source("partner", &url, "")], Arc::new(SystemClock)).await;
    let reply = post(&tight.client, "/v1/sources/partner/events", &big(1_100_000), &json).await;
    let problem = assert_problem(&reply, 413, "an event over the default 1 MiB");
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains("limits.max_body_bytes")), "{problem}");
    let listed = tight.expect(Method::GET, "/v1/receipts", None, 200).await;
    assert_eq!(listed["receipts"].as_array().map(Vec::len), Some(0), "nothing was stored");
    let claim = json!({"key": "k", "data": "x".repeat(1_100_000)});
    let reply = tight.client.send(Method::POST, "/v1/claims/ns", Some(&claim)).await.expect("request");
    let claims_problem = assert_problem(&reply, 413, "a claim over the limit");
    assert_eq!(claims_problem["detail"], problem["detail"], "one limit, one message");
    tight.stop().await;
}

/// A handler that keeps connections alive and answers `204` with a body (as the partner example's
/// handler once did) leaves bytes on each connection that would be read as the next answer: the
/// next delivery on it fails after the handler got it, and is delivered again. Once idem has seen
/// one such answer, that source's connections are not reused: every later event is delivered once,
/// in one attempt. (Deliveries already in flight at that moment may still meet a corrupted
/// connection; the first event settles it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_answering_204_with_a_body_gets_each_event_once() {
    use std::collections::HashMap;
    use std::sync::{Arc as StdArc, Mutex};
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let handler = format!("http://{}/handle", listener.local_addr().expect("addr"));
    let seen: StdArc<Mutex<HashMap<String, usize>>> = StdArc::default();
    let counts = StdArc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counts = StdArc::clone(&counts);
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut read = BufReader::new(read);
                loop {
                    let (mut length, mut id) = (0usize, String::new());
                    loop {
                        let mut line = String::new();
                        if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if let Some(v) = lower.strip_prefix("webhook-id:") {
                            id = v.trim().to_owned();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    if read.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    *counts.lock().expect("lock").entry(id).or_default() += 1;
                    // As Python's http.server does: the head, then (separately, a moment later) the body.
                    let head = b"HTTP/1.1 204 No Content\r\nContent-Length: 13\r\n\r\n";
                    if write.write_all(head).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    if write.write_all(b"{\"ok\": true}\n").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let s = TestServer::start_with(
        |c| c.sources = vec![source("partner", &handler, "concurrency = 4")],
        Arc::new(SystemClock),
    )
    .await;
    let json = [("content-type", "application/json")];
    let first = post(&s.client, "/v1/sources/partner/events", r#"{"external_event_id":"first"}"#, &json).await;
    let first = first.json()["receipt_id"].as_str().expect("id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.expect(Method::GET, &format!("/v1/receipts/{first}"), None, 200).await["status"] != "completed" {
        assert!(Instant::now() < deadline, "the first event was never delivered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen.lock().expect("lock").clear();
    let mut receipts = Vec::new();
    for n in 0..60 {
        let reply =
            post(&s.client, "/v1/sources/partner/events", &format!(r#"{{"external_event_id":"e{n}"}}"#), &json).await;
        assert_eq!(reply.status, 202);
        receipts.push(reply.json()["receipt_id"].as_str().expect("id").to_owned());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in &receipts {
        loop {
            let receipt = s.expect(Method::GET, &format!("/v1/receipts/{id}"), None, 200).await;
            if receipt["status"] == "completed" {
                assert_eq!(receipt["attempts"].as_array().map(Vec::len), Some(1), "one attempt: {receipt}");
                break;
            }
            assert!(Instant::now() < deadline, "not completed: {receipt}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 60, "every event reached the handler");
    assert!(seen.values().all(|&n| n == 1), "none twice: {seen:?}");
    s.stop().await;
}

/// A slow handler with room for one delivery at a time: idem leases only what it can start, so no
/// event waits for a slot while its lease runs out, and each is delivered once, in one attempt.
/// (Before, 64 jobs were leased at once; those that waited past their lease had their results
/// refused and were delivered again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_handler_at_its_concurrency_gets_each_event_once() {
    let handler = Receiver::start(Duration::from_millis(500)).await;
    let s = TestServer::start_with(
        |c| c.sources = vec![source("slow", &handler.url, "concurrency = 1\nattempt_timeout = \"1s\"")],
        Arc::new(SystemClock),
    )
    .await;
    let json = [("content-type", "application/json")];
    for n in 0..6 {
        let reply =
            post(&s.client, "/v1/sources/slow/events", &format!(r#"{{"external_event_id":"s{n}"}}"#), &json).await;
        assert_eq!(reply.status, 202);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = s.expect(Method::GET, "/v1/receipts?limit=100&status=completed", None, 200).await;
        let done = page["receipts"].as_array().map_or(0, Vec::len);
        if done == 6 {
            break;
        }
        assert!(Instant::now() < deadline, "{done} of 6 completed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ids = handler.ids.lock().expect("lock").clone();
    assert_eq!(ids.len(), 6, "each event delivered once: {ids:?}");
    assert_eq!(handler.distinct().len(), 6);
    let page = s.expect(Method::GET, "/v1/receipts?limit=100", None, 200).await;
    for receipt in page["receipts"].as_array().expect("receipts") {
        let id = receipt["id"].as_str().expect("id");
        let whole = s.expect(Method::GET, &format!("/v1/receipts/{id}"), None, 200).await;
        assert_eq!(whole["attempts"].as_array().map(Vec::len), Some(1), "one attempt: {whole}");
    }
    s.stop().await;
}

/// A store that leases more jobs than asked (PostgreSQL did on some plans: #42) still has each
/// event delivered at once, and once: the worker releases the jobs beyond its tickets rather than
/// leave them leased and unattempted for a whole lease (30 s here), and its count of the room left
/// does not go below zero when a lease brings more than the 64 it asks for at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_leased_beyond_what_was_asked_are_delivered_at_once() {
    use crate::support::over_leasing::OverLeasing;
    let handler = Receiver::start(Duration::ZERO).await;
    let store = Arc::new(std::sync::OnceLock::<Arc<OverLeasing>>::new());
    let slot = Arc::clone(&store);
    let s = TestServer::start_wrapping_events(
        move |inner| {
            let over = Arc::new(OverLeasing::new(inner));
            let _ = slot.set(Arc::clone(&over));
            over
        },
        |c| c.sources = vec![source("burst", &handler.url, "concurrency = 2\nattempt_timeout = \"10s\"")],
    )
    .await;
    let json = [("content-type", "application/json")];
    for n in 0..100 {
        let body = format!(r#"{{"external_event_id":"b{n}"}}"#);
        assert_eq!(post(&s.client, "/v1/sources/burst/events", &body, &json).await.status, 202);
    }
    let store = store.get().expect("the server wrapped its event store");
    store.open();
    let deadline = Instant::now() + Duration::from_secs(15);
    while handler.distinct().len() < 100 {
        let leased = s.expect(Method::GET, "/v1/receipts?limit=1000&status=processing", None, 200).await;
        let waiting = leased["receipts"].as_array().map_or(0, Vec::len);
        assert!(Instant::now() < deadline, "{} of 100 delivered, {waiting} leased", handler.distinct().len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(store.beyond.load(std::sync::atomic::Ordering::SeqCst) > 0, "the store did lease beyond the tickets");
    until_count(&s, "source=burst&status=completed", 100).await;
    assert_eq!(handler.ids.lock().expect("lock").len(), 100, "each event delivered once");
    s.stop().await;
}

/// A failed attempt records why, all of it: which address refused the connection.
#[tokio::test]
async fn a_refused_connection_is_recorded_with_its_cause_and_address() {
    let port = crate::support::binary::free_port();
    let handler = format!("http://127.0.0.1:{port}/handle");
    let s = TestServer::start_with(
        |c| c.sources = vec![source("partner", &handler, "max_attempts = 1")],
        Arc::new(SystemClock),
    )
    .await;
    let receipt = until_status(&s, "dead", |_| {}).await;
    let error = receipt["attempts"][0]["error"].as_str().expect("an error").to_owned();
    assert!(error.contains(&format!("could not connect to 127.0.0.1:{port}")), "{error}");
    assert!(error.to_ascii_lowercase().contains("connection refused"), "{error}");
    s.stop().await;
}

/// A receipt waiting for its next attempt says when that is, in the API and on its dashboard
/// page: the end of the failed attempt plus the source's backoff.
#[tokio::test]
async fn a_retrying_receipt_says_when_its_next_attempt_is_due() {
    let handler = format!("http://127.0.0.1:{}/handle", crate::support::binary::free_port());
    let s = TestServer::start_with(
        |c| c.sources = vec![source("partner", &handler, "backoff = [\"1h\"]\nmax_attempts = 3")],
        Arc::new(SystemClock),
    )
    .await;
    let receipt = until_status(&s, "retrying", |earlier| {
        assert!(earlier.get("next_attempt_at").is_none(), "only while retrying: {earlier}");
    })
    .await;
    let id = receipt["id"].as_str().expect("id").to_owned();
    let at = |field: &serde_json::Value| {
        idem_core::Timestamp::parse_rfc3339(field.as_str().expect("a time")).expect("RFC 3339").millis()
    };
    let first = &receipt["attempts"][0];
    let ended = at(&first["started_at"]) + first["duration_ms"].as_i64().expect("duration");
    let due = at(&receipt["next_attempt_at"]) - ended;
    assert!((3_599_000..=3_601_000).contains(&due), "due {due} ms after the attempt ended: {receipt}");
    let page = s.client.send(Method::GET, &format!("/ui/receipts/{id}"), None).await.expect("page");
    let page = String::from_utf8_lossy(&page.body).into_owned();
    assert!(page.contains(r#"data-testid="next-attempt""#) && page.contains("Attempt 2"), "{page}");
    let list = s.client.send(Method::GET, "/ui/receipts?status=retrying", None).await.expect("list");
    let list = String::from_utf8_lossy(&list.body).into_owned();
    assert!(list.contains(r#"data-testid="next-attempt">next in 59 min"#) || list.contains("next in 1 h"), "{list}");
    let listed = s.expect(Method::GET, "/v1/receipts?status=retrying", None, 200).await;
    assert_eq!(listed["receipts"][0]["next_attempt_at"], receipt["next_attempt_at"], "listings say it too");
    s.stop().await;
}

/// Waits until the receipts matching `query` number `n`.
async fn until_count(s: &TestServer, query: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let page = s.expect(Method::GET, &format!("/v1/receipts?limit=1000&{query}"), None, 200).await;
        let found = page["receipts"].as_array().map_or(0, Vec::len);
        if found == n {
            return;
        }
        assert!(Instant::now() < deadline, "{query}: {found} receipts, waiting for {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Contract §6 over HTTP: the event in its receipt, canonical JSON on intake, bulk replay with a
/// dry run first, discard, and a clear 400 for every bad filter.
#[tokio::test]
async fn dead_letters_are_counted_replayed_in_bulk_and_discarded() {
    let receiver = Receiver::start(Duration::ZERO).await;
    // Nothing listens on port 9 of loopback: every delivery to `broken` is refused, and dies.
    let s = TestServer::start_with(
        |c| {
            c.sources =
                vec![source("broken", "http://127.0.0.1:9/hook", "max_attempts = 1"), source("fine", &receiver.url, "")]
        },
        Arc::new(SystemClock),
    )
    .await;
    let json = [("content-type", "application/json")];
    for i in 0..30 {
        let body = format!(r#"{{"external_event_id":"d{i}","n":{i}}}"#);
        assert_eq!(post(&s.client, "/v1/sources/broken/events", &body, &json).await.status, 202);
    }
    let fine = post(&s.client, "/v1/sources/fine/events", r#"{"external_event_id":"f1","z":1,"a":[1,2]}"#, &json).await;
    let fine_id = fine.json()["receipt_id"].as_str().expect("id").to_owned();
    let reordered =
        post(&s.client, "/v1/sources/fine/events", "{\"a\": [1, 2],\n \"z\": 1, \"external_event_id\": \"f1\"}", &json)
            .await;
    assert_eq!(
        (reordered.status.as_u16(), reordered.json()["replay"].as_bool()),
        (200, Some(true)),
        "keys reordered: a resend"
    );
    until_count(&s, "source=broken&status=dead", 30).await;
    until_count(&s, "source=fine&status=completed", 1).await;

    let receipt = s.expect(Method::GET, &format!("/v1/receipts/{fine_id}"), None, 200).await;
    assert_eq!(receipt["body"], json!({"external_event_id": "f1", "z": 1, "a": [1, 2]}), "the event, as JSON");
    assert_eq!(receipt["content_type"], "application/json");
    let listed = s.expect(Method::GET, "/v1/receipts?source=fine", None, 200).await;
    assert!(listed["receipts"][0].get("body").is_none(), "listings leave bodies out");

    let dry =
        s.expect(Method::POST, "/v1/receipts/replay", Some(json!({"source": "broken", "dry_run": true})), 200).await;
    assert_eq!(dry, json!({"matching": 30}), "status defaults to dead");
    let one =
        s.expect(Method::POST, "/v1/receipts/replay", Some(json!({"event_id": "d7", "dry_run": true})), 200).await;
    assert_eq!(one, json!({"matching": 1}));
    let (replays_before, discards_before) =
        (counter(&s, "idem_receipt_replays_total").await, counter(&s, "idem_receipt_discards_total").await);
    let queued = s.expect(Method::POST, "/v1/receipts/replay", Some(json!({"source": "broken"})), 202).await;
    assert_eq!(queued, json!({"queued": 30}));
    until_count(&s, "source=broken&status=dead", 30).await;
    let page = s.expect(Method::GET, "/v1/receipts?source=broken&event_id=d3", None, 200).await;
    let d3 = page["receipts"][0]["id"].as_str().expect("d3").to_owned();
    assert_eq!(page["receipts"][0]["round"], 2, "delivered again from attempt 1");

    let discarded = s.expect(Method::POST, &format!("/v1/receipts/{d3}/discard"), None, 200).await;
    assert_eq!(discarded, json!({"receipt_id": d3, "status": "discarded"}));
    s.expect(Method::POST, &format!("/v1/receipts/{d3}/discard"), None, 200).await;
    let dry = s.expect(Method::POST, "/v1/receipts/replay", Some(json!({"dry_run": true})), 200).await;
    assert_eq!(dry, json!({"matching": 29}), "a discarded receipt leaves the dead letters");
    let not_dead = s.client.send(Method::POST, &format!("/v1/receipts/{fine_id}/discard"), None).await.expect("send");
    assert_problem(&not_dead, 409, "only dead receipts are discarded");
    s.expect(Method::POST, "/v1/receipts/rcpt_000000000000000000000000000000000000/discard", None, 404).await;

    for (bad, why) in [
        (json!({"status": "processing"}), "not an ended status"),
        (json!({"status": "lost"}), "unknown status"),
        (json!({"created_before": "yesterday"}), "not RFC 3339"),
        (json!({"source": "no such/source"}), "bad source"),
        (json!({"sauce": "broken"}), "unknown field"),
    ] {
        let r = s.client.send(Method::POST, "/v1/receipts/replay", Some(&bad)).await.expect("send");
        assert_problem(&r, 400, why);
    }
    // The recorder is the process's: other tests running beside this one may add to it too.
    assert!(counter(&s, "idem_receipt_replays_total").await - replays_before >= 30.0, "bulk replays are counted");
    assert!(counter(&s, "idem_receipt_discards_total").await - discards_before >= 1.0, "the discard is counted");
    s.stop().await;
}

async fn counter(s: &TestServer, name: &str) -> f64 {
    let metrics = s.client.send(Method::GET, "/metrics", None).await.expect("metrics");
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
}

/// Result webhooks say which round ended how (`round`, `attempts`, `last_error`), and each round's
/// has its own `webhook-id` (`<receipt>_result_<round>`): a handler that deduplicates on it, as it
/// should for deliveries, still gets the second round's `receipt.dead`. The receipt keeps every
/// round's attempts, each with its round (contract §12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_webhooks_tell_each_round_and_the_receipt_keeps_every_rounds_attempts() {
    let results: Arc<std::sync::Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
    let record = Arc::clone(&results);
    let app = axum::Router::new().route(
        "/results",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let record = Arc::clone(&record);
            async move {
                let id = headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                record.lock().expect("lock").push((id, serde_json::from_str(&body).expect("JSON")));
                http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let results_url = format!("http://{}/results", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let nobody = format!("http://127.0.0.1:{}/handle", crate::support::binary::free_port());
    let extra = format!(
        "max_attempts = 2\nbackoff = [\"50ms\"]\nresult_webhook_url = \"{results_url}\"\nresult_backoff = [\"50ms\"]\n"
    );
    let s =
        TestServer::start_with(|c| c.sources = vec![source("partner", &nobody, &extra)], Arc::new(SystemClock)).await;

    let dead = until_status(&s, "dead", |_| {}).await;
    let id = dead["id"].as_str().expect("id").to_owned();
    let wait_results = |n: usize| {
        let results = Arc::clone(&results);
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            while results.lock().expect("lock").len() < n {
                assert!(Instant::now() < deadline, "result webhook {n} never came");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    wait_results(1).await;
    s.post(&format!("/v1/receipts/{id}/replay"), json!({}), 202).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let receipt = s.expect(Method::GET, &format!("/v1/receipts/{id}"), None, 200).await;
        if receipt["status"] == "dead" && receipt["round"] == 2 {
            let rounds: Vec<(u64, u64)> = receipt["attempts"]
                .as_array()
                .expect("attempts")
                .iter()
                .map(|a| (a["round"].as_u64().expect("round"), a["n"].as_u64().expect("n")))
                .collect();
            assert_eq!(rounds, [(1, 1), (1, 2), (2, 1), (2, 2)], "every round's attempts: {receipt}");
            break;
        }
        assert!(Instant::now() < deadline, "never dead again: {receipt}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_results(2).await;
    let results = results.lock().expect("lock").clone();
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, [format!("{id}_result_1"), format!("{id}_result_2")], "one webhook-id per round");
    for (round, (_, body)) in results.iter().enumerate() {
        assert_eq!(body["type"], "receipt.dead");
        assert_eq!((body["round"].as_u64(), body["attempts"].as_u64()), (Some(round as u64 + 1), Some(2)));
        assert!(
            body["last_error"].as_str().is_some_and(|e| e.contains("connect")),
            "why the last attempt failed: {body}"
        );
        assert_eq!(body["last_status_code"], json!(null));
    }
    s.stop().await;
}
