//! The real binary as a process: kill -9 under load loses nothing acknowledged, SIGTERM drains and
//! exits cleanly, and start-up refuses what would be unsafe.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Method;
use idem_server::cli::client::ApiClient;
use serde_json::json;

use crate::support::binary::{BIN, Idem, free_port, run};

/// Writers claim unique keys as fast as they can; idem is killed with SIGKILL mid-stream. After a
/// restart on the same data dir, every key that was answered 201 is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_write_load_loses_no_acknowledged_claim() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut idem = Idem::serve(dir.path(), &[]);
    let client = ApiClient::new(&idem.url, None).expect("client");
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop_at = Instant::now() + Duration::from_secs(10);
    let writers: Vec<_> = (0..32)
        .map(|w| {
            let (client, acknowledged) = (client.clone(), Arc::clone(&acknowledged));
            tokio::spawn(async move {
                for n in 0.. {
                    let key = format!("w{w}-{n}");
                    let Ok(reply) = client.send(Method::POST, "/v1/claims/crash", Some(&json!({ "key": key }))).await
                    else {
                        return; // the server is gone
                    };
                    if reply.status == 201 {
                        acknowledged.lock().expect("lock").push(key);
                    }
                    if Instant::now() > stop_at {
                        return;
                    }
                }
            })
        })
        .collect();
    // Let the load build, then kill without warning.
    while acknowledged.lock().expect("lock").len() < 2_000 && Instant::now() < stop_at {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    idem.kill9();
    for writer in writers {
        writer.await.expect("writer");
    }
    let acknowledged = acknowledged.lock().expect("lock").clone();
    assert!(acknowledged.len() >= 1_000, "the load ran: {} acknowledged", acknowledged.len());

    let idem = Idem::serve(dir.path(), &[]);
    let client = ApiClient::new(&idem.url, None).expect("client");
    for chunk in acknowledged.chunks(5_000) {
        let items: Vec<_> = chunk.iter().map(|k| json!({ "key": k })).collect();
        let reply = client
            .send(Method::POST, "/v1/claims/crash/lookup", Some(&json!({ "items": items })))
            .await
            .expect("lookup");
        let body = reply.json();
        let missing: Vec<_> = body["results"]
            .as_array()
            .expect("results")
            .iter()
            .zip(chunk)
            .filter(|(r, _)| r["exists"] != true)
            .map(|(_, k)| k.clone())
            .collect();
        assert!(missing.is_empty(), "acknowledged claims lost after kill -9: {missing:?}");
    }
}

/// Clients send gateway requests with new `Idempotency-Key`s as fast as they can; idem is killed
/// with SIGKILL mid-stream. After a restart every key whose response came back is replayed from
/// the store (the upstream is not called again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_gateway_load_loses_no_completed_key() {
    let upstream = crate::support::upstream::Upstream::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let gateway_port = crate::support::binary::free_port();
    let config = dir.path().join("idem.toml");
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\nupstream = \"{}\"\n\n[[gateway.routes]]\npath = \"/orders\"\nkey = \"required\"\n",
        upstream.url
    );
    std::fs::write(&config, text).expect("write config");
    let data = dir.path().join("data");
    let args = ["--config", config.to_str().expect("utf-8")];
    let mut idem = Idem::serve(&data, &args);
    // One caller: the route is scoped by `Authorization`, as by default.
    let gateway = ApiClient::new(&format!("http://127.0.0.1:{gateway_port}"), Some("load".into())).expect("client");
    let completed = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop_at = Instant::now() + Duration::from_secs(10);
    let clients: Vec<_> = (0..32)
        .map(|w| {
            let (gateway, completed) = (gateway.clone(), Arc::clone(&completed));
            tokio::spawn(async move {
                for n in 0.. {
                    let key = format!("g{w}-{n}");
                    let headers = [("content-type", "application/json"), ("idempotency-key", key.as_str())];
                    let body = Some(bytes::Bytes::from(format!("{{\"order\":\"{key}\"}}")));
                    let Ok(reply) = gateway.send_with(Method::POST, "/orders", body, &headers).await else {
                        return; // the server is gone
                    };
                    if reply.status == 201 {
                        completed.lock().expect("lock").push(key);
                    }
                    if Instant::now() > stop_at {
                        return;
                    }
                }
            })
        })
        .collect();
    while completed.lock().expect("lock").len() < 1_000 && Instant::now() < stop_at {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    idem.kill9();
    for client in clients {
        client.await.expect("client");
    }
    let completed = completed.lock().expect("lock").clone();
    assert!(completed.len() >= 500, "the load ran: {} completed", completed.len());

    let _idem = Idem::serve(&data, &args);
    let mut lost = Vec::new();
    for key in &completed {
        let headers = [("content-type", "application/json"), ("idempotency-key", key.as_str())];
        let body = Some(bytes::Bytes::from(format!("{{\"order\":\"{key}\"}}")));
        let reply = gateway.send_with(Method::POST, "/orders", body, &headers).await.expect("retry");
        if reply.status != 201 || reply.headers.get("idempotent-replayed").is_none_or(|v| v != "true") {
            lost.push(key.clone());
        }
    }
    assert!(lost.is_empty(), "completed keys not replayed after kill -9: {lost:?}");
    // Each completed key reached the upstream once, before the kill. (Its total count may still
    // grow after the kill by a request idem sent just before dying and the upstream counted late:
    // not a completed key, and never retried here.)
    let mut times = std::collections::HashMap::new();
    for key in upstream.keys().into_iter().flatten() {
        *times.entry(key).or_insert(0) += 1;
    }
    let again: Vec<_> = completed.iter().filter(|k| times.get(*k) != Some(&1)).collect();
    assert!(again.is_empty(), "completed requests that reached the upstream again: {again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_and_exits_cleanly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut idem = Idem::serve(dir.path(), &[]);
    let client = ApiClient::new(&idem.url, None).expect("client");
    let reply = client.send(Method::POST, "/v1/claims/n", Some(&json!({"key": "k"}))).await.expect("claim");
    assert_eq!(reply.status, 201);
    let status = idem.terminate();
    assert!(status.success(), "idem exits 0 on SIGTERM: {status:?}");
    let idem = Idem::serve(dir.path(), &[]);
    let client = ApiClient::new(&idem.url, None).expect("client");
    let reply = client.send(Method::POST, "/v1/claims/n", Some(&json!({"key": "k"}))).await.expect("claim");
    assert_eq!(reply.status, 200, "the claim survived the restart");
}

#[test]
fn a_second_idem_on_the_same_data_dir_refuses_to_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let _first = Idem::serve(dir.path(), &[]);
    let data_dir = dir.path().to_str().expect("utf-8 path");
    let (code, _, stderr) = run(&["serve", "--listen", "127.0.0.1:0", "--data-dir", data_dir], &[]);
    assert_ne!(code, 0);
    assert!(stderr.contains("in use by another idem process"), "clear message: {stderr}");
}

#[test]
fn a_public_address_without_tokens_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().to_str().expect("utf-8 path");
    let (code, _, stderr) = run(&["serve", "--listen", "0.0.0.0:0", "--data-dir", data_dir], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("refusing to listen on 0.0.0.0:0 with no [auth] tokens"), "{stderr}");
    assert!(stderr.contains("--insecure-no-auth"), "says how to proceed: {stderr}");
    assert!(stderr.contains("IDEM_AUTH__TOKENS"), "and the variable a container sets: {stderr}");
}

/// A data dir idem may not write (a volume left to root, idem running as another user) is refused
/// at start, naming the user idem runs as and the fixes. As root, idem runs as `nobody` through
/// `setpriv` (util-linux), and also meets a directory given to it whose `idem.db` was not; as
/// anyone else, a directory of mode 0555.
#[test]
fn a_data_dir_idem_may_not_write_is_refused_naming_the_user_and_the_fixes() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    // Another user may reach the data dir (but not write it).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    let data_dir = data.to_str().expect("utf-8 path");
    let root = rustix::process::geteuid().is_root();
    if root && std::process::Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: root, and no setpriv to run idem as another user");
        return;
    }
    let serve = || {
        let args = ["serve", "--listen", "127.0.0.1:0", "--data-dir", data_dir];
        let output = match root {
            true => std::process::Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
                .args(args)
                .output(),
            false => std::process::Command::new(BIN).args(args).output(),
        };
        let output = output.expect("run idem");
        (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    if !root {
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    }
    let (code, stderr) = serve();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&format!("cannot use data dir {data_dir}: Permission denied")), "{stderr}");
    let uid = if root { "65534".to_owned() } else { rustix::process::geteuid().as_raw().to_string() };
    for part in [format!("idem runs as uid {uid}"), format!("`chown -R {uid}:"), ":U`".into(), "fsGroup".into()] {
        assert!(stderr.contains(&part), "{part} in: {stderr}");
    }
    assert!(!stderr.contains("idem listening"), "{stderr}");
    if root {
        // `chown` without `-R`: the directory is idem's, the file left in it by root is not.
        std::os::unix::fs::chown(&data, Some(65534), Some(65534)).expect("chown");
        std::fs::write(data.join("idem.db"), "").expect("a file of root's");
        let (code, stderr) = serve();
        assert_eq!(code, Some(1), "{stderr}");
        let db = format!("cannot use data dir {data_dir}: {data_dir}/idem.db: Permission denied");
        assert!(stderr.contains(&db) && stderr.contains("`chown -R 65534:65534"), "{stderr}");
    }
}

#[test]
fn bad_config_stops_start_up_naming_the_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("idem.toml");
    std::fs::write(&file, "[namespaces.notified_articles]\ndefault_tll = \"90d\"\n").expect("write");
    let (code, _, stderr) = run(&["serve", "--config", file.to_str().expect("utf-8")], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("namespaces.notified_articles") && stderr.contains("default_tll"), "{stderr}");
    let (code, _, stderr) = run(&["serve", "--data-dir", "/tmp"], &[("IDEM_SWEEPER__BATCH", "lots")]);
    assert_eq!(code, 2);
    assert!(stderr.contains("sweeper.batch"), "{stderr}");
}

/// idem is killed with SIGKILL while a gateway request is at the upstream. After a restart the key
/// is still held (409) until the lease ends; then a retry executes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_request_killed_mid_flight_frees_its_key_after_the_lease() {
    let upstream = crate::support::upstream::Upstream::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let gateway_port = crate::support::binary::free_port();
    let config = dir.path().join("idem.toml");
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\nupstream = \"{}\"\n\n[[gateway.routes]]\npath = \"/orders\"\nkey = \"required\"\nlease = \"2s\"\n",
        upstream.url
    );
    std::fs::write(&config, text).expect("write config");
    let data = dir.path().join("data");
    let args = ["--config", config.to_str().expect("utf-8")];
    let mut idem = Idem::serve(&data, &args);
    let gateway = ApiClient::new(&format!("http://127.0.0.1:{gateway_port}"), None).expect("client");
    let started = Instant::now();
    let in_flight = {
        let gateway = gateway.clone();
        tokio::spawn(async move {
            let headers = [
                ("content-type", "application/json"),
                ("idempotency-key", "crash"),
                ("x-delay-ms", "10000"),
                ("authorization", "Bearer crash-test"),
            ];
            gateway.send_with(Method::POST, "/orders", Some(bytes::Bytes::from_static(b"{}")), &headers).await
        })
    };
    while upstream.count("/orders") == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    idem.kill9();
    assert!(in_flight.await.expect("task").is_err(), "the client lost its connection");

    let _idem = Idem::serve(&data, &args);
    let retry = || {
        let gateway = gateway.clone();
        async move {
            let headers = [
                ("content-type", "application/json"),
                ("idempotency-key", "crash"),
                ("authorization", "Bearer crash-test"),
            ];
            gateway
                .send_with(Method::POST, "/orders", Some(bytes::Bytes::from_static(b"{}")), &headers)
                .await
                .expect("request")
        }
    };
    let early = retry().await;
    assert_eq!(early.status, 409, "the dead request's lease still holds the key");
    assert!(started.elapsed() < Duration::from_secs(2), "checked within the lease");
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(started.elapsed()) + Duration::from_millis(200)).await;
    let late = retry().await;
    assert_eq!(late.status, 201, "after the lease the key is usable again");
    assert_eq!(upstream.count("/orders"), 2, "the retry executed again");
}

/// `idem migrate` then `idem serve --store postgres`: claims live in the database and survive a
/// restart. Skipped, loudly, without IDEM_TEST_DATABASE_URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_postgres_after_migrate() {
    let Some(schema) = crate::support::pg::TestSchema::create("serve_on_postgres").await else { return };
    let url = schema.url.clone();
    let (code, _, stderr) = run(&["migrate", "--database-url", &url], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("schema version"), "{stderr}");

    let dir = tempfile::tempdir().expect("temp dir");
    let claim = |idem: &Idem| {
        let client = ApiClient::new(&idem.url, None).expect("client");
        async move {
            client.send(Method::POST, "/v1/claims/pg", Some(&json!({"key": "k"}))).await.expect("claim").status.as_u16()
        }
    };
    let idem = Idem::serve(dir.path(), &["--store", "postgres", "--database-url", &url]);
    assert_eq!(claim(&idem).await, 201);
    drop(idem);
    let idem = Idem::serve(dir.path(), &["--store", "postgres", "--database-url", &url]);
    assert_eq!(claim(&idem).await, 200, "the claim is in the database");
    drop(idem);
}

#[test]
fn config_check_never_prints_the_database_password() {
    let (code, stdout, stderr) = run(
        &["config", "check", "--store", "postgres", "--database-url", "postgres://idem:hunter2@db.internal/idem"],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("type = \"postgres\"") && !stdout.contains("hunter2"), "{stdout}");
}

/// A small file system of its own (tmpfs), unmounted when dropped; `None` where this process may
/// not mount (the test is then skipped, loudly).
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: u64) -> Option<Self> {
        let dir = tempfile::tempdir().expect("temp dir");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status();
        status.is_ok_and(|s| s.success()).then_some(Self { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.dir.path()).status();
    }
}

/// The data dir's disk fills up under claims: writes answer 503 problem+json with `Retry-After`
/// and `/readyz` fails, while reads go on; once space is freed, writes resume by themselves; after
/// a restart every acknowledged claim is there and none of the refused ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_reads_and_recovers_by_itself() {
    let Some(disk) = SmallDisk::mount(3 << 20) else {
        idem_conformance::skipped("cannot mount a tmpfs here (needs root): the full-disk test did not run");
        return;
    };
    let data = disk.dir.path().join("data");
    let ballast = disk.dir.path().join("ballast");
    std::fs::write(&ballast, vec![0u8; 1 << 20]).expect("ballast");
    let mut idem = Idem::serve(&data, &[]);
    let client = ApiClient::new(&idem.url, None).expect("client");
    let (mut acknowledged, mut refused) = (Vec::new(), Vec::new());
    let pad = "x".repeat(4000);
    for n in 0..2_000 {
        let key = format!("k{n}");
        let reply = client
            .send(Method::POST, "/v1/claims/full", Some(&json!({ "key": key, "data": { "pad": pad } })))
            .await
            .expect("answered");
        match reply.status.as_u16() {
            201 => acknowledged.push(key),
            503 => {
                assert!(reply.headers.contains_key("retry-after"), "a 503 says when to retry");
                assert_eq!(
                    reply.headers.get("content-type").map(|v| v.to_str().unwrap_or("")),
                    Some("application/problem+json")
                );
                refused.push(key);
                if refused.len() == 3 {
                    break;
                }
            }
            other => panic!("claim {n}: unexpected {other}"),
        }
    }
    assert!(
        refused.len() == 3 && acknowledged.len() > 100,
        "the disk filled: {} stored, {} refused",
        acknowledged.len(),
        refused.len()
    );
    assert_eq!(client.send(Method::GET, "/readyz", None).await.expect("readyz").status, 503, "not ready while full");
    let read = client.send(Method::POST, "/v1/claims/full/lookup", Some(&json!({"items": [{"key": "k0"}]}))).await;
    assert_eq!(read.expect("lookup").json()["results"][0]["exists"], true, "reads go on");

    std::fs::remove_file(&ballast).expect("free space");
    let again = client.send(Method::POST, "/v1/claims/full", Some(&json!({ "key": "after" }))).await.expect("claim");
    assert_eq!(again.status, 201, "writes resume by themselves once there is space");
    acknowledged.push("after".into());
    assert_eq!(client.send(Method::GET, "/readyz", None).await.expect("readyz").status, 200);

    idem.kill9();
    let idem = Idem::serve(&data, &[]);
    let client = ApiClient::new(&idem.url, None).expect("client");
    for (keys, exists) in [(&acknowledged, true), (&refused, false)] {
        let items: Vec<_> = keys.iter().map(|k| json!({ "key": k })).collect();
        let reply = client.send(Method::POST, "/v1/claims/full/lookup", Some(&json!({ "items": items }))).await;
        let body = reply.expect("lookup").json();
        for (result, key) in body["results"].as_array().expect("results").iter().zip(keys.iter()) {
            assert_eq!(result["exists"], exists, "{key} after the restart");
        }
    }
    drop(idem);
}

/// `idem backup` while claims keep coming: the copy passes `idem check`, and idem started on it
/// has every claim acknowledged before the backup began. Damage to the copy is then reported by
/// `idem check` (exit 1, naming the file and byte) and stops `idem serve` on it; `idem repair`
/// shows what it would drop, then drops only that, and idem serves the rest again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_while_serving_is_consistent_and_check_finds_damage() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (data, copy) = (dir.path().join("data"), dir.path().join("copy"));
    let idem = Idem::serve(&data, &[]);
    let client = ApiClient::new(&idem.url, None).expect("client");
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (client, acknowledged, stop) = (client.clone(), Arc::clone(&acknowledged), Arc::clone(&stop));
            tokio::spawn(async move {
                for n in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    let key = format!("b{w}-{n}");
                    let reply = client.send(Method::POST, "/v1/claims/backup", Some(&json!({ "key": key }))).await;
                    if reply.expect("claim").status == 201 {
                        acknowledged.lock().expect("lock").push(key);
                    }
                }
            })
        })
        .collect();
    while acknowledged.lock().expect("lock").len() < 2_000 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = acknowledged.lock().expect("lock").clone();
    let args: Vec<String> = ["backup", copy.to_str().expect("utf-8"), "--data-dir", data.to_str().expect("utf-8")]
        .iter()
        .map(|a| a.to_string())
        .collect();
    let backup = move || run(&args.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    let (code, out, err) = tokio::task::spawn_blocking(backup).await.expect("backup");
    assert_eq!(code, 0, "backup: {out}{err}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for writer in writers {
        writer.await.expect("writer");
    }
    drop(idem);

    let (code, out, err) = run(&["check", "--data-dir", copy.to_str().expect("utf-8")], &[]);
    assert_eq!(code, 0, "check of the copy: {out}{err}");
    assert!(out.contains("every checksum good"), "{out}");
    let restored = Idem::serve(&copy, &[]);
    let client = ApiClient::new(&restored.url, None).expect("client");
    for chunk in before.chunks(5_000) {
        let items: Vec<_> = chunk.iter().map(|k| json!({ "key": k })).collect();
        let reply = client.send(Method::POST, "/v1/claims/backup/lookup", Some(&json!({ "items": items }))).await;
        let body = reply.expect("lookup").json();
        let missing = body["results"].as_array().expect("results").iter().filter(|r| r["exists"] != true).count();
        assert_eq!(missing, 0, "claims acknowledged before the backup are in it");
    }
    drop(restored);

    let segment = copy.join("log").join("00000001.log");
    let mut bytes = std::fs::read(&segment).expect("segment");
    bytes[100] ^= 0x40;
    std::fs::write(&segment, &bytes).expect("damage");
    let (code, out, err) = run(&["check", "--data-dir", copy.to_str().expect("utf-8")], &[]);
    assert_eq!(code, 1, "check finds the damage: {out}{err}");
    assert!(err.contains("00000001.log") && err.contains("byte"), "names the file and offset: {err}");
    let port = crate::support::binary::free_port().to_string();
    let serve = ["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir", copy.to_str().expect("utf-8")];
    let (code, _, err) = run(&serve, &[]);
    assert_ne!(code, 0, "serve refuses a damaged log");
    assert!(err.contains("00000001.log") && err.contains("idem repair"), "{err}");

    // `idem repair` says what it would drop and changes nothing; with --yes it drops only the
    // damaged group, and idem serves every other claim again.
    let data_dir = copy.to_str().expect("utf-8");
    let (code, out, err) = run(&["repair", "--data-dir", data_dir], &[]);
    assert_eq!(code, 0, "repair dry run: {out}{err}");
    assert!(out.contains("would") && out.contains("00000001.log"), "{out}");
    assert_eq!(std::fs::read(&segment).expect("segment"), bytes, "a dry run changes nothing");
    let (code, out, err) = run(&["repair", "--yes", "--data-dir", data_dir], &[]);
    assert_eq!(code, 0, "repair: {out}{err}");
    assert!(out.contains("acknowledged records dropped"), "{out}");
    let (code, out, err) = run(&["check", "--data-dir", data_dir], &[]);
    assert_eq!(code, 0, "check after repair: {out}{err}");
    let restored = Idem::serve(&copy, &[]);
    let client = ApiClient::new(&restored.url, None).expect("client");
    let mut missing = 0;
    for chunk in before.chunks(5_000) {
        let items: Vec<_> = chunk.iter().map(|k| json!({ "key": k })).collect();
        let reply = client.send(Method::POST, "/v1/claims/backup/lookup", Some(&json!({ "items": items }))).await;
        let body = reply.expect("lookup").json();
        missing += body["results"].as_array().expect("results").iter().filter(|r| r["exists"] != true).count();
    }
    assert!(missing <= 64, "only the damaged group's claims are gone: {missing} missing");
    drop(restored);
}

/// An operator is told, at `warn`, that a handler is down (each failed attempt: source, receipt,
/// the handler's URL without its query, what went wrong, what comes next), that receipts went dead,
/// and that the gateway's upstream cannot be reached (its URL) — and a handler down under load
/// does not flood the log (contract §12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_or_an_upstream_that_is_down_is_told_in_the_log_without_flooding_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (handler, upstream, gateway) = (free_port(), free_port(), free_port());
    let config = dir.path().join("idem.toml");
    std::fs::write(
        &config,
        format!(
            "[[sources]]\nname = \"partner\"\nhandler_url = \"http://127.0.0.1:{handler}/handle?key=s3cret-in-query\"\n\
             event_id = \"/id\"\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nmax_attempts = 3\n\
             backoff = [\"20ms\"]\nattempt_timeout = \"2s\"\n\n\
             [gateway]\nlisten = \"127.0.0.1:{gateway}\"\nupstream = \"http://127.0.0.1:{upstream}\"\n\
             [[gateway.routes]]\npath = \"/orders\"\n"
        ),
    )
    .expect("config");
    let idem = Idem::serve(&dir.path().join("data"), &["--config", config.to_str().expect("utf-8")]);
    let client = ApiClient::new(&idem.url, None).expect("client");
    for i in 0..40 {
        let reply = client
            .send(Method::POST, "/v1/sources/partner/events", Some(&json!({"id": format!("e{i}")})))
            .await
            .expect("intake");
        assert_eq!(reply.status.as_u16(), 202);
    }
    let gw = ApiClient::new(&format!("http://127.0.0.1:{gateway}"), None).expect("client");
    let reply = gw.send(Method::POST, "/orders?token=abc", Some(&json!({}))).await.expect("gateway");
    assert_eq!(reply.status.as_u16(), 502);

    let failed = idem.wait_for_log("a delivery attempt failed", Duration::from_secs(20));
    assert!(
        failed.contains("WARN") && failed.contains("source=\"partner\"") && failed.contains("receipt=rcpt_"),
        "{failed}"
    );
    assert!(failed.contains(&format!("http://127.0.0.1:{handler}/handle")) && !failed.contains("s3cret"), "{failed}");
    assert!(failed.contains("next: attempt 2 at"), "what comes next: {failed}");
    let dead = idem.wait_for_log("went dead", Duration::from_secs(20));
    assert!(
        dead.contains("WARN") && dead.contains("source=\"partner\"") && dead.contains("after 3 attempts"),
        "{dead}"
    );
    let upstream_line = idem.wait_for_log("the upstream unreachable", Duration::from_secs(5));
    assert!(upstream_line.contains(&format!("http://127.0.0.1:{upstream}/orders")), "{upstream_line}");
    assert!(!upstream_line.contains("token=abc"), "no query in the log: {upstream_line}");

    // 120 failed attempts and 40 dead receipts within the period: a few lines, not 160.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let more: Vec<String> =
        idem.log.try_iter().filter(|l| l.contains("attempt failed") || l.contains("went dead")).collect();
    assert!(more.len() <= 4, "rate-limited, not one line per failure: {more:#?}");
    let receipts = client.send(Method::GET, "/v1/receipts?status=dead&limit=100", None).await.expect("list").json();
    assert_eq!(receipts["receipts"].as_array().map(Vec::len), Some(40), "every one went dead");
}
