//! Browsers kept out (docs/security.md), over real sockets. With no tokens configured, a `Host`
//! that is not idem's is 403 (DNS rebinding) and a cross-site `Origin` on a request that changes
//! something is 403; replay, discard and bulk replay take JSON or no body, never a form (415); and
//! every answer under `/ui`, prompt and error pages included, forbids framing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use idem_core::SystemClock;
use idem_server::cli::client::{ApiClient, Reply};
use serde_json::json;

use crate::support::{TestServer, assert_problem};

async fn with(client: &ApiClient, method: Method, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> Reply {
    let body = body.map(|b| Bytes::from(b.to_owned()));
    client.send_with(method, path, body, headers).await.expect("request")
}

fn port(s: &TestServer) -> String {
    s.url.rsplit(':').next().expect("port").to_owned()
}

fn dead_source() -> idem_server::config::SourceConfig {
    toml::from_str(
        "name = \"partner\"\nhandler_url = \"http://127.0.0.1:9/x\"\nevent_id = \"/id\"\nmax_attempts = 1\n\
         signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
    )
    .expect("source")
}

#[tokio::test]
async fn without_tokens_only_idems_own_host_is_served() {
    let s =
        TestServer::start_with(|c| c.http.allowed_hosts = vec!["idem.internal".into()], Arc::new(SystemClock)).await;
    let port = port(&s);
    for path in ["/v1/receipts", "/ui", "/healthz", "/metrics"] {
        let reply = with(&s.client, Method::GET, path, None, &[("host", "rebind.evil.example")]).await;
        let problem = assert_problem(&reply, 403, path);
        assert_eq!(problem["type"], "urn:idem:problem:forbidden");
        assert!(problem["detail"].as_str().is_some_and(|d| d.contains("allowed_hosts")), "{problem}");
        if path == "/ui" {
            let csp = reply.headers.get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or("");
            assert!(csp.contains("frame-ancestors 'none'"), "even a refused /ui answer forbids framing");
        }
    }
    let rebound = format!("rebind.evil.example:{port}");
    let reply = with(
        &s.client,
        Method::POST,
        "/v1/claims/ns",
        Some(r#"{"key":"k"}"#),
        &[("host", &rebound), ("content-type", "application/json")],
    )
    .await;
    assert_problem(&reply, 403, "a rebound claim");
    for host in
        [format!("localhost:{port}"), format!("127.0.0.1:{port}"), "[::1]".into(), format!("idem.internal:{port}")]
    {
        let reply = with(&s.client, Method::GET, "/v1/receipts", None, &[("host", &host)]).await;
        assert_eq!(reply.status, 200, "{host}");
    }
    let looked = s.expect(Method::POST, "/v1/claims/ns/lookup", Some(json!({"items": [{"key": "k"}]})), 200).await;
    assert_eq!(looked["results"][0]["exists"], false, "the refused claim changed nothing");
    s.stop().await;
}

#[tokio::test]
async fn without_tokens_a_cross_site_request_that_changes_something_is_refused() {
    let s = TestServer::start_with(|c| c.sources = vec![dead_source()], Arc::new(SystemClock)).await;
    let own = format!("http://127.0.0.1:{}", port(&s));
    let json_type = ("content-type", "application/json");
    let evil = ("origin", "https://evil.example");
    let reply = with(&s.client, Method::POST, "/v1/claims/ns", Some(r#"{"key":"k"}"#), &[json_type, evil]).await;
    let problem = assert_problem(&reply, 403, "a cross-site claim");
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains("evil.example")), "{problem}");
    let text = ("content-type", "text/plain");
    let reply =
        with(&s.client, Method::POST, "/v1/sources/partner/events", Some(r#"{"id":"e1"}"#), &[text, evil]).await;
    assert_problem(&reply, 403, "a cross-site text/plain event");
    let reply =
        with(&s.client, Method::POST, "/v1/claims/ns", Some(r#"{"key":"k"}"#), &[json_type, ("origin", "null")]).await;
    assert_problem(&reply, 403, "an opaque origin");
    let looked = s.expect(Method::POST, "/v1/claims/ns/lookup", Some(json!({"items": [{"key": "k"}]})), 200).await;
    assert_eq!(looked["results"][0]["exists"], false, "nothing was claimed");
    assert_eq!(s.expect(Method::GET, "/v1/receipts", None, 200).await["receipts"], json!([]), "nothing was accepted");

    // Reads are not refused (a browser cannot read another site's answer anyway), and idem's own
    // origin, or none (any client but a browser), may change things.
    assert_eq!(with(&s.client, Method::GET, "/v1/receipts", None, &[evil]).await.status, 200);
    let reply =
        with(&s.client, Method::POST, "/v1/claims/ns", Some(r#"{"key":"k"}"#), &[json_type, ("origin", &own)]).await;
    assert_eq!(reply.status, 201, "same origin");
    s.post("/v1/claims/ns", json!({"key": "k2"}), 201).await;
    s.stop().await;
}

#[tokio::test]
async fn replay_and_discard_take_json_or_nothing_never_a_form() {
    let s = TestServer::start_with(|c| c.sources = vec![dead_source()], Arc::new(SystemClock)).await;
    let accepted = with(
        &s.client,
        Method::POST,
        "/v1/sources/partner/events",
        Some(r#"{"id":"e1"}"#),
        &[("content-type", "application/json")],
    )
    .await;
    let id = accepted.json()["receipt_id"].as_str().expect("receipt").to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.expect(Method::GET, &format!("/v1/receipts/{id}"), None, 200).await["status"] != "dead" {
        assert!(Instant::now() < deadline, "never dead");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let form = ("content-type", "application/x-www-form-urlencoded");
    for (path, body) in [
        (format!("/v1/receipts/{id}/replay"), ""),
        (format!("/v1/receipts/{id}/discard"), "a=1"),
        ("/v1/receipts/replay".to_owned(), "status=dead"),
    ] {
        let reply = with(&s.client, Method::POST, &path, Some(body), &[form]).await;
        assert_problem(&reply, 415, &path);
        let text = with(&s.client, Method::POST, &path, Some("{}"), &[("content-type", "text/plain")]).await;
        assert_problem(&text, 415, &path);
    }
    let receipt = s.expect(Method::GET, &format!("/v1/receipts/{id}"), None, 200).await;
    assert_eq!((receipt["status"].as_str(), receipt["round"].as_u64()), (Some("dead"), Some(1)), "nothing changed");
    // What the clients send: no body at all; or an empty JSON object.
    let discarded = with(&s.client, Method::POST, &format!("/v1/receipts/{id}/discard"), None, &[]).await;
    assert_eq!(discarded.status, 200, "{}", String::from_utf8_lossy(&discarded.body));
    let replayed = with(
        &s.client,
        Method::POST,
        &format!("/v1/receipts/{id}/replay"),
        Some("{}"),
        &[("content-type", "application/json")],
    )
    .await;
    assert_eq!(replayed.status, 202, "{}", String::from_utf8_lossy(&replayed.body));
    s.stop().await;
}

#[tokio::test]
async fn every_ui_answer_forbids_framing_the_prompt_and_error_pages_too() {
    let auth: idem_server::config::AuthConfig = toml::from_str(
        "tokens = [\"ui-admin\"]\n[[token]]\nname = \"watcher\"\ntoken = \"ui-viewer\"\ncan = \"read\"\n",
    )
    .expect("auth");
    let s = TestServer::start_with(|c| c.auth = auth, Arc::new(SystemClock)).await;
    let viewer = s.client_with_token("ui-viewer");
    let cases = [
        (with(&s.client, Method::GET, "/ui", None, &[]).await, 401, "the prompt"),
        (with(&s.client, Method::GET, "/ui/receipts", None, &[]).await, 401, "the prompt"),
        (
            with(&viewer, Method::POST, "/ui/lookup/delete", Some("kind=claim"), &[("idem-ui", "1")]).await,
            403,
            "a viewer's action",
        ),
        (with(&viewer, Method::POST, "/ui/lookup/delete", Some("kind=claim"), &[]).await, 403, "no idem-ui header"),
        (
            with(&viewer, Method::GET, "/ui/receipts/rcpt_000000000000000000000000000000000000", None, &[]).await,
            404,
            "not found",
        ),
        (with(&viewer, Method::GET, "/ui/nothing-here", None, &[]).await, 404, "no such page"),
        (with(&viewer, Method::GET, "/ui", None, &[]).await, 200, "a page"),
        (with(&s.client, Method::GET, "/ui/assets/ui.js", None, &[]).await, 200, "an asset"),
    ];
    for (reply, status, what) in cases {
        assert_eq!(reply.status, status, "{what}");
        let csp = reply.headers.get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or("");
        assert!(csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"), "{what}: {csp:?}");
        assert_eq!(reply.headers.get("x-frame-options").map(|v| v.as_bytes()), Some(&b"DENY"[..]), "{what}");
    }
    let page = String::from_utf8_lossy(&with(&viewer, Method::GET, "/ui", None, &[]).await.body).into_owned();
    assert!(page.contains("watcher (read)"), "the page says which token is in use");
    let refused = with(&viewer, Method::POST, "/ui/lookup/delete", Some("kind=claim"), &[("idem-ui", "1")]).await;
    assert!(String::from_utf8_lossy(&refused.body).contains("can = &quot;admin&quot;"), "the 403 page says why");
    s.stop().await;
}

/// With tokens configured, the token is what keeps browsers out: any `Host` is served to it.
#[tokio::test]
async fn with_tokens_the_host_is_not_checked() {
    let auth: idem_server::config::AuthConfig = toml::from_str("tokens = [\"t0k\"]\n").expect("auth");
    let s = TestServer::start_with(|c| c.auth = auth, Arc::new(SystemClock)).await;
    let reply =
        with(&s.client_with_token("t0k"), Method::GET, "/v1/receipts", None, &[("host", "idem.example.com")]).await;
    assert_eq!(reply.status, 200);
    s.stop().await;
}
