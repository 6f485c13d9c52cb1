//! The Claims API over HTTP: every call of docs/reference/api.md#claims, and races of hundreds of
//! real requests.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use idem_conformance::START;
use idem_core::{ManualClock, SystemClock};
use serde_json::json;

use crate::support::TestServer;

#[tokio::test]
async fn claim_is_201_then_200_with_the_existing_record() {
    let s = TestServer::start().await;
    let first = s
        .post("/v1/claims/survey", json!({"parts": ["scenario-1", "user-3", "node-2"], "data": {"answer": "A"}}), 201)
        .await;
    assert_eq!(first["claimed"], true);
    assert_eq!(first["namespace"], "survey");
    assert_eq!(first["parts"], json!(["scenario-1", "user-3", "node-2"]));
    assert_eq!(first["data"], json!({"answer": "A"}));
    assert_eq!(first["expires_at"], json!(null));
    // sha256 of "scenario-1\0user-3\0node-2", computed independently with sha256sum.
    assert_eq!(first["id"], "57b0a95b0f19886aa01c2908b86c3eb171392a90cd8e603606293d8e7c0bd892");
    assert!(first["created_at"].as_str().is_some_and(|t| t.ends_with('Z')), "RFC 3339 UTC");

    let second = s
        .post("/v1/claims/survey", json!({"parts": ["scenario-1", "user-3", "node-2"], "data": {"answer": "B"}}), 200)
        .await;
    assert_eq!(second["claimed"], false);
    assert_eq!(second["data"], json!({"answer": "A"}), "the existing record, unchanged");
    assert_eq!(second["created_at"], first["created_at"]);

    let id = first["id"].as_str().expect("id");
    let got = s.expect(Method::GET, &format!("/v1/claims/survey/{id}"), None, 200).await;
    assert_eq!(got["data"], json!({"answer": "A"}));
    assert!(got.get("claimed").is_none(), "a record read is not a claim answer");
    s.stop().await;
}

#[tokio::test]
async fn key_is_the_one_part_form() {
    let s = TestServer::start().await;
    let a = s.post("/v1/claims/articles", json!({"key": "https://example.com/a"}), 201).await;
    let b = s.post("/v1/claims/articles", json!({"parts": ["https://example.com/a"]}), 200).await;
    assert_eq!(a["id"], b["id"]);
    s.stop().await;
}

#[tokio::test]
async fn batch_answers_in_order_and_first_equal_key_wins() {
    let s = TestServer::start().await;
    s.post("/v1/claims/n", json!({"key": "seen", "data": 0}), 201).await;
    let items = json!({"items": [
        {"key": "a", "data": 1}, {"key": "seen", "data": 2}, {"parts": ["b", "c"], "data": 3}, {"key": "a", "data": 4}
    ]});
    let out = s.post("/v1/claims/n/batch", items, 200).await;
    let results = out["results"].as_array().expect("results");
    let claimed: Vec<_> = results.iter().map(|r| r["claimed"].as_bool().expect("bool")).collect();
    assert_eq!(claimed, [true, false, true, false]);
    let data: Vec<_> = results.iter().map(|r| r["data"].clone()).collect();
    assert_eq!(data, [json!(1), json!(0), json!(3), json!(1)]);
    s.stop().await;
}

#[tokio::test]
async fn batch_of_10000_is_accepted() {
    let s = TestServer::start_with(|c| c.limits.max_body_bytes = 4 << 20, Arc::new(SystemClock)).await;
    let items: Vec<_> = (0..10_000).map(|i| json!({"key": format!("k{i}")})).collect();
    let out = s.post("/v1/claims/big/batch", json!({ "items": items }), 200).await;
    assert_eq!(out["results"].as_array().map(Vec::len), Some(10_000));
    assert!(out["results"].as_array().expect("results").iter().all(|r| r["claimed"] == true));
    s.stop().await;
}

#[tokio::test]
async fn lookup_by_items_and_by_prefix() {
    let s = TestServer::start().await;
    s.post("/v1/claims/survey", json!({"parts": ["scenario-1", "user-3", "node-2"]}), 201).await;
    let out = s
        .post(
            "/v1/claims/survey/lookup",
            json!({"items": [{"key": "absent"}, {"parts": ["scenario-1", "user-3", "node-2"]}]}),
            200,
        )
        .await;
    let results = out["results"].as_array().expect("results");
    assert_eq!(results[0]["exists"], false);
    assert!(results[0].get("record").is_none());
    assert_eq!(results[1]["exists"], true);
    assert_eq!(results[1]["record"]["parts"], json!(["scenario-1", "user-3", "node-2"]));
    assert_eq!(results[1]["id"], results[1]["record"]["id"]);

    for (prefix, exists) in [
        (json!(["scenario-1", "user-3"]), true),
        (json!(["scenario-1"]), true),
        (json!(["scenario-1", "user-4"]), false),
        (json!(["scenario-1", "user-"]), false),
    ] {
        let out = s.post("/v1/claims/survey/prefix", json!({ "prefix": prefix }), 200).await;
        assert_eq!(out, json!({ "exists": exists }), "prefix {prefix}");
        // The body /lookup took before /prefix existed is still answered the same way.
        let old = s.post("/v1/claims/survey/lookup", json!({ "prefix": prefix }), 200).await;
        assert_eq!(old, out, "prefix {prefix} on /lookup");
    }
    s.post("/v1/claims/survey/prefix", json!({"prefix": []}), 400).await;
    s.post("/v1/claims/survey/prefix", json!({"prefix": ["a"], "items": [{"key": "a"}]}), 400).await;
    s.stop().await;
}

#[tokio::test]
async fn delete_then_404() {
    let s = TestServer::start().await;
    let id = s.post("/v1/claims/n", json!({"key": "k"}), 201).await["id"].as_str().expect("id").to_owned();
    let path = format!("/v1/claims/n/{id}");
    s.expect(Method::DELETE, &path, None, 204).await;
    s.expect(Method::DELETE, &path, None, 404).await;
    s.expect(Method::GET, &path, None, 404).await;
    s.post("/v1/claims/n", json!({"key": "k"}), 201).await;
    s.stop().await;
}

#[tokio::test]
async fn ttl_from_request_or_namespace_default_and_exact_expiry() {
    let clock = Arc::new(ManualClock::new(START));
    let s = TestServer::start_with(
        |c| {
            let ttl = idem_server::config::ConfigDuration(Duration::from_secs(90 * 86_400));
            c.namespaces
                .insert("notified_articles".into(), idem_server::config::NamespaceConfig { default_ttl: Some(ttl) });
        },
        clock.clone(),
    )
    .await;
    let by_default = s.post("/v1/claims/notified_articles", json!({"key": "u"}), 201).await;
    assert_eq!(by_default["expires_at"], "2026-04-01T00:00:00.000000Z", "90 days after 2026-01-01");
    let own = s.post("/v1/claims/notified_articles", json!({"key": "v", "ttl_seconds": 60}), 201).await;
    assert_eq!(own["expires_at"], "2026-01-01T00:01:00.000000Z", "the request's ttl_seconds wins");
    let never = s.post("/v1/claims/other", json!({"key": "w"}), 201).await;
    assert_eq!(never["expires_at"], json!(null));

    clock.advance(Duration::from_secs(60));
    let id = own["id"].as_str().expect("id");
    s.expect(Method::GET, &format!("/v1/claims/notified_articles/{id}"), None, 404).await;
    let again = s.post("/v1/claims/notified_articles", json!({"key": "v"}), 201).await;
    assert_eq!(again["claimed"], true, "an expired claim is absent");
    s.stop().await;
}

/// 500 concurrent claims of one key on real sockets: exactly one 201.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_of_500_requests_has_one_winner() {
    let s = TestServer::start().await;
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let client = s.client.clone();
            tokio::spawn(async move {
                let body = json!({"key": "the-one", "data": i});
                client.send(Method::POST, "/v1/claims/race", Some(&body)).await.expect("request")
            })
        })
        .collect();
    let mut created = 0;
    let mut winners_data = std::collections::HashSet::new();
    for task in tasks {
        let reply = task.await.expect("task");
        match reply.status.as_u16() {
            201 => created += 1,
            200 => {}
            other => panic!("unexpected status {other}"),
        }
        winners_data.insert(reply.json()["data"].to_string());
    }
    assert_eq!(created, 1, "exactly one of 500 concurrent claims is created");
    assert_eq!(winners_data.len(), 1, "every answer carries the winner's data");
    s.stop().await;
}

/// 20 keys raced at once, 25 requests each, interleaved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_across_20_keys_has_one_winner_each() {
    let s = TestServer::start().await;
    let tasks: Vec<_> = (0..500)
        .map(|i| {
            let client = s.client.clone();
            tokio::spawn(async move {
                let key = format!("key-{}", i % 20);
                let reply =
                    client.send(Method::POST, "/v1/claims/race", Some(&json!({ "key": key }))).await.expect("request");
                (key, reply.status.as_u16())
            })
        })
        .collect();
    let mut created = std::collections::HashMap::<String, usize>::new();
    for task in tasks {
        let (key, status) = task.await.expect("task");
        assert!(status == 200 || status == 201, "status {status}");
        *created.entry(key).or_default() += usize::from(status == 201);
    }
    assert_eq!(created.len(), 20);
    assert!(created.values().all(|&n| n == 1), "one winner per key: {created:?}");
    s.stop().await;
}

#[tokio::test]
async fn claims_survive_a_graceful_restart() {
    let keep = tempfile::tempdir().expect("temp dir");
    let path = keep.path().to_owned();
    let s = TestServer::start_with(|c| c.data_dir = path.clone(), Arc::new(SystemClock)).await;
    let items: Vec<_> = (0..200).map(|i| json!({"key": format!("k{i}")})).collect();
    s.post("/v1/claims/keep/batch", json!({ "items": items }), 200).await;
    s.stop().await;

    let s = TestServer::start_with(|c| c.data_dir = path.clone(), Arc::new(SystemClock)).await;
    let lookups: Vec<_> = (0..200).map(|i| json!({"key": format!("k{i}")})).collect();
    let out = s.post("/v1/claims/keep/lookup", json!({ "items": lookups }), 200).await;
    let results = out["results"].as_array().expect("results");
    assert!(results.iter().all(|r| r["exists"] == true), "every acknowledged claim is still there");
    s.stop().await;
}

/// `[namespaces] strict = true`: a namespace without a table is refused (a typo cannot create
/// records that never expire); configured namespaces work as ever, for claims and operations.
#[tokio::test]
async fn strict_namespaces_refuse_unknown_ones() {
    let s = TestServer::start_with(
        |c| {
            c.namespaces.strict = true;
            c.namespaces.insert("survey".into(), idem_server::config::NamespaceConfig::default());
        },
        Arc::new(SystemClock),
    )
    .await;
    s.post("/v1/claims/survey", json!({"key": "k"}), 201).await;
    let reply = s.client.send(Method::POST, "/v1/claims/surevy", Some(&json!({"key": "k"}))).await.expect("claim");
    let problem = crate::support::assert_problem(&reply, 404, "a typo'd namespace");
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains("strict")), "{problem}");
    let reply =
        s.client.send(Method::POST, "/v1/operations/surevy/begin", Some(&json!({"key": "k"}))).await.expect("begin");
    crate::support::assert_problem(&reply, 404, "operations too");
    s.post("/v1/operations/survey/begin", json!({"key": "k"}), 201).await;
    s.stop().await;
}

/// A survey admin lists a scenario's answers a page at a time, in parts order, and resets the
/// scenario by deleting its prefix (contract §12).
#[tokio::test]
async fn a_prefix_is_listed_page_by_page_and_deleted() {
    let s = TestServer::start().await;
    let mut items: Vec<_> =
        (0..25).map(|u| json!({"parts": ["scenario-1", format!("user-{u:02}"), "node-1"], "data": {"u": u}})).collect();
    items.push(json!({"parts": ["scenario-10", "user-01", "node-1"]}));
    items.push(json!({"parts": ["scenario-2", "user-01", "node-1"]}));
    s.post("/v1/claims/survey/batch", json!({"items": items}), 200).await;

    let mut seen = Vec::new();
    let mut path = "/v1/claims/survey?prefix=scenario-1&limit=10".to_owned();
    loop {
        let page = s.expect(Method::GET, &path, None, 200).await;
        for item in page["items"].as_array().expect("items") {
            assert_eq!(item["parts"][0], "scenario-1", "only the prefix: {item}");
            assert!(item["created_at"].as_str().is_some_and(|t| t.len() == 27), "six fractional digits: {item}");
            seen.push(item["parts"][1].as_str().expect("part").to_owned());
        }
        match page["next"].as_str() {
            Some(next) => path = format!("/v1/claims/survey?prefix=scenario-1&limit=10&after={next}"),
            None => break,
        }
    }
    let want: Vec<String> = (0..25).map(|u| format!("user-{u:02}")).collect();
    assert_eq!(seen, want, "every answer once, in order, over three pages");
    let deeper = s.expect(Method::GET, "/v1/claims/survey?prefix=scenario-1&prefix=user-07", None, 200).await;
    assert_eq!(deeper["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(deeper["items"][0]["data"], json!({"u": 7}));
    assert_eq!(deeper["next"], json!(null));

    for (bad, field) in [
        ("/v1/claims/survey", "prefix"),
        ("/v1/claims/survey?prefix=", "prefix"),
        ("/v1/claims/survey?prefix=a&limit=0", "limit"),
        ("/v1/claims/survey?prefix=a&limit=1001", "limit"),
        ("/v1/claims/survey?prefix=a&after=%2A%2A", "after"),
        ("/v1/claims/survey?prefix=a&colour=blue", "colour"),
    ] {
        let problem = s.expect(Method::GET, bad, None, 400).await;
        assert_eq!(
            problem["field"].as_str().map(|f| f.split('[').next().unwrap_or(f)),
            Some(field),
            "{bad}: {problem}"
        );
    }
    s.expect(Method::DELETE, "/v1/claims/survey", None, 400).await;
    s.expect(Method::DELETE, "/v1/claims/survey?prefix=a&limit=5", None, 400).await;

    let deleted = s.expect(Method::DELETE, "/v1/claims/survey?prefix=scenario-1", None, 200).await;
    assert_eq!(deleted, json!({"deleted": 25, "more": false}));
    let empty = s.expect(Method::GET, "/v1/claims/survey?prefix=scenario-1", None, 200).await;
    assert_eq!(empty, json!({"items": [], "next": null}));
    let others = s.expect(Method::GET, "/v1/claims/survey?prefix=scenario-10", None, 200).await;
    assert_eq!(others["items"].as_array().map(Vec::len), Some(1), "scenario-10 is another prefix");
    let again = s.post("/v1/claims/survey", json!({"parts": ["scenario-1", "user-03", "node-1"]}), 201).await;
    assert_eq!(again["claimed"], true, "a deleted answer can be given again");
}

/// A cursor that this API did not give (`after=garbage`, one cut short of its tag, a receipt's) is
/// `400` naming the parameter, not an empty page that reads as "no more claims"; every text of the
/// documented pattern is still a position.
#[tokio::test]
async fn a_cursor_not_from_this_api_is_refused_naming_it() {
    let s = TestServer::start().await;
    let items: Vec<_> = (0..3).map(|u| json!({"parts": ["scenario-1", format!("user-{u}")]})).collect();
    s.post("/v1/claims/survey/batch", json!({"items": items}), 200).await;
    let first = s.expect(Method::GET, "/v1/claims/survey?prefix=scenario-1&limit=1", None, 200).await;
    let next = first["next"].as_str().expect("a next page").to_owned();
    assert!(next.starts_with("parts_"), "{next}");
    let untagged = next.trim_start_matches("parts_");
    let receipt = "rcpt_0123456789abcdef0123456789abcdef0123";
    for bad in ["garbage", untagged, receipt, "parts_", "parts_a", "parts_%2A%2A"] {
        let path = format!("/v1/claims/survey?prefix=scenario-1&after={bad}");
        let reply = s.client.send(Method::GET, &path, None).await.expect("list");
        let problem = crate::support::assert_problem(&reply, 400, bad);
        assert_eq!(problem["type"], "urn:idem:problem:invalid-request", "{bad}: {problem}");
        assert_eq!(problem["field"], "after", "{bad}: {problem}");
        assert!(problem["detail"].as_str().is_some_and(|d| d.contains("not a cursor from this API")), "{problem}");
    }
    let rest = s.expect(Method::GET, &format!("/v1/claims/survey?prefix=scenario-1&after={next}"), None, 200).await;
    assert_eq!(rest["items"].as_array().map(Vec::len), Some(2), "a cursor it gave still pages: {rest}");
    let anywhere = s.expect(Method::GET, "/v1/claims/survey?prefix=scenario-1&after=parts_garbage", None, 200).await;
    assert_eq!(anywhere["items"], json!([]), "a text of the pattern is a position (past every claim here)");
    let reply = s.client.send(Method::GET, "/v1/receipts?cursor=garbage", None).await.expect("receipts");
    let problem = crate::support::assert_problem(&reply, 400, "a receipts cursor");
    assert_eq!(
        (problem["type"].as_str(), problem["field"].as_str()),
        (Some("urn:idem:problem:invalid-request"), Some("cursor"))
    );
    let all = s.expect(Method::GET, "/v1/claims/survey?prefix=scenario-1", None, 200).await;
    assert_eq!(all["items"].as_array().map(Vec::len), Some(3), "nothing changed");
    s.stop().await;
}
