//! Who may do what (docs/security.md), over real sockets: admin tokens (`[auth] tokens`), named
//! tokens with a role and a scope (`[[auth.token]]`), 401 for no or unknown token, 403 naming what
//! was refused with nothing changed, partners let in on their signature alone, metrics labelled by
//! the token's name; health, metrics and the OpenAPI document stay open.

use std::sync::Arc;

use bytes::Bytes;
use http::Method;
use idem_core::SystemClock;
use idem_core::event::{SigningSecret, sign};
use idem_server::cli::client::{ApiClient, Reply};
use idem_server::config::{AuthConfig, SourceConfig};
use serde_json::{Value, json};

use crate::support::{TestServer, assert_problem, expect};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const PARTNER_SECRET: &str = "whsec_cGFydG5lci1zZWNyZXQtMDEyMzQ1Njc4OWFi";

/// An admin token, a read token, a write token limited to `survey`, a write token for source
/// `plain` only, and a read token for source `plain` only.
fn auth() -> AuthConfig {
    toml::from_str(
        r#"
tokens = ["admin-s3cret"]

[[token]]
name = "viewer"
token = "viewer-s3cret"
can = "read"

[[token]]
name = "survey-bot"
sha256 = "SURVEY_DIGEST"
can = "write"
namespaces = ["survey"]

[[token]]
name = "feeder"
token = "feeder-s3cret"
can = "write"
sources = ["plain"]

[[token]]
name = "plain-viewer"
token = "plain-viewer-s3cret"
can = "read"
sources = ["plain"]
"#
        .replace("SURVEY_DIGEST", &idem_core::key::hex(&idem_server::config::token_digest("survey-s3cret")))
        .as_str(),
    )
    .expect("auth config")
}

/// `signed` checks signatures (`verify_secret`); `plain` does not. Both deliver nowhere.
fn sources() -> Vec<SourceConfig> {
    let source = |name: &str, extra: &str| -> SourceConfig {
        toml::from_str(&format!(
            "name = \"{name}\"\nhandler_url = \"http://127.0.0.1:9/x\"\nevent_id = \"/id\"\nmax_attempts = 1\n\
             signing_secret = \"{SECRET}\"\n{extra}"
        ))
        .expect("source")
    };
    vec![source("signed", &format!("verify_secret = \"{PARTNER_SECRET}\"")), source("plain", "")]
}

async fn start() -> TestServer {
    TestServer::start_with(
        |c| {
            c.auth = auth();
            c.sources = sources();
        },
        Arc::new(SystemClock),
    )
    .await
}

async fn send(client: &ApiClient, method: Method, path: &str, body: Option<Value>) -> Reply {
    client.send(method, path, body.as_ref()).await.expect("request")
}

/// A 403 problem of type forbidden whose detail names `token` and contains `names`.
fn assert_forbidden(reply: &Reply, token: &str, names: &str, what: &str) {
    let problem = assert_problem(reply, 403, what);
    assert_eq!(problem["type"], "urn:idem:problem:forbidden", "{what}");
    let detail = problem["detail"].as_str().unwrap_or("");
    assert!(detail.contains(token) && detail.contains(names), "{what}: {detail}");
    assert!(!detail.contains("s3cret"), "{what}: the secret never appears: {detail}");
}

async fn event(client: &ApiClient, source: &str, id: &str, headers: &[(&str, &str)]) -> Reply {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    let body = Bytes::from(format!(r#"{{"id":"{id}"}}"#));
    client.send_with(Method::POST, &format!("/v1/sources/{source}/events"), Some(body), &all).await.expect("event")
}

#[tokio::test]
async fn v1_requires_a_known_token_whatever_the_case_of_bearer() {
    let s = start().await;
    let body = json!({"key": "k"});
    let reply = send(&s.client, Method::POST, "/v1/claims/ns", Some(body.clone())).await;
    let problem = assert_problem(&reply, 401, "no token");
    assert_eq!(reply.headers.get("www-authenticate").map(|v| v.as_bytes()), Some(&b"Bearer"[..]));
    assert!(!problem.to_string().contains("s3cret"), "the token never appears in an answer");
    let detail = problem["detail"].as_str().unwrap_or_default();
    for how in ["Authorization: Bearer <token>", "--token", "IDEM_TOKEN", "`token` option"] {
        assert!(detail.contains(how), "a 401 says how to pass a token ({how}): {detail}");
    }
    assert_problem(
        &send(&s.client_with_token("admin-s3crex"), Method::POST, "/v1/claims/ns", Some(body.clone())).await,
        401,
        "unknown token",
    );
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let auth = format!("{scheme} admin-s3cret");
        let reply = s
            .client
            .send_with(
                Method::POST,
                "/v1/claims/ns",
                Some(Bytes::from(body.to_string())),
                &[("content-type", "application/json"), ("authorization", &auth)],
            )
            .await
            .expect("request");
        assert!(reply.status == 201 || reply.status == 200, "{scheme}: {}", reply.status);
    }
    let basic =
        s.client.send_with(Method::GET, "/v1/receipts", None, &[("authorization", "Basic YWRtaW4tczNjcmV0")]).await;
    assert_problem(&basic.expect("request"), 401, "Basic is not Bearer");
    for open in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        s.expect(Method::GET, open, None, 200).await;
    }
    s.stop().await;
}

#[tokio::test]
async fn a_read_token_reads_and_looks_up_but_every_write_is_403_and_changes_nothing() {
    let s = start().await;
    let admin = s.client_with_token("admin-s3cret");
    let viewer = s.client_with_token("viewer-s3cret");
    let claim = expect(&admin, Method::POST, "/v1/claims/orders", Some(json!({"key": "o-1"})), 201).await;
    let id = claim["id"].as_str().expect("id").to_owned();
    let op = expect(&admin, Method::POST, "/v1/operations/orders/begin", Some(json!({"key": "job"})), 201).await;
    let op_id = op["id"].as_str().expect("id").to_owned();
    let done = json!({"token": op["token"], "result": {"ok": true}});
    expect(&admin, Method::POST, &format!("/v1/operations/orders/{op_id}/complete"), Some(done), 200).await;
    let receipt = event(&admin, "plain", "e1", &[]).await.json()["receipt_id"].as_str().expect("receipt").to_owned();

    expect(&viewer, Method::GET, &format!("/v1/claims/orders/{id}"), None, 200).await;
    expect(&viewer, Method::POST, "/v1/claims/orders/lookup", Some(json!({"items": [{"key": "o-1"}]})), 200).await;
    expect(&viewer, Method::POST, "/v1/claims/orders/lookup", Some(json!({"prefix": ["o-1"]})), 200).await;
    expect(&viewer, Method::GET, "/v1/claims/orders?prefix=o-1", None, 200).await;
    expect(&viewer, Method::GET, &format!("/v1/operations/orders/{op_id}"), None, 200).await;
    expect(&viewer, Method::GET, "/v1/receipts", None, 200).await;
    expect(&viewer, Method::GET, &format!("/v1/receipts/{receipt}"), None, 200).await;

    let writes: Vec<(Method, String, Option<Value>, &str)> = vec![
        (Method::POST, "/v1/claims/orders".into(), Some(json!({"key": "o-2"})), "claiming"),
        (Method::POST, "/v1/claims/orders/batch".into(), Some(json!({"items": [{"key": "o-2"}]})), "claiming"),
        (Method::DELETE, format!("/v1/claims/orders/{id}"), None, "deleting a claim"),
        (Method::DELETE, "/v1/claims/orders?prefix=o-1".into(), None, "deleting claims"),
        (Method::POST, "/v1/operations/orders/begin".into(), Some(json!({"key": "job-2"})), "operation"),
        (Method::DELETE, format!("/v1/operations/orders/{op_id}"), None, "deleting an operation"),
        (Method::POST, format!("/v1/receipts/{receipt}/replay"), None, "replaying"),
        (Method::POST, format!("/v1/receipts/{receipt}/discard"), None, "discarding"),
        (Method::POST, "/v1/receipts/replay".into(), Some(json!({"status": "dead"})), "replaying"),
    ];
    for (method, path, body, names) in writes {
        let reply = send(&viewer, method.clone(), &path, body).await;
        assert_forbidden(&reply, "viewer", names, &format!("{method} {path}"));
        assert!(reply.json()["detail"].as_str().is_some_and(|d| d.contains("can = \"read\"")), "{path}");
    }
    assert_forbidden(&event(&viewer, "plain", "e2", &[]).await, "viewer", "event intake", "intake");
    let counted =
        expect(&viewer, Method::POST, "/v1/receipts/replay", Some(json!({"status": "dead", "dry_run": true})), 200)
            .await;
    assert!(counted["matching"].is_u64(), "a dry run only counts, which a viewer may: {counted}");

    // Nothing changed: the claim and the operation are there, nothing new was claimed or queued.
    expect(&admin, Method::GET, &format!("/v1/claims/orders/{id}"), None, 200).await;
    expect(&admin, Method::GET, &format!("/v1/operations/orders/{op_id}"), None, 200).await;
    let looked =
        expect(&admin, Method::POST, "/v1/claims/orders/lookup", Some(json!({"items": [{"key": "o-2"}]})), 200).await;
    assert_eq!(looked["results"][0]["exists"], false);
    let listed = expect(&admin, Method::GET, "/v1/receipts?limit=1000", None, 200).await;
    assert_eq!(listed["receipts"].as_array().map(Vec::len), Some(1), "no event was accepted");
    let shown = expect(&admin, Method::GET, &format!("/v1/receipts/{receipt}"), None, 200).await;
    assert_eq!(shown["round"], 1, "not replayed");
    s.stop().await;
}

#[tokio::test]
async fn a_write_token_limited_to_survey_claims_there_and_nowhere_else() {
    let s = start().await;
    let bot = s.client_with_token("survey-s3cret");
    let admin = s.client_with_token("admin-s3cret");
    let mine = expect(&bot, Method::POST, "/v1/claims/survey", Some(json!({"parts": ["s1", "u3"]})), 201).await;
    expect(&bot, Method::GET, &format!("/v1/claims/survey/{}", mine["id"].as_str().expect("id")), None, 200).await;
    let theirs = expect(&admin, Method::POST, "/v1/claims/orders", Some(json!({"key": "o-1"})), 201).await;
    let theirs = theirs["id"].as_str().expect("id").to_owned();
    let refused: Vec<(Method, String, Option<Value>)> = vec![
        (Method::POST, "/v1/claims/orders".into(), Some(json!({"key": "o-2"}))),
        (Method::POST, "/v1/claims/orders/batch".into(), Some(json!({"items": [{"key": "o-2"}]}))),
        (Method::POST, "/v1/claims/orders/lookup".into(), Some(json!({"items": [{"key": "o-1"}]}))),
        (Method::GET, format!("/v1/claims/orders/{theirs}"), None),
        (Method::DELETE, format!("/v1/claims/orders/{theirs}"), None),
        (Method::POST, "/v1/operations/orders/begin".into(), Some(json!({"key": "job"}))),
        (Method::GET, format!("/v1/operations/orders/{theirs}"), None),
    ];
    for (method, path, body) in refused {
        let reply = send(&bot, method.clone(), &path, body).await;
        assert_forbidden(&reply, "survey-bot", "namespace orders", &format!("{method} {path}"));
    }
    let op = expect(&bot, Method::POST, "/v1/operations/survey/begin", Some(json!({"key": "job-2"})), 201).await;
    let op_id = op["id"].as_str().expect("id");
    let done = json!({"token": op["token"]});
    expect(&bot, Method::POST, &format!("/v1/operations/survey/{op_id}/complete"), Some(done), 200).await;
    let reply = send(&bot, Method::DELETE, &format!("/v1/operations/survey/{op_id}"), None).await;
    assert_forbidden(&reply, "survey-bot", "deleting an operation", "only admin deletes operations");
    expect(&admin, Method::DELETE, &format!("/v1/operations/survey/{op_id}"), None, 204).await;
    // Nothing was made in orders, and its claim is still there.
    let looked =
        expect(&admin, Method::POST, "/v1/claims/orders/lookup", Some(json!({"items": [{"key": "o-2"}]})), 200).await;
    assert_eq!(looked["results"][0]["exists"], false);
    expect(&admin, Method::GET, &format!("/v1/claims/orders/{theirs}"), None, 200).await;
    s.stop().await;
}

#[tokio::test]
async fn partners_send_on_their_signature_alone_and_tokens_write_only_their_sources() {
    let s = start().await;
    let admin = s.client_with_token("admin-s3cret");
    let secret = SigningSecret::parse(PARTNER_SECRET).expect("secret");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64;
    let body = r#"{"id":"p1"}"#;
    let (ts, sig) = (now.to_string(), sign(&secret, "msg_p1", now, body.as_bytes()));
    let signed = [("webhook-id", "msg_p1"), ("webhook-timestamp", ts.as_str()), ("webhook-signature", sig.as_str())];
    let reply = event(&s.client, "signed", "p1", &signed).await;
    assert_eq!(reply.status, 202, "a signed event needs no token: {}", String::from_utf8_lossy(&reply.body));
    assert_problem(&event(&admin, "signed", "p2", &[]).await, 401, "unsigned, even with the admin token");
    let wrong = [("webhook-id", "msg_p1"), ("webhook-timestamp", ts.as_str()), ("webhook-signature", "v1,AAAA")];
    assert_problem(&event(&admin, "signed", "p1", &wrong).await, 401, "a bad signature with a token");

    assert_problem(&event(&s.client, "plain", "e1", &[]).await, 401, "an unsigned source needs a token");
    assert_problem(&event(&s.client_with_token("nope"), "plain", "e1", &[]).await, 401, "an unknown token");
    let feeder = s.client_with_token("feeder-s3cret");
    assert_eq!(event(&feeder, "plain", "e1", &[]).await.status, 202, "a write token for this source");
    let survey = s.client_with_token("survey-s3cret");
    assert_eq!(event(&survey, "plain", "e2", &[]).await.status, 202, "a write token for every source");
    assert_problem(&event(&s.client_with_token("plain-viewer-s3cret"), "plain", "e3", &[]).await, 403, "read only");

    // Receipts follow the token's sources.
    let plain_viewer = s.client_with_token("plain-viewer-s3cret");
    expect(&plain_viewer, Method::GET, "/v1/receipts?source=plain", None, 200).await;
    let all = send(&plain_viewer, Method::GET, "/v1/receipts", None).await;
    assert_forbidden(&all, "plain-viewer", "give source", "a listing must name its source");
    assert_forbidden(
        &send(&plain_viewer, Method::GET, "/v1/receipts?source=signed", None).await,
        "plain-viewer",
        "source signed",
        "another source",
    );
    let partner_receipt = reply.json()["receipt_id"].as_str().expect("receipt").to_owned();
    let other = send(&plain_viewer, Method::GET, &format!("/v1/receipts/{partner_receipt}"), None).await;
    assert_forbidden(&other, "plain-viewer", "source signed", "another source's receipt");
    let replay = send(&feeder, Method::POST, &format!("/v1/receipts/{partner_receipt}/replay"), None).await;
    assert_forbidden(&replay, "feeder", "replaying", "only admin replays");

    let metrics = String::from_utf8_lossy(&send(&s.client, Method::GET, "/metrics", None).await.body).into_owned();
    for label in ["token=\"signature\"", "token=\"feeder\"", "token=\"tokens[0]\"", "token=\"none\""] {
        assert!(metrics.contains(label), "metrics label requests by token name: {label}");
    }
    assert!(!metrics.contains("s3cret"), "never the secret");
    s.stop().await;
}

#[tokio::test]
async fn only_admin_replays_discards_and_deletes_operations() {
    let s = start().await;
    let admin = s.client_with_token("admin-s3cret");
    let receipt = event(&admin, "plain", "e1", &[]).await.json()["receipt_id"].as_str().expect("receipt").to_owned();
    // The handler refuses connections and the source tries once: the receipt goes dead.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while expect(&admin, Method::GET, &format!("/v1/receipts/{receipt}"), None, 200).await["status"] != "dead" {
        assert!(std::time::Instant::now() < deadline, "never dead");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for token in ["viewer-s3cret", "survey-s3cret", "feeder-s3cret"] {
        let client = s.client_with_token(token);
        assert_problem(
            &send(&client, Method::POST, &format!("/v1/receipts/{receipt}/discard"), None).await,
            403,
            token,
        );
        assert_problem(&send(&client, Method::POST, &format!("/v1/receipts/{receipt}/replay"), None).await, 403, token);
    }
    expect(&admin, Method::POST, &format!("/v1/receipts/{receipt}/discard"), None, 200).await;
    expect(&admin, Method::POST, &format!("/v1/receipts/{receipt}/replay"), None, 202).await;
    s.stop().await;
}

/// `idem token new` makes a token that works as its table says; the CLI shows a 403's reason; an
/// admin action is logged with the token's name and never its secret.
#[tokio::test]
async fn idem_token_new_makes_working_tokens_and_admin_actions_are_logged_by_name() {
    use crate::support::binary::{self, Idem};
    let new = |args: &[&str]| {
        let (code, out, err) = binary::run(&[&["token", "new"], args].concat(), &[]);
        assert_eq!(code, 0, "{err}");
        let token = out.lines().find(|l| l.starts_with("idem_")).expect("the token").to_owned();
        let table = out[out.find("[[auth.token]]").expect("the table")..].to_owned();
        assert!(!table.contains(&token), "the table holds the hash, not the token");
        (token, table)
    };
    let (reader, reader_table) = new(&["--can", "read", "--namespace", "survey"]);
    let (ops, ops_table) = new(&["--can", "admin", "--name", "ops"]);
    assert!(reader_table.contains("name = \"read-survey-"), "{reader_table}");
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("idem.toml");
    std::fs::write(&config, format!("{reader_table}\n{ops_table}")).expect("config");
    let idem = Idem::serve(&dir.path().join("data"), &["--config", config.to_str().expect("path")]);
    let cli = |args: &[&str], token: &str| {
        binary::run(&[args, &["--server", idem.url.as_str(), "--token", token]].concat(), &[])
    };
    let (code, _, err) = cli(&["claims", "put", "survey", "--key", "k"], &reader);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("403") && err.contains("can = \"read\""), "the CLI shows why: {err}");
    let (code, _, err) = cli(&["claims", "put", "survey", "--key", "k"], &ops);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&["claims", "get", "survey", "--key", "k"], &reader);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"survey\""), "{out}");
    let (code, _, err) = cli(&["claims", "get", "orders", "--key", "k"], &reader);
    assert!(code == 1 && err.contains("namespace orders"), "{err}");

    let client = ApiClient::new(&idem.url, Some(ops.clone())).expect("client");
    let op = expect(&client, Method::POST, "/v1/operations/survey/begin", Some(json!({"key": "job"})), 201).await;
    let id = op["id"].as_str().expect("id").to_owned();
    let done = json!({"token": op["token"]});
    expect(&client, Method::POST, &format!("/v1/operations/survey/{id}/complete"), Some(done), 200).await;
    let (code, _, err) = cli(&["operations", "delete", "survey", &id], &ops);
    assert_eq!(code, 0, "{err}");
    let logged = idem.wait_for_log("operation deleted", std::time::Duration::from_secs(10));
    assert!(logged.contains("ops") && logged.contains(&id), "{logged}");
    let rest: Vec<String> = idem.log.try_iter().collect();
    assert!(
        !logged.contains(&ops) && !rest.iter().any(|l| l.contains(&ops) || l.contains(&reader)),
        "never the secret"
    );
}

/// Rotating a token without a restart: edit `[auth]`, `kill -HUP` (what `systemctl reload` sends),
/// and from then on the new token works and the old one is 401, with the process and the
/// connection already open untouched. A config with a mistake, or one with no tokens left (which
/// would open idem to anyone), changes nothing and says why in the log.
#[tokio::test]
async fn sighup_reads_the_tokens_again_and_refuses_a_config_that_would_open_idem() {
    use std::time::Duration;

    use crate::support::binary::Idem;
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("idem.toml");
    let table = |name: &str, secret: &str| {
        format!("[[auth.token]]\nname = \"{name}\"\ntoken = \"{secret}\"\ncan = \"write\"\n")
    };
    std::fs::write(&config, table("partner", "old-s3cret")).expect("config");
    let idem = Idem::serve(&dir.path().join("data"), &["--config", config.to_str().expect("path")]);
    let hangup = || {
        let pid = idem.child.id().to_string();
        assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().expect("kill -HUP").success());
    };
    let old = ApiClient::new(&idem.url, Some("old-s3cret".into())).expect("client");
    let new = ApiClient::new(&idem.url, Some("new-s3cret".into())).expect("client");
    let claim = |n: u32| Some(json!({"key": format!("k{n}")}));
    expect(&old, Method::POST, "/v1/claims/orders", claim(1), 201).await;
    expect(&new, Method::POST, "/v1/claims/orders", claim(2), 401).await;

    std::fs::write(&config, table("partner-2026-12", "new-s3cret")).expect("config");
    hangup();
    let logged = idem.wait_for_log("tokens read again", Duration::from_secs(10));
    assert!(logged.contains("tokens=1") && !logged.contains("s3cret"), "{logged}");
    expect(&new, Method::POST, "/v1/claims/orders", claim(3), 201).await;
    expect(&old, Method::POST, "/v1/claims/orders", claim(4), 401).await;

    std::fs::write(&config, format!("{}\nnot toml =", table("partner", "other-s3cret"))).expect("config");
    hangup();
    let logged = idem.wait_for_log("the tokens stay as they were", Duration::from_secs(10));
    assert!(logged.contains("idem.toml") && !logged.contains("s3cret"), "{logged}");
    expect(&new, Method::POST, "/v1/claims/orders", claim(5), 201).await;

    std::fs::write(&config, "[limits]\nmax_body_bytes = 1048576\n").expect("config");
    hangup();
    let logged = idem.wait_for_log("the tokens stay as they were", Duration::from_secs(10));
    assert!(logged.contains("let anyone in"), "{logged}");
    expect(&new, Method::POST, "/v1/claims/orders", claim(6), 201).await;
    let anonymous = ApiClient::new(&idem.url, None).expect("client");
    expect(&anonymous, Method::POST, "/v1/claims/orders", claim(7), 401).await;
}
