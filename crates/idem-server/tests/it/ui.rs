//! The dashboard over plain HTTP (the browser tests in `tests/dashboard` drive it in Chromium):
//! with auth on, nothing but the prompt without a token; every action needs the dashboard's own
//! header; pages carry a strict content security policy; every page renders, without JavaScript
//! when auth is off; a claim is found and deleted; and the pages follow a token's role and scope.

use std::sync::Arc;

use bytes::Bytes;
use http::Method;
use idem_core::SystemClock;
use idem_server::cli::client::{ApiClient, Reply};
use serde_json::json;

use crate::support::TestServer;

fn text(reply: &Reply) -> String {
    String::from_utf8_lossy(&reply.body).into_owned()
}

async fn get(client: &ApiClient, path: &str) -> Reply {
    client.send_with(Method::GET, path, None, &[]).await.expect("request")
}

async fn post_form(client: &ApiClient, path: &str, form: &str, ui: bool) -> Reply {
    let mut headers = vec![("content-type", "application/x-www-form-urlencoded")];
    if ui {
        headers.push(("idem-ui", "1"));
    }
    client.send_with(Method::POST, path, Some(Bytes::from(form.to_owned())), &headers).await.expect("request")
}

#[tokio::test]
async fn with_auth_on_only_the_prompt_is_served_without_a_token() {
    let token: idem_server::config::Secret = toml::Value::String("ui-s3cret".into()).try_into().expect("secret");
    let s = TestServer::start_with(|c| c.auth.tokens = vec![token], Arc::new(SystemClock)).await;
    s.client_with_token("ui-s3cret")
        .send(Method::POST, "/v1/claims/orders", Some(&json!({"key": "order-secret-1"})))
        .await
        .expect("claim");
    for path in ["/ui", "/ui/receipts", "/ui/replay", "/ui/lookup?ns=orders&key=order-secret-1"] {
        for client in [&s.client, &s.client_with_token("wrong")] {
            let reply = get(client, path).await;
            assert_eq!(reply.status, 401, "{path}");
            let page = text(&reply);
            assert!(page.contains(r#"data-testid="token-input""#), "{path}: the prompt");
            assert!(!page.contains("order-secret-1") && !page.contains("<h1>Overview"), "{path}: nothing else");
            assert!(!page.contains("ui-s3cret"));
        }
    }
    let with = s.client_with_token("ui-s3cret");
    let overview = get(&with, "/ui").await;
    assert_eq!(overview.status, 200);
    assert!(text(&overview).contains("<h1>Overview</h1>"));
    let found = get(&with, "/ui/lookup?kind=claim&ns=orders&key=order-secret-1").await;
    assert!(text(&found).contains(r#"data-testid="lookup-result""#) && text(&found).contains("order-secret-1"));
    let csp = overview.headers.get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(overview.headers.get("cache-control").map(|v| v.as_bytes()), Some(&b"no-store"[..]));
    // The assets are open: the prompt itself needs them.
    assert_eq!(get(&s.client, "/ui/assets/ui.js").await.status, 200);
    assert_eq!(get(&s.client, "/ui/assets/ui.css").await.status, 200);
    s.stop().await;
}

#[tokio::test]
async fn actions_need_the_dashboards_own_header() {
    let s = TestServer::start().await;
    s.post("/v1/claims/orders", json!({"key": "o-1"}), 201).await;
    let id = s.expect(Method::POST, "/v1/claims/orders/lookup", Some(json!({"items": [{"key": "o-1"}]})), 200).await
        ["results"][0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let form = format!("kind=claim&ns=orders&id={id}");
    let forged = post_form(&s.client, "/ui/lookup/delete", &form, false).await;
    assert_eq!(forged.status, 403, "a cross-site form cannot send idem-ui: 1");
    s.expect(Method::GET, &format!("/v1/claims/orders/{id}"), None, 200).await;
    let deleted = post_form(&s.client, "/ui/lookup/delete", &form, true).await;
    assert_eq!(deleted.status, 200);
    assert!(text(&deleted).contains("Deleted claim"), "{}", text(&deleted));
    s.expect(Method::GET, &format!("/v1/claims/orders/{id}"), None, 404).await;
    s.stop().await;
}

#[tokio::test]
async fn every_page_renders_and_escapes_what_it_shows() {
    let s = TestServer::start_with(
        |c| {
            c.sources =
                vec![toml::from_str(
                "name = \"partner\"\nhandler_url = \"http://127.0.0.1:9/x\"\nevent_id = \"/id\"\nmax_attempts = 1\n\
                 signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
            )
            .expect("source")]
        },
        Arc::new(SystemClock),
    )
    .await;
    let accepted = s
        .client
        .send_with(
            Method::POST,
            "/v1/sources/partner/events",
            Some(Bytes::from(r#"{"id":"<script>alert(1)</script>","x":1}"#)),
            &[("content-type", "application/json")],
        )
        .await
        .expect("event");
    let receipt = accepted.json()["receipt_id"].as_str().expect("receipt").to_owned();
    for path in [
        "/ui".to_owned(),
        "/ui/receipts".to_owned(),
        "/ui/receipts?status=dead&source=partner".to_owned(),
        format!("/ui/receipts/{receipt}"),
        format!("/ui/receipts?q={receipt}"),
        "/ui/replay?status=dead&count=1".to_owned(),
        "/ui/lookup?kind=operation&ns=jobs&key=a%0Ab".to_owned(),
    ] {
        let reply = get(&s.client, &path).await;
        assert_eq!(reply.status, 200, "{path}: {}", text(&reply));
        let page = text(&reply);
        assert!(!page.contains("<script>alert"), "{path}: escaped");
        assert!(page.contains("</html>"), "{path}");
    }
    let missing = get(&s.client, "/ui/receipts/rcpt_000000000000000000000000000000000000").await;
    assert_eq!(missing.status, 404);
    let bad = get(&s.client, "/ui/replay?status=processing&count=1").await;
    assert_eq!(bad.status, 400, "a bulk replay of receipts still being delivered is refused");
    s.stop().await;
}

/// The dashboard follows the token's scope: a token limited to source `a` and namespace `survey`
/// sees `a`'s receipts only, is refused `b`'s receipt and another namespace's lookup, and (as a
/// read token) is shown no action.
#[tokio::test]
async fn the_dashboard_follows_the_tokens_scope() {
    let source = |name: &str| -> idem_server::config::SourceConfig {
        toml::from_str(&format!(
            "name = \"{name}\"\nhandler_url = \"http://127.0.0.1:9/x\"\nevent_id = \"/id\"\nmax_attempts = 1\n\
             signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\""
        ))
        .expect("source")
    };
    let auth: idem_server::config::AuthConfig = toml::from_str(
        "tokens = [\"ui-admin\"]\n[[token]]\nname = \"a-viewer\"\ntoken = \"ui-a\"\ncan = \"read\"\nsources = [\"a\"]\nnamespaces = [\"survey\"]\n",
    )
    .expect("auth");
    let s = TestServer::start_with(
        |c| {
            c.auth = auth;
            c.sources = vec![source("a"), source("b")];
        },
        Arc::new(SystemClock),
    )
    .await;
    let admin = s.client_with_token("ui-admin");
    let mut receipts = Vec::new();
    for name in ["a", "b"] {
        let body = Bytes::from(format!(r#"{{"id":"evt-{name}"}}"#));
        let reply = admin
            .send_with(
                Method::POST,
                &format!("/v1/sources/{name}/events"),
                Some(body),
                &[("content-type", "application/json")],
            )
            .await
            .expect("event");
        receipts.push(reply.json()["receipt_id"].as_str().expect("receipt").to_owned());
    }
    admin.send(Method::POST, "/v1/claims/orders", Some(&json!({"key": "o-1"}))).await.expect("claim");
    let viewer = s.client_with_token("ui-a");
    let list = text(&get(&viewer, "/ui/receipts").await);
    assert!(list.contains(&receipts[0]) && !list.contains(&receipts[1]), "only source a's receipts");
    let mine = get(&viewer, &format!("/ui/receipts/{}", receipts[0])).await;
    assert_eq!(mine.status, 200);
    assert!(!text(&mine).contains(r#"data-testid="replay""#), "a read token gets no action");
    let theirs = get(&viewer, &format!("/ui/receipts/{}", receipts[1])).await;
    assert_eq!(theirs.status, 403);
    assert!(text(&theirs).contains("source b"), "the page says why");
    let lookup = text(&get(&viewer, "/ui/lookup?kind=claim&ns=orders&key=o-1").await);
    assert!(lookup.contains("namespace orders") && !lookup.contains(r#"data-testid="lookup-result""#), "{lookup}");
    let overview = text(&get(&viewer, "/ui").await);
    assert!(overview.contains(">a<") && !overview.contains(">b<"), "the overview shows its sources only");
    let with_admin = get(&admin, &format!("/ui/receipts/{}", receipts[1])).await;
    assert!(text(&with_admin).contains(r#"data-testid="replay""#), "an admin token gets the actions");
    s.stop().await;
}

/// A restarted idem (a real process: the counters of traffic start again) still lists the
/// namespaces it knows without traffic: those with claims in the store, and those configured.
#[tokio::test]
async fn the_overview_remembers_namespaces_across_a_restart() {
    use crate::support::binary::Idem;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("idem.toml");
    std::fs::write(&config, "[namespaces.orders]\n").expect("write config");
    let data = dir.path().join("data");
    let extra = ["--config", config.to_str().expect("utf-8")];
    let mut first = Idem::serve(&data, &extra);
    let client = ApiClient::new(&first.url, None).expect("client");
    let claimed = client.send(Method::POST, "/v1/claims/survey", Some(&json!({"key": "k"}))).await.expect("claim");
    assert_eq!(claimed.status, 201);
    let begun = client.send(Method::POST, "/v1/operations/orders/begin", Some(&json!({"key": "o1"}))).await;
    assert_eq!(begun.expect("begin").status, 201);
    assert_eq!(first.terminate().code(), Some(0));

    let second = Idem::serve(&data, &extra);
    let client = ApiClient::new(&second.url, None).expect("client");
    let overview = text(&get(&client, "/ui").await);
    let row = |ns: &str| overview.split("<tr>").find(|r| r.contains(&format!(">{ns}</th>"))).map(str::to_owned);
    let survey = row("survey").unwrap_or_else(|| panic!("survey is listed after a restart:\n{overview}"));
    assert!(survey.contains("<td>1</td>"), "its stored claim is counted: {survey}");
    assert!(row("orders").is_some(), "a configured namespace is listed after a restart:\n{overview}");
}
