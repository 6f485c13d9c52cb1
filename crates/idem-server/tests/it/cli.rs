//! The command line as a user types it: `idem config check`, `idem claims put|get|delete`,
//! `idem operations get|delete`, `idem import`, `idem health` and `idem --version`, run as real
//! processes against a real server.

use http::Method;
use serde_json::json;

use crate::support::TestServer;
use crate::support::binary::run;

async fn idem(args: Vec<String>) -> (i32, String, String) {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args, &[])
    })
    .await
    .expect("idem ran")
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn config_check_prints_the_effective_config_with_secrets_redacted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("idem.toml");
    let text = "listen = \"127.0.0.1:7171\"\n[auth]\ntokens = [\"s3cret-token\"]\n[namespaces.notified_articles]\ndefault_ttl = \"90d\"\n";
    std::fs::write(&file, text).expect("write");
    let (code, stdout, stderr) =
        run(&["config", "check", "--config", file.to_str().expect("utf-8")], &[("IDEM_LOG__LEVEL", "debug")]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("listen = \"127.0.0.1:7171\""), "{stdout}");
    assert!(stdout.contains("default_ttl = \"90d\""), "{stdout}");
    assert!(stdout.contains("level = \"debug\""), "env applies: {stdout}");
    assert!(stdout.contains("[redacted]") && !stdout.contains("s3cret"), "{stdout}");
}

/// `scope = []` is allowed, said out loud; a `[gateway.jwt]` key file that holds no key, and a
/// secret too short, are named by key (the secret never printed).
#[test]
fn config_check_warns_of_a_route_with_no_callers_and_checks_the_jwt_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let check = |text: &str| {
        let file = dir.path().join("idem.toml");
        std::fs::write(&file, text).expect("write");
        run(&["config", "check", "--config", file.to_str().expect("utf-8")], &[])
    };
    let gateway = "[gateway]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000\"\n";
    let (code, stdout, stderr) = check(&format!("{gateway}[[gateway.routes]]\npath = \"/jobs\"\nscope = []\n"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("warning: gateway.routes[0] (/jobs): scope = [] lets every caller share"), "{stderr}");
    assert!(stdout.contains("scope = []"), "{stdout}");
    let not_a_key = dir.path().join("not-a-key.pem");
    std::fs::write(&not_a_key, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").expect("write");
    let jwt_route = "[[gateway.routes]]\npath = \"/orders\"\nscope = [\"jwt:sub\"]\n";
    let pem = format!("{gateway}{jwt_route}[gateway.jwt]\npublic_key_file = {not_a_key:?}\n");
    let (code, _, stderr) = check(&pem);
    assert_eq!(code, 2);
    assert!(stderr.contains("gateway.jwt.public_key_file") && stderr.contains("no PEM public key"), "{stderr}");
    let (code, _, stderr) = check(&format!("{gateway}{jwt_route}[gateway.jwt]\nsecret = \"hunter2-hunter2\"\n"));
    assert_eq!(code, 2);
    assert!(stderr.contains("gateway.jwt.secret") && !stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn config_check_refuses_what_serve_would_and_names_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let check = |text: &str| {
        let file = dir.path().join("idem.toml");
        std::fs::write(&file, text).expect("write");
        run(&["config", "check", "--config", file.to_str().expect("utf-8")], &[])
    };
    let (code, _, stderr) = check("listen = \"0.0.0.0:7070\"\n");
    assert_eq!(code, 2, "a public listen without tokens fails the check as it fails serve: {stderr}");
    assert!(stderr.contains("--insecure-no-auth"), "{stderr}");
    let source = "[[sources]]\nname = \"p\"\nhandler_url = \"ftp://x\"\nevent_id = \"/id\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
    let (code, _, stderr) = check(source);
    assert_eq!(code, 2);
    assert!(stderr.contains("sources[0].handler_url"), "{stderr}");
    let (code, _, stderr) = check("[sweeper]\nbatch = -5\n");
    assert_eq!(code, 2);
    assert!(
        stderr.contains("sweeper.batch") && stderr.contains("whole number") && !stderr.contains("usize"),
        "{stderr}"
    );
    assert_eq!(check("listen = \"localhost:7171\"\n").0, 0, "localhost works");
}

/// A new team's first config: an unquoted string and a mistyped key. The syntax mistake is told in
/// words with its line, and does not hide the other mistake.
#[test]
fn config_check_explains_a_syntax_mistake_and_still_checks_the_rest() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("idem.toml");
    let gateway = "[gateway]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000\"\n";
    let text =
        format!("[log]\nlevel = info\n\n{gateway}[[gateway.routes]]\npath = \"/charges\"\nscpoe = [\"header:X\"]\n");
    std::fs::write(&file, text).expect("write");
    let (code, stdout, stderr) = run(&["config", "check", "--config", file.to_str().expect("utf-8")], &[]);
    assert_eq!(code, 2, "a config mistake: {stderr}");
    assert!(stdout.is_empty(), "no config printed: {stdout}");
    for part in [
        "idem: 2 mistakes in the config:",
        "is not valid TOML: line 2, column 9: a bare word where a value is expected: strings need quotes: level = \"info\"",
        "    2 | level = info\n",
        "The rest of the file was checked with line 2 left out.",
        "`gateway.routes[0].scpoe` (idem.toml line 9, column 1)",
        "Did you mean `scope`?",
    ] {
        assert!(stderr.contains(part), "{part:?} in:\n{stderr}");
    }
    std::fs::write(&file, "[log\nlevel = \"info\"\n").expect("write");
    let (code, _, stderr) = run(&["config", "check", "--config", file.to_str().expect("utf-8")], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("line 1, column") && stderr.contains("was not checked"), "{stderr}");
}

/// `idem claims delete NS` with nothing to delete says every way to name what: one claim, or a
/// prefix. A usage mistake (exit 2), found before any server is asked.
#[test]
fn claims_delete_without_a_claim_names_the_prefix_form() {
    let (code, _, stderr) = run(&["claims", "delete", "survey", "--server", "http://127.0.0.1:9"], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--key") && stderr.contains("--prefix PART"), "{stderr}");
    let (code, stdout, _) = run(&["claims", "delete", "--help"], &[]);
    assert_eq!(code, 0);
    assert!(stdout.contains("--prefix"), "{stdout}");
    let (code, _, stderr) = run(&["claims", "get", "survey", "--server", "http://127.0.0.1:9"], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("give either an id or --key/--part") && !stderr.contains("--prefix"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_put_get_delete() {
    let s = TestServer::start().await;
    let server = ["--server", s.url.as_str()];
    let put = |data: &str| {
        let mut a = args(&["claims", "put", "survey", "--part", "scenario-1", "--part", "user-3", "--data", data]);
        a.extend(args(&server));
        a
    };
    let (code, stdout, stderr) = idem(put(r#"{"answer":"A"}"#)).await;
    assert_eq!(code, 0, "{stderr}");
    let first: serde_json::Value = serde_json::from_str(&stdout).expect("json out");
    assert_eq!(first["claimed"], true);
    let (code, stdout, stderr) = idem(put(r#"{"answer":"B"}"#)).await;
    assert_eq!(code, 3, "a key already claimed exits 3: {stderr}");
    let second: serde_json::Value = serde_json::from_str(&stdout).expect("json out");
    assert_eq!(second["claimed"], false);
    assert_eq!(second["data"], json!({"answer": "A"}));

    let id = first["id"].as_str().expect("id").to_owned();
    let mut get = args(&["claims", "get", "survey", &id]);
    get.extend(args(&server));
    let (code, stdout, _) = idem(get.clone()).await;
    assert_eq!(code, 0);
    assert!(stdout.contains("scenario-1"));
    let mut by_key = args(&["claims", "delete", "survey", "--part", "scenario-1", "--part", "user-3"]);
    by_key.extend(args(&server));
    assert_eq!(idem(by_key.clone()).await.0, 0, "delete by key");
    let (code, _, stderr) = idem(by_key).await;
    assert_eq!(code, 1, "a second delete finds nothing");
    assert!(stderr.contains("404"), "{stderr}");
    assert_eq!(idem(get).await.0, 1, "get of a deleted claim exits 1");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_get_delete() {
    let s = TestServer::start().await;
    let begun = s.post("/v1/operations/orders/begin", json!({"parts": ["order-9", "create"]}), 201).await;
    let get = || args(&["operations", "get", "orders", "--part", "order-9", "--part", "create", "--server", &s.url]);
    let (code, stdout, stderr) = idem(get()).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("in_progress") && !stdout.contains("token"), "{stdout}");
    let id = begun["id"].as_str().expect("id").to_owned();
    let delete = args(&["operations", "delete", "orders", &id, "--server", &s.url]);
    let (code, _, stderr) = idem(delete.clone()).await;
    assert_eq!(code, 1, "a held operation is not deleted");
    assert!(stderr.contains("409"), "{stderr}");
    let complete = json!({"token": begun["token"], "result": {"order": 9}});
    s.post(&format!("/v1/operations/orders/{id}/complete"), complete, 200).await;
    let (code, stdout, _) = idem(get()).await;
    assert_eq!(code, 0);
    assert!(stdout.contains("\"order\": 9"), "{stdout}");
    assert_eq!(idem(delete.clone()).await.0, 0, "a completed operation is forgotten");
    assert_eq!(idem(delete).await.0, 1, "then it is absent");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_loads_json_lines_and_reports_bad_lines() {
    let s = TestServer::start().await;
    s.post("/v1/claims/survey", json!({"parts": ["s1", "u1", "n1"]}), 201).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("legacy.jsonl");
    let lines = [
        r#"{"parts": ["s1", "u1", "n1"], "data": {"legacy": true}}"#,
        r#"{"parts": ["s1", "u2", "n1"], "data": {"legacy": true}}"#,
        "",
        r#"{"parts": ["s1", ""]}"#,
        r#"{"namespace": "notified_articles", "key": "https://example.com/x", "ttl_seconds": 3600}"#,
        "not json",
        r#"{"parts": ["s1", "u3", "n1"], "created_at": "2025-12-24T18:30:00Z"}"#,
        r#"{"parts": ["s1", "u4", "n1"], "created_at": "next tuesday"}"#,
    ];
    std::fs::write(&file, lines.join("\n")).expect("write");
    let (code, _, stderr) =
        idem(args(&["import", file.to_str().expect("utf-8"), "--namespace", "survey", "--server", &s.url])).await;
    assert_eq!(code, 1, "rejected lines make the import fail: {stderr}");
    assert!(stderr.contains("line 4") && stderr.contains("line 6"), "bad lines are named: {stderr}");
    assert!(stderr.contains("line 8") && stderr.contains("created_at"), "{stderr}");
    assert!(stderr.contains("3 claimed, 1 already present, 3 rejected"), "{stderr}");
    let kept = s.post("/v1/claims/survey/lookup", json!({"items": [{"parts": ["s1", "u3", "n1"]}]}), 200).await;
    assert_eq!(
        kept["results"][0]["record"]["created_at"], "2025-12-24T18:30:00.000000Z",
        "a legacy record keeps its time"
    );
    let out = s.post("/v1/claims/survey/lookup", json!({"items": [{"parts": ["s1", "u2", "n1"]}]}), 200).await;
    assert_eq!(out["results"][0]["record"]["data"], json!({"legacy": true}));
    let out =
        s.post("/v1/claims/notified_articles/lookup", json!({"items": [{"key": "https://example.com/x"}]}), 200).await;
    assert!(out["results"][0]["record"]["expires_at"].is_string());
    let _ = s.expect(Method::GET, "/healthz", None, 200).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_list_show_replay() {
    let source: idem_server::config::SourceConfig = toml::from_str(
        "name = \"partner\"\nhandler_url = \"http://127.0.0.1:9/never\"\nevent_id = \"/id\"\nmax_attempts = 1\n\
         signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
    )
    .expect("source");
    let s = TestServer::start_with(|c| c.sources = vec![source], std::sync::Arc::new(idem_core::SystemClock)).await;
    let reply = s
        .client
        .send_with(
            Method::POST,
            "/v1/sources/partner/events",
            Some(bytes::Bytes::from_static(b"{\"id\":\"e1\"}")),
            &[("content-type", "application/json")],
        )
        .await
        .expect("intake");
    assert_eq!(reply.status, 202);
    let id = reply.json()["receipt_id"].as_str().expect("id").to_owned();
    let server = ["--server", s.url.as_str()];
    let with_server = |mut a: Vec<String>| {
        a.extend(args(&server));
        a
    };
    // The handler is unreachable and max_attempts is 1: the receipt goes dead.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (code, stdout, _) = idem(with_server(args(&["receipts", "show", &id]))).await;
        assert_eq!(code, 0);
        if stdout.contains("\"dead\"") {
            assert!(stdout.contains("\"error\""), "the failed attempt is recorded: {stdout}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never went dead: {stdout}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (code, stdout, _) =
        idem(with_server(args(&["receipts", "list", "--status", "dead", "--source", "partner"]))).await;
    assert_eq!(code, 0);
    assert!(stdout.contains(&id), "{stdout}");
    let page: serde_json::Value = serde_json::from_str(&stdout).expect("piped: JSON by default");
    assert_eq!(page["receipts"][0]["id"], id.as_str());
    let (code, table, _) = idem(with_server(args(&["receipts", "list", "--output", "table"]))).await;
    assert_eq!(code, 0);
    let mut lines = table.lines();
    assert!(
        lines.next().is_some_and(|h| h.starts_with("ID") && h.contains("STATUS") && h.contains("CREATED")),
        "{table}"
    );
    let row = lines.next().unwrap_or_default();
    assert!(row.starts_with(&id) && row.contains("partner") && row.contains("e1") && row.contains("dead"), "{table}");
    for (bad, why) in [
        (vec!["receipts", "replay", "--status", "dead", "--created-before", "yesterday"], "an unparseable time"),
        (vec!["receipts", "list", "--status", "deadd"], "an unknown status"),
        (vec!["receipts", "list", "--output", "yaml"], "an unknown output"),
        (vec!["receipts", "list", "--limit", "0"], "a limit the server refuses (400)"),
        (vec!["claims", "put", "ns", "--key", "k", "--ttl-seconds", "0"], "a TTL the server refuses (400)"),
    ] {
        let (code, _, stderr) = idem(with_server(args(&bad))).await;
        assert_eq!(code, 2, "{why} is a usage error: {stderr}");
    }
    let dry = ["receipts", "replay", "--status", "dead", "--source", "partner", "--dry-run"];
    let (code, stdout, _) = idem(with_server(args(&dry))).await;
    assert_eq!((code, stdout.contains("\"matching\": 1")), (0, true), "{stdout}");
    let (code, _, stderr) = idem(with_server(args(&["receipts", "replay"]))).await;
    assert_eq!(code, 2, "neither an id nor filters: a usage error, nothing replayed: {stderr}");
    assert!(stderr.contains("--status"), "{stderr}");
    let (code, _, _) = idem(with_server(args(&["receipts", "replay", &id, "--status", "dead"]))).await;
    assert_eq!(code, 2, "an id and filters at once");
    let (code, stdout, _) = idem(with_server(args(&dry[..dry.len() - 1]))).await;
    assert_eq!((code, stdout.contains("\"queued\": 1")), (0, true), "{stdout}");
    wait_dead(&s, &id).await;
    let (code, stdout, _) = idem(with_server(args(&["receipts", "discard", &id]))).await;
    assert_eq!((code, stdout.contains("\"discarded\"")), (0, true), "{stdout}");
    let (code, stdout, _) = idem(with_server(args(&["receipts", "replay", &id]))).await;
    assert_eq!(code, 0);
    assert!(stdout.contains("\"accepted\""), "{stdout}");
    let (code, _, stderr) =
        idem(with_server(args(&["receipts", "show", "rcpt_000000000000000000000000000000000000"]))).await;
    assert_eq!(code, 1, "{stderr}");
    s.stop().await;
}

async fn wait_dead(s: &TestServer, id: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while s.expect(Method::GET, &format!("/v1/receipts/{id}"), None, 200).await["status"] != "dead" {
        assert!(std::time::Instant::now() < deadline, "never went dead again");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// With stderr not a terminal the log is plain text (no colour codes), and a script can read the
/// address `--listen 127.0.0.1:0` chose from the `idem listening addr=…` line. An `IDEM_` variable
/// that is no config key (the PHP handler's IDEM_SIGNING_SECRET) is ignored with a warning, not a
/// refusal to start.
#[tokio::test]
async fn serve_logs_plainly_to_a_pipe_and_names_the_port_it_chose() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = std::process::Command::new(crate::support::binary::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("IDEM_CONFIG")
        .env_remove("IDEM_LOG__FORMAT")
        .env_remove("NO_COLOR")
        .env("IDEM_SIGNING_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn idem");
    let stderr = child.stderr.take().expect("piped");
    let lines = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let done = line.contains("idem listening");
            seen.push(line);
            if done {
                break;
            }
        }
        seen
    })
    .await
    .expect("read the log");
    let log = lines.join("\n");
    assert!(!log.contains('\u{1b}'), "no ANSI escape codes in a piped log:\n{log}");
    assert!(log.contains("IDEM_SIGNING_SECRET is not idem config") && !log.contains("MfKQ9r8"), "{log}");
    let listening = lines.last().expect("a listening line");
    let addr = listening.split("idem listening addr=").nth(1).and_then(|rest| rest.split(' ').next());
    let addr: std::net::SocketAddr = addr.and_then(|a| a.parse().ok()).unwrap_or_else(|| panic!("{listening}"));
    assert_ne!(addr.port(), 0);
    let client = idem_server::cli::client::ApiClient::new(&format!("http://{addr}"), None).expect("client");
    assert_eq!(client.send(Method::GET, "/healthz", None).await.expect("healthz").status, 200);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn secret_new_prints_a_signing_secret_that_a_source_accepts() {
    let (code, stdout, stderr) = run(&["secret", "new"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let secret = stdout.trim();
    assert!(secret.starts_with("whsec_") && stdout.lines().count() == 1, "{stdout}");
    assert!(stderr.contains("signing_secret"), "says where it goes: {stderr}");
    assert_ne!(run(&["secret", "new"], &[]).1.trim(), secret, "new each time");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("idem.toml");
    let source = format!(
        "[[sources]]\nname = \"p\"\nhandler_url = \"http://127.0.0.1:9/h\"\nevent_id = \"/id\"\nsigning_secret = \"{secret}\"\n"
    );
    std::fs::write(&file, source).expect("write");
    let (code, _, stderr) = run(&["config", "check", "--config", file.to_str().expect("utf-8")], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(run(&["secret", "new", "--bytes", "16"], &[]).0, 2, "fewer than 24 bytes is a usage error");
}

/// The example config that ships with idem checks clean: every section, every value valid.
#[test]
fn the_example_config_checks_clean() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../idem.example.toml");
    let text = std::fs::read_to_string(example).expect("idem.example.toml");
    let (code, stdout, stderr) = run(&["config", "check", "--config", example], &[]);
    assert_eq!(code, 0, "{stderr}");
    for section in [
        "[store]",
        "[auth]",
        "[[auth.token]]",
        "[http]",
        "[tls]",
        "[limits]",
        "[sweeper]",
        "[events]",
        "[log]",
        "[namespaces",
        "[gateway]",
        "[[gateway.routes]]",
        "[resp]",
        "[[sources]]",
    ] {
        assert!(text.contains(section), "the example shows {section}");
    }
    assert!(stdout.contains("[gateway]") && stdout.contains("[[sources]]"), "{stdout}");
}

/// `idem claims list|delete NS --prefix …` against a server found through IDEM_URL (or its older
/// name IDEM_SERVER); a refused connection says how to point the CLI elsewhere; a server that is
/// not idem is said to be so (contract §12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_list_and_delete_a_prefix_found_through_idem_url() {
    let s = TestServer::start().await;
    let items: Vec<_> = (0..1205).map(|i| json!({"parts": ["scenario-1", format!("user-{i:04}")]})).collect();
    s.post("/v1/claims/survey/batch", json!({"items": items}), 200).await;
    s.post("/v1/claims/survey", json!({"parts": ["scenario-2", "user-0001"]}), 201).await;
    let run_env = |argv: Vec<String>, env: Vec<(String, String)>| {
        tokio::task::spawn_blocking(move || {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            run(&argv, &env)
        })
    };
    let url = vec![("IDEM_URL".to_owned(), s.url.clone())];
    let (code, stdout, stderr) =
        run_env(args(&["claims", "list", "survey", "--prefix", "scenario-1"]), url.clone()).await.expect("ran");
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON record per line")).collect();
    assert_eq!(lines.len(), 1205, "every page followed");
    assert_eq!(lines[0]["parts"], json!(["scenario-1", "user-0000"]));
    assert_eq!(lines[1204]["parts"], json!(["scenario-1", "user-1204"]), "in parts order");
    let old_name = vec![("IDEM_SERVER".to_owned(), s.url.clone())];
    let (code, stdout, stderr) =
        run_env(args(&["claims", "list", "survey", "--prefix", "scenario-2", "--limit", "5"]), old_name)
            .await
            .expect("ran");
    assert_eq!((code, stdout.lines().count()), (0, 1), "IDEM_SERVER still works: {stderr}");

    let (code, stdout, stderr) =
        run_env(args(&["claims", "delete", "survey", "--prefix", "scenario-1"]), url.clone()).await.expect("ran");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(stdout.trim()).expect("json"), json!({"deleted": 1205}));
    let (_, stdout, _) =
        run_env(args(&["claims", "list", "survey", "--prefix", "scenario-1"]), url).await.expect("ran");
    assert!(stdout.is_empty());

    // Nothing listens there: the message names the URL and how to change it.
    let port = crate::support::binary::free_port();
    let nobody = vec![("IDEM_URL".to_owned(), format!("http://127.0.0.1:{port}"))];
    let (code, _, stderr) = run_env(args(&["claims", "get", "survey", "--key", "k"]), nobody).await.expect("ran");
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}")) && stderr.contains("IDEM_URL") && stderr.contains("--server"),
        "{stderr}"
    );
    // Something that is not idem answers: said so, rather than "404 Not Found".
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let other = format!("http://{}", listener.local_addr().expect("addr"));
    let app = axum::Router::new().fallback(|| async { (http::StatusCode::NOT_FOUND, "<html>Not Found</html>") });
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (code, _, stderr) =
        run_env(args(&["claims", "get", "survey", "--key", "k"]), vec![("IDEM_URL".to_owned(), other.clone())])
            .await
            .expect("ran");
    assert_eq!(code, 1);
    assert!(stderr.contains("does not look like idem") && stderr.contains(&other), "{stderr}");
    s.stop().await;
}

/// `idem --version` names the version and the commit it was built from (build.rs): the hash git
/// gives for HEAD here, and a date.
#[test]
fn version_names_the_commit() {
    let (code, stdout, stderr) = run(&["--version"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let line = stdout.trim();
    let prefix = concat!("idem ", env!("CARGO_PKG_VERSION"), " (commit ");
    assert!(line.starts_with(prefix) && line.ends_with(')') && stdout.lines().count() == 1, "{stdout}");
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=7", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match head {
        Some(head) => assert!(line.contains(&format!("(commit {head}, 20")), "{line} names HEAD {head}"),
        None => assert!(line.contains("(commit unknown"), "outside git: {line}"),
    }
}

/// `idem health`, the container's health check: 0 when /readyz answers 200 (at --url or
/// IDEM_URL), 1 with one line naming the URL when nothing answers or /readyz is not 200, 2 for a
/// URL that is not one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_zero_only_when_ready() {
    let s = TestServer::start().await;
    let (code, stdout, stderr) = idem(args(&["health", "--url", &s.url])).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("/readyz answered 200"), "{stdout}");
    let url = s.url.clone();
    let (code, _, stderr) =
        tokio::task::spawn_blocking(move || run(&["health"], &[("IDEM_URL", &url)])).await.expect("ran");
    assert_eq!(code, 0, "IDEM_URL is read: {stderr}");
    s.stop().await;

    let closed = format!("http://127.0.0.1:{}", crate::support::binary::free_port());
    let (code, _, stderr) = idem(args(&["health", "--url", &closed])).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not ready") && stderr.contains(&closed) && stderr.trim().lines().count() == 1, "{stderr}");

    let unready = answer_once(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\ncontent-length: 50\r\nconnection: close\r\n\r\n{\"status\":503,\"detail\":\"the store is unavailable\"}",
    );
    let (code, _, stderr) = idem(args(&["health", "--url", &unready])).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("answered 503") && stderr.contains("the store is unavailable"), "{stderr}");

    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_url = format!("http://{}", silent.local_addr().expect("addr"));
    let (code, _, stderr) = idem(args(&["health", "--url", &silent_url, "--timeout", "1"])).await;
    assert_eq!(code, 1, "a server that never answers: {stderr}");
    assert!(stderr.contains("did not answer within 1s"), "{stderr}");

    assert_eq!(idem(args(&["health", "--url", "localhost:7070"])).await.0, 2, "not a URL: a usage error");
}

/// A server on a loopback port that answers its first request with `response`, then closes.
fn answer_once(response: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(response.as_bytes());
        }
    });
    url
}
