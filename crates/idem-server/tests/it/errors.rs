//! Bad input: every malformed request gets a 4xx problem+json that names the field, and nothing is
//! written (checked by looking the key up afterwards).

use http::Method;
use serde_json::{Value, json};

use crate::support::{TestServer, assert_problem};

/// (what, path, body, status, field named in the problem)
fn bad_claims() -> Vec<(&'static str, &'static str, Value, u16, &'static str)> {
    let big_data = "x".repeat(64 * 1024 + 1);
    let long_part = "p".repeat(1025);
    vec![
        ("wrong type", "/v1/claims/ns", json!({"key": 5}), 400, "key"),
        ("unknown field", "/v1/claims/ns", json!({"key": "victim", "colour": "red"}), 400, "colour"),
        ("neither key nor parts", "/v1/claims/ns", json!({"data": 1}), 400, "key"),
        ("both key and parts", "/v1/claims/ns", json!({"key": "victim", "parts": ["victim"]}), 400, "key"),
        ("empty key", "/v1/claims/ns", json!({"key": ""}), 400, "key"),
        ("empty part", "/v1/claims/ns", json!({"parts": ["victim", ""]}), 400, "parts[1]"),
        ("part with NUL", "/v1/claims/ns", json!({"parts": ["vic\u{0}tim"]}), 400, "parts[0]"),
        ("oversized part", "/v1/claims/ns", json!({"parts": [long_part]}), 400, "parts[0]"),
        ("no parts", "/v1/claims/ns", json!({"parts": []}), 400, "parts"),
        ("17 parts", "/v1/claims/ns", json!({"parts": vec!["victim"; 17]}), 400, "parts"),
        ("oversized data", "/v1/claims/ns", json!({"key": "victim", "data": big_data}), 400, "data"),
        ("zero ttl", "/v1/claims/ns", json!({"key": "victim", "ttl_seconds": 0}), 400, "ttl_seconds"),
        ("negative ttl", "/v1/claims/ns", json!({"key": "victim", "ttl_seconds": -1}), 400, "ttl_seconds"),
        // Absent is allowed; null is not (the OpenAPI document says these are not nullable).
        ("null key", "/v1/claims/ns", json!({"key": null, "parts": ["victim"]}), 400, "key"),
        ("null client_token", "/v1/claims/ns", json!({"key": "victim", "client_token": null}), 400, "client_token"),
        ("null created_at", "/v1/claims/ns", json!({"key": "victim", "created_at": null}), 400, "created_at"),
        (
            "created_at in the future",
            "/v1/claims/ns",
            json!({"key": "victim", "created_at": "2999-01-01T00:00:00Z"}),
            400,
            "created_at",
        ),
        ("bad namespace", "/v1/claims/Bad%20NS", json!({"key": "victim"}), 400, "namespace"),
        (
            "long namespace",
            "/v1/claims/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            json!({"key": "victim"}),
            400,
            "namespace",
        ),
        ("empty batch", "/v1/claims/ns/batch", json!({"items": []}), 400, "items"),
        (
            "batch item error",
            "/v1/claims/ns/batch",
            json!({"items": [{"key": "victim"}, {"parts": [""]}]}),
            400,
            "items[1].parts[0]",
        ),
        (
            "null batch client_token",
            "/v1/claims/ns/batch",
            json!({"items": [{"key": "victim"}], "client_token": null}),
            400,
            "client_token",
        ),
        ("batch not a list", "/v1/claims/ns/batch", json!({"items": {"key": "victim"}}), 400, "items"),
        ("lookup without items or prefix", "/v1/claims/ns/lookup", json!({}), 400, "items"),
        ("lookup with both", "/v1/claims/ns/lookup", json!({"items": [{"key": "a"}], "prefix": ["a"]}), 400, "items"),
        ("empty lookup", "/v1/claims/ns/lookup", json!({"items": []}), 400, "items"),
        ("empty prefix part", "/v1/claims/ns/lookup", json!({"prefix": ["a", ""]}), 400, "prefix[1]"),
    ]
}

#[tokio::test]
async fn bad_claims_are_4xx_problems_naming_the_field_and_change_nothing() {
    let s = TestServer::start().await;
    for (what, path, body, status, field) in bad_claims() {
        let reply = s.client.send(Method::POST, path, Some(&body)).await.expect("request");
        let problem = assert_problem(&reply, status, what);
        assert_eq!(problem["field"], field, "{what}: {problem}");
        assert!(!problem["detail"].as_str().unwrap_or("").is_empty(), "{what}: detail explains");
    }
    let out = s.post("/v1/claims/ns/lookup", json!({"items": [{"key": "victim"}, {"parts": ["victim"]}]}), 200).await;
    assert!(out["results"].as_array().expect("results").iter().all(|r| r["exists"] == false), "nothing was written");
    let out = s.post("/v1/claims/ns/lookup", json!({"prefix": ["victim"]}), 200).await;
    assert_eq!(out["exists"], false, "nothing was written");
    s.stop().await;
}

#[tokio::test]
async fn batch_of_10001_is_refused_whole() {
    let s = TestServer::start_with(|c| c.limits.max_body_bytes = 4 << 20, std::sync::Arc::new(idem_core::SystemClock))
        .await;
    let items: Vec<_> = (0..10_001).map(|i| json!({"key": format!("k{i}")})).collect();
    let reply =
        s.client.send(Method::POST, "/v1/claims/ns/batch", Some(&json!({ "items": items }))).await.expect("request");
    assert_eq!(assert_problem(&reply, 400, "10,001 items")["field"], "items");
    let out = s.post("/v1/claims/ns/lookup", json!({"items": [{"key": "k0"}]}), 200).await;
    assert_eq!(out["results"][0]["exists"], false, "no item of a refused batch is written");
    s.stop().await;
}

#[tokio::test]
async fn malformed_bodies_and_content_types() {
    let s = TestServer::start().await;
    let raw = |body: &'static str, content_type: &'static str| {
        let client = s.client.clone();
        async move {
            client.send_raw(Method::POST, "/v1/claims/ns", Some(body.into()), content_type).await.expect("request")
        }
    };
    assert_eq!(assert_problem(&raw("{\"key\": ", "application/json").await, 400, "truncated JSON")["field"], "body");
    assert_problem(&raw("{\"key\": \"a\"} x", "application/json").await, 400, "trailing garbage");
    assert_problem(&raw("key=a", "application/x-www-form-urlencoded").await, 415, "form body");
    assert_problem(&raw("{\"key\": \"a\"}", "text/plain").await, 415, "text body");
    assert_problem(&raw("[1,2]", "application/json").await, 400, "array body");
    let reply = s.client.send(Method::GET, "/v1/claims/ns/not-hex", None).await.expect("request");
    assert_eq!(assert_problem(&reply, 400, "bad id")["field"], "id");
    assert_problem(&s.client.send(Method::PUT, "/v1/claims/ns", None).await.expect("request"), 405, "wrong method");
    s.stop().await;
}

/// A path that is no route (a client with a wrong base path) has a problem type of its own, so that
/// no client reads it as "no such claim".
#[tokio::test]
async fn an_unknown_route_is_not_an_absent_record() {
    let s = TestServer::start().await;
    let id = "0".repeat(64);
    let absent = s.client.send(Method::GET, &format!("/v1/claims/ns/{id}"), None).await.expect("request");
    let absent = assert_problem(&absent, 404, "no such claim");
    assert_eq!(
        (absent["type"].as_str(), absent["title"].as_str()),
        (Some("urn:idem:problem:not-found"), Some("Not found"))
    );
    for path in ["/v1/nowhere".to_owned(), format!("/api/v1/claims/ns/{id}"), format!("/claims/ns/{id}")] {
        let reply = s.client.send(Method::GET, &path, None).await.expect("request");
        let problem = assert_problem(&reply, 404, &path);
        assert_eq!(problem["type"], "urn:idem:problem:no-such-route", "{path}");
        assert_eq!(problem["title"], "No such route", "{path}");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(&format!("GET {path}")) && detail.contains("base URL"), "{detail}");
    }
    s.stop().await;
}

#[tokio::test]
async fn bodies_over_the_limit_get_413() {
    let s =
        TestServer::start_with(|c| c.limits.max_body_bytes = 1000, std::sync::Arc::new(idem_core::SystemClock)).await;
    let body = json!({"key": "victim", "data": "x".repeat(2000)});
    let reply = s.client.send(Method::POST, "/v1/claims/ns", Some(&body)).await.expect("request");
    assert_problem(&reply, 413, "body over the limit");
    s.post("/v1/claims/ns", json!({"key": "victim"}), 201).await;
    s.stop().await;
}
