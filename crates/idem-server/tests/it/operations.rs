//! The operations API over HTTP (docs/reference/api.md#operations): begin / complete / release /
//! extend / read / delete, fingerprints, leases and TTLs on a controlled clock, waiting woken by
//! completion, a race of 500 begins, and bad input that changes nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use idem_core::{ManualClock, SystemClock};
use serde_json::{Value, json};

use crate::support::{TestServer, assert_problem};

const START: idem_core::Timestamp = idem_core::Timestamp(1_767_225_600_000);

fn id(parts: &[&str]) -> String {
    idem_core::Parts::new(parts.iter().map(|s| s.to_string()).collect()).expect("valid").id().to_string()
}

async fn begin(s: &TestServer, ns: &str, body: Value) -> (u16, Value) {
    let reply = s.client.send(Method::POST, &format!("/v1/operations/{ns}/begin"), Some(&body)).await.expect("begin");
    (reply.status.as_u16(), reply.json())
}

async fn started(s: &TestServer, ns: &str, body: Value) -> Value {
    let (status, answer) = begin(s, ns, body).await;
    assert_eq!(status, 201, "{answer}");
    answer
}

#[tokio::test]
async fn work_runs_once_and_its_result_is_replayed() {
    let s = TestServer::start_with(|_| {}, Arc::new(ManualClock::new(START))).await;
    let charge = json!({"parts": ["order-7", "charge"], "request": {"amount": 500, "currency": "EUR"}});
    let first = started(&s, "payments", charge.clone()).await;
    assert_eq!(first["status"], "started");
    assert_eq!(first["id"], id(&["order-7", "charge"]), "the id is the key's claim id, computed locally by clients");
    assert_eq!(first["lease_expires_at"], "2026-01-01T00:01:00.000000Z", "default lease 60 s");
    let token = first["token"].as_str().expect("token").to_owned();
    let path = format!("/v1/operations/payments/{}", first["id"].as_str().expect("id"));

    let held = s.expect(Method::GET, &path, None, 200).await;
    assert_eq!(
        held,
        json!({"status": "in_progress", "id": first["id"], "lease_expires_at": first["lease_expires_at"]})
    );
    let reply = s.client.send(Method::POST, "/v1/operations/payments/begin", Some(&charge)).await.expect("begin");
    let problem = assert_problem(&reply, 409, "a second begin while held");
    assert_eq!(problem["type"], "urn:idem:problem:in-progress");
    assert_eq!(reply.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("60"));

    let result = json!({"charge_id": "ch_1", "amount": 500});
    let done = s.post(&format!("{path}/complete"), json!({"token": token, "result": result}), 200).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"], result);
    assert_eq!(done["completed_at"], "2026-01-01T00:00:00.000000Z");
    assert_eq!(done["expires_at"], "2026-01-02T00:00:00.000000Z", "default TTL 24 h from completion");
    let again = s.post(&format!("{path}/complete"), json!({"token": token, "result": {"other": 1}}), 200).await;
    assert_eq!(again["result"], result, "a second complete by the same token answers the stored result");

    let reordered = json!({"parts": ["order-7", "charge"], "request": {"currency": "EUR", "amount": 500}});
    let reply = s.client.send(Method::POST, "/v1/operations/payments/begin", Some(&reordered)).await.expect("begin");
    let replay = reply.json();
    assert_eq!(
        (reply.status.as_u16(), &replay["result"]),
        (200, &result),
        "the same request in another key order: {replay}"
    );
    let replayed = reply.headers.get("idempotent-replayed").and_then(|v| v.to_str().ok());
    assert_eq!(replayed, Some("true"), "a stored result is marked as the gateway marks its replays");
    let (status, _) = begin(&s, "payments", json!({"parts": ["order-7", "charge"]})).await;
    assert_eq!(status, 200, "a begin without request matches any");
    assert_eq!(s.expect(Method::GET, &path, None, 200).await, done);
    let stranger =
        s.client.send(Method::POST, &format!("{path}/complete"), Some(&json!({"token": "0".repeat(32)}))).await;
    assert_eq!(
        assert_problem(&stranger.expect("complete"), 409, "a stranger's token")["type"],
        "urn:idem:problem:lease-lost"
    );
    s.stop().await;
}

/// On the real clock, a begin's answer names the lease the store keeps, to the millisecond: not a
/// time worked out after the store's durable write returned (which ran later, by the write).
#[tokio::test]
async fn the_lease_a_begin_answers_is_the_lease_stored() {
    let s = TestServer::start_with(|_| {}, Arc::new(SystemClock)).await;
    for n in 0..20 {
        let first = started(&s, "jobs", json!({"key": format!("job-{n}"), "lease_seconds": 30})).await;
        let held = s
            .expect(Method::GET, &format!("/v1/operations/jobs/{}", first["id"].as_str().expect("id")), None, 200)
            .await;
        assert_eq!(held["lease_expires_at"], first["lease_expires_at"], "begin {n}");
    }
    s.stop().await;
}

#[tokio::test]
async fn another_request_is_422_whether_held_or_completed() {
    let s = TestServer::start().await;
    let key = |amount: u32| json!({"key": "refund-1", "request": {"amount": amount}});
    let token = started(&s, "refunds", key(10)).await["token"].clone();
    let reply = s.client.send(Method::POST, "/v1/operations/refunds/begin", Some(&key(11))).await.expect("begin");
    assert_eq!(assert_problem(&reply, 422, "held")["type"], "urn:idem:problem:fingerprint-mismatch");
    s.post(&format!("/v1/operations/refunds/{}/complete", id(&["refund-1"])), json!({"token": token}), 200).await;
    let reply = s.client.send(Method::POST, "/v1/operations/refunds/begin", Some(&key(11))).await.expect("begin");
    assert_eq!(assert_problem(&reply, 422, "completed")["type"], "urn:idem:problem:fingerprint-mismatch");
    let (status, answer) = begin(&s, "refunds", key(10)).await;
    assert_eq!((status, &answer["result"]), (200, &Value::Null), "completed without a result: {answer}");
    s.stop().await;
}

#[tokio::test]
async fn release_frees_the_key_and_only_the_holder_can_release_or_extend() {
    let clock = Arc::new(ManualClock::new(START));
    let s = TestServer::start_with(|_| {}, clock.clone()).await;
    let path = format!("/v1/operations/jobs/{}", id(&["nightly"]));
    let first = started(&s, "jobs", json!({"key": "nightly", "lease_seconds": 30})).await;
    let token = first["token"].as_str().expect("token").to_owned();
    clock.advance(Duration::from_secs(20));
    let extended = s.post(&format!("{path}/extend"), json!({"token": token, "lease_seconds": 120}), 200).await;
    assert_eq!(extended, json!({"lease_expires_at": "2026-01-01T00:02:20.000000Z"}));
    let wrong = json!({"token": "f".repeat(32)});
    for action in ["extend", "release"] {
        let reply = s.client.send(Method::POST, &format!("{path}/{action}"), Some(&wrong)).await.expect(action);
        assert_eq!(assert_problem(&reply, 409, action)["type"], "urn:idem:problem:lease-lost");
    }
    s.expect(Method::POST, &format!("{path}/release"), Some(json!({"token": token})), 204).await;
    assert_problem(&s.client.send(Method::GET, &path, None).await.expect("get"), 404, "released is absent");
    let reply = s.client.send(Method::POST, &format!("{path}/release"), Some(&json!({"token": token}))).await;
    assert_eq!(assert_problem(&reply.expect("release"), 409, "again")["type"], "urn:idem:problem:lease-lost");
    started(&s, "jobs", json!({"key": "nightly"})).await;
    s.stop().await;
}

#[tokio::test]
async fn an_ended_lease_frees_the_key_and_voids_the_old_token() {
    let clock = Arc::new(ManualClock::new(START));
    let s = TestServer::start_with(|_| {}, clock.clone()).await;
    let path = format!("/v1/operations/jobs/{}", id(&["sync"]));
    let old = started(&s, "jobs", json!({"key": "sync", "lease_seconds": 10})).await["token"].clone();
    clock.advance(Duration::from_secs(10));
    assert_problem(&s.client.send(Method::GET, &path, None).await.expect("get"), 404, "an ended lease is absent");
    let new = started(&s, "jobs", json!({"key": "sync"})).await["token"].clone();
    let late = s.client.send(Method::POST, &format!("{path}/complete"), Some(&json!({"token": old}))).await;
    assert_eq!(assert_problem(&late.expect("complete"), 409, "late")["type"], "urn:idem:problem:lease-lost");
    s.post(&format!("{path}/complete"), json!({"token": new, "result": "fresh"}), 200).await;
    assert_eq!(s.expect(Method::GET, &path, None, 200).await["result"], "fresh");
    s.stop().await;
}

#[tokio::test]
async fn results_expire_after_their_ttl_and_delete_forgets_them() {
    let clock = Arc::new(ManualClock::new(START));
    let configure = |c: &mut idem_server::Config| {
        let hour = idem_server::config::ConfigDuration(Duration::from_secs(3600));
        c.namespaces.insert("hourly".into(), idem_server::config::NamespaceConfig { default_ttl: Some(hour) });
    };
    let s = TestServer::start_with(configure, clock.clone()).await;
    let run = |ns: &'static str, key: &'static str, extra: Value| {
        let s = &s;
        async move {
            let mut body = json!({"key": key});
            body.as_object_mut().expect("object").extend(extra.as_object().cloned().unwrap_or_default());
            let token = started(s, ns, body).await["token"].clone();
            s.post(&format!("/v1/operations/{ns}/{}/complete", id(&[key])), json!({"token": token}), 200).await
        }
    };
    assert_eq!(
        run("hourly", "a", json!({})).await["expires_at"],
        "2026-01-01T01:00:00.000000Z",
        "the namespace's default"
    );
    assert_eq!(run("hourly", "b", json!({"ttl_seconds": 10})).await["expires_at"], "2026-01-01T00:00:10.000000Z");
    clock.advance(Duration::from_secs(10));
    let b = format!("/v1/operations/hourly/{}", id(&["b"]));
    assert_problem(&s.client.send(Method::GET, &b, None).await.expect("get"), 404, "expired");
    started(&s, "hourly", json!({"key": "b"})).await;
    let held = s.client.send(Method::DELETE, &b, None).await.expect("delete");
    assert_eq!(assert_problem(&held, 409, "a held key")["type"], "urn:idem:problem:in-progress");
    let a = format!("/v1/operations/hourly/{}", id(&["a"]));
    s.expect(Method::DELETE, &a, None, 204).await;
    assert_problem(&s.client.send(Method::DELETE, &a, None).await.expect("delete"), 404, "gone");
    started(&s, "hourly", json!({"key": "a"})).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_begin_is_woken_by_completion_or_takes_a_released_key() {
    let s = Arc::new(TestServer::start().await);
    for (action, expected) in [("complete", 200), ("release", 201)] {
        let key = format!("wait-{action}");
        let token = started(&s, "waits", json!({"key": key})).await["token"].clone();
        let waiter = {
            let (s, key) = (Arc::clone(&s), key.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let (status, _) = begin(&s, "waits", json!({"key": key, "wait_seconds": 20})).await;
                (status, started.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.post(
            &format!("/v1/operations/waits/{}/{action}", id(&[&key])),
            json!({"token": token}),
            if action == "complete" { 200 } else { 204 },
        )
        .await;
        let (status, waited) = waiter.await.expect("waiter");
        assert_eq!(status, expected, "after {action}");
        assert!(
            waited < Duration::from_secs(2),
            "woken by {action}, not by the 60 s lease or the 20 s wait: {waited:?}"
        );
    }
    let token = started(&s, "waits", json!({"key": "never"})).await["token"].clone();
    let t = Instant::now();
    let (status, _) = begin(&s, "waits", json!({"key": "never", "wait_seconds": 1})).await;
    assert_eq!(status, 409, "still held when the wait ends");
    assert!(t.elapsed() >= Duration::from_millis(900), "it waited: {:?}", t.elapsed());
    drop(token);
    Arc::try_unwrap(s).ok().expect("sole owner").stop().await;
}

/// A holder slower than its lease that keeps extending it: a begin waiting on the key looks again
/// each time the lease it was told about would end, and each time finds it held, so it is never
/// given the key while the holder works; it gets the holder's result when it completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_not_given_a_key_whose_holder_extends_it() {
    let s = Arc::new(TestServer::start().await);
    let holder = started(&s, "slow", json!({"key": "long", "lease_seconds": 1})).await;
    let path = format!("/v1/operations/slow/{}", holder["id"].as_str().expect("id"));
    let token = holder["token"].clone();
    let waiter = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = begin(&s, "slow", json!({"key": "long", "wait_seconds": 10})).await;
            (answer, started.elapsed())
        })
    };
    // 2.4 s of work on a 1 s lease, with a heartbeat every 400 ms.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        s.post(&format!("{path}/extend"), json!({"token": token, "lease_seconds": 1}), 200).await;
    }
    s.post(&format!("{path}/complete"), json!({"token": token, "result": {"done": true}}), 200).await;
    let ((status, answer), waited) = waiter.await.expect("waiter");
    assert_eq!((status, &answer["status"], &answer["result"]), (200, &json!("completed"), &json!({"done": true})));
    assert!(waited >= Duration::from_millis(2400), "it waited for the holder: {waited:?}");
    Arc::try_unwrap(s).ok().expect("sole owner").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_500_racing_begins_exactly_one_starts() {
    let s = Arc::new(TestServer::start_with(|_| {}, Arc::new(SystemClock)).await);
    let tasks: Vec<_> = (0..500)
        .map(|_| {
            let s = Arc::clone(&s);
            tokio::spawn(async move { begin(&s, "race", json!({"key": "one", "request": {"n": 1}})).await.0 })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::new();
    for task in tasks {
        *statuses.entry(task.await.expect("task")).or_insert(0) += 1;
    }
    assert_eq!(statuses.get(&201), Some(&1), "exactly one started: {statuses:?}");
    assert_eq!(statuses.get(&409), Some(&499), "the rest were told it is in progress: {statuses:?}");
    Arc::try_unwrap(s).ok().expect("sole owner").stop().await;
}

#[tokio::test]
async fn operations_and_claims_of_one_key_do_not_meet() {
    let s = TestServer::start().await;
    s.post("/v1/claims/shared", json!({"key": "k"}), 201).await;
    started(&s, "shared", json!({"key": "k"})).await;
    started(&s, "other", json!({"key": "k"})).await;
    s.post("/v1/claims/shared", json!({"key": "k"}), 200).await;
    s.stop().await;
}

#[tokio::test]
async fn bad_input_is_400_naming_the_field_and_changes_nothing() {
    let s = TestServer::start().await;
    let cases = [
        (json!({"key": "k", "lease_seconds": 0}), "lease_seconds"),
        (json!({"key": "k", "lease_seconds": 3601}), "lease_seconds"),
        (json!({"key": "k", "ttl_seconds": 0}), "ttl_seconds"),
        (json!({"key": "k", "ttl_seconds": 31_536_001u64}), "ttl_seconds"),
        (json!({"key": "k", "wait_seconds": 31}), "wait_seconds"),
        (json!({"key": "k", "parts": ["k"]}), "key"),
        (json!({}), "key"),
        (json!({"parts": ["a", ""]}), "parts[1]"),
        (json!({"key": "k", "bogus": 1}), "body"),
        (json!({"key": "k", "lease_seconds": "60"}), "lease_seconds"),
        (json!({"key": "k", "client_token": null}), "client_token"),
        (json!({"key": null, "parts": ["k"]}), "key"),
    ];
    for (body, field) in cases {
        let reply = s.client.send(Method::POST, "/v1/operations/bad/begin", Some(&body)).await.expect("begin");
        let problem = assert_problem(&reply, 400, &body.to_string());
        assert!(
            problem["field"].as_str().is_some_and(|f| f.starts_with(field) || field == "body"),
            "{body}: {problem}"
        );
    }
    let reply =
        s.client.send(Method::POST, "/v1/operations/Bad/begin", Some(&json!({"key": "k"}))).await.expect("begin");
    assert_problem(&reply, 400, "bad namespace");
    let token = started(&s, "bad", json!({"key": "k"})).await["token"].clone();
    let path = format!("/v1/operations/bad/{}", id(&["k"]));
    let big = json!({"token": token, "result": "x".repeat(70_000)});
    let reply = s.client.send(Method::POST, &format!("{path}/complete"), Some(&big)).await.expect("complete");
    assert_eq!(assert_problem(&reply, 400, "a result over 64 KiB")["field"], "result");
    let reply = s.client.send(Method::POST, &format!("{path}/complete"), Some(&json!({"token": "nope"}))).await;
    assert_eq!(assert_problem(&reply.expect("complete"), 400, "a malformed token")["field"], "token");
    let reply = s.client.send(Method::GET, "/v1/operations/bad/not-an-id", None).await.expect("get");
    assert_problem(&reply, 400, "a malformed id");
    assert_eq!(s.expect(Method::GET, &path, None, 200).await["status"], "in_progress", "nothing changed");
    let metrics = s.client.send(Method::GET, "/metrics", None).await.expect("metrics");
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(text.contains(r#"idem_operations_total{namespace="bad",outcome="started"} 1"#), "{text}");
    let doc = s.expect(Method::GET, "/openapi.json", None, 200).await;
    for p in ["/v1/operations/{ns}/begin", "/v1/operations/{ns}/{id}/complete", "/v1/operations/{ns}/{id}"] {
        assert!(doc["paths"][p].is_object(), "OpenAPI describes {p}");
    }
    s.stop().await;
}

/// A second complete answers exactly what the first did, to the microsecond: the expiry as stored,
/// not one computed apart on each side of the store (a real clock, so that time moves between).
#[tokio::test]
async fn a_second_complete_answers_the_very_same_record() {
    let s = TestServer::start().await;
    for i in 0..20 {
        let begun = s.post("/v1/operations/pay/begin", json!({"key": format!("k{i}")}), 201).await;
        let path = format!("/v1/operations/pay/{}/complete", begun["id"].as_str().expect("id"));
        let first = s.post(&path, json!({"token": begun["token"], "result": {"n": i}}), 200).await;
        let again = s.post(&path, json!({"token": begun["token"], "result": {"n": i}}), 200).await;
        assert_eq!(first, again, "round {i}");
    }
}
