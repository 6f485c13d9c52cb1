//! TLS (docs/security.md#tls) with real handshakes and certificates made here by a private CA: the
//! API on `[tls]`, a new certificate served after its files change and after SIGHUP without
//! dropping the connections already open, delivery to an `https://` handler verified against `[tls]
//! ca_file`, and `idem config check` refusing a public listener in clear.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use idem_core::SystemClock;
use idem_server::cli::client::ApiClient;
use idem_server::config::{ConfigDuration, ListenerTls};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::support::TestServer;
use crate::support::binary::{self, Idem};
use crate::support::certs::Ca;

/// A TLS connection to `addr` trusting only `ca`, and the certificate the server presented.
async fn handshake(addr: &str, ca: &Ca) -> (TlsStream<TcpStream>, Vec<u8>) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).expect("CA")).expect("root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let stream = TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("handshake");
    let presented = stream.get_ref().1.peer_certificates().and_then(|c| c.first()).expect("a certificate").to_vec();
    (stream, presented)
}

/// One keep-alive request on an open connection: the status line.
async fn get_on(stream: &mut TlsStream<TcpStream>, path: &str) -> String {
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.expect("read");
    String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or("").to_owned()
}

fn files(dir: &Path) -> ListenerTls {
    ListenerTls {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
        watch_interval: ConfigDuration(Duration::from_millis(100)),
    }
}

#[tokio::test]
async fn the_api_serves_https_and_a_renewed_certificate_without_dropping_connections() {
    let certs = tempfile::tempdir().expect("dir");
    let ca = Ca::new("idem test CA");
    let ca_file = ca.write(certs.path(), "ca.pem");
    let first = ca.write_leaf(certs.path(), "first");
    let tls = files(certs.path());
    let s = TestServer::start_with(
        |c| {
            c.tls.cert = Some(tls.cert.clone());
            c.tls.key = Some(tls.key.clone());
            c.tls.watch_interval = tls.watch_interval;
        },
        Arc::new(SystemClock),
    )
    .await;
    let addr = s.url.trim_start_matches("http://").to_owned();
    let https = format!("https://localhost:{}", addr.rsplit(':').next().expect("port"));
    let client = ApiClient::with_ca(&https, None, Some(&ca_file)).expect("client");
    let claimed = client.send(Method::POST, "/v1/claims/ns", Some(&serde_json::json!({"key": "k"}))).await;
    assert_eq!(claimed.expect("https").status, 201);
    assert!(s.client.send(Method::GET, "/healthz", None).await.is_err(), "no plain HTTP on a TLS listener");
    let untrusting = ApiClient::with_ca(&https, None, None).expect("client");
    let refused = untrusting.send(Method::GET, "/healthz", None).await.expect_err("an unknown CA is refused");
    assert!(refused.to_string().to_lowercase().contains("certificate"), "{refused}");

    let (mut open, presented) = handshake(&addr, &ca).await;
    assert_eq!(presented, first);
    assert_eq!(get_on(&mut open, "/healthz").await, "HTTP/1.1 200 OK");

    let second = ca.write_leaf(certs.path(), "second");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, presented) = handshake(&addr, &ca).await;
        if presented == second {
            break;
        }
        assert!(Instant::now() < deadline, "the renewed certificate was never served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(get_on(&mut open, "/healthz").await, "HTTP/1.1 200 OK", "the connection opened before is still served");

    // A half-written renewal (a certificate whose key is not there yet) keeps the one in use.
    let (cert, _) = ca.leaf("third");
    std::fs::write(certs.path().join("cert.pem"), cert).expect("write");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(handshake(&addr, &ca).await.1, second, "a certificate that does not match its key is not served");
    s.stop().await;
}

#[tokio::test]
async fn sighup_makes_idem_read_its_certificate_again() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("idem test CA");
    let first = ca.write_leaf(dir.path(), "first");
    let config = dir.path().join("idem.toml");
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let text = format!("[tls]\ncert = {cert:?}\nkey = {key:?}\nwatch_interval = \"1h\"\n");
    std::fs::write(&config, text).expect("config");
    let idem = Idem::serve(&dir.path().join("data"), &["--config", config.to_str().expect("path")]);
    let addr = idem.url.trim_start_matches("http://").to_owned();
    let (mut open, presented) = handshake(&addr, &ca).await;
    assert_eq!(presented, first);

    let second = ca.write_leaf(dir.path(), "second");
    assert_eq!(handshake(&addr, &ca).await.1, first, "checked every hour only: not yet");
    let pid = idem.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().expect("kill -HUP").success());
    idem.wait_for_log("TLS certificate reloaded", Duration::from_secs(10));
    assert_eq!(handshake(&addr, &ca).await.1, second, "served after SIGHUP, without a restart");
    assert_eq!(get_on(&mut open, "/healthz").await, "HTTP/1.1 200 OK", "the connection opened before is still served");
}

/// `systemctl reload` on an idem without TLS must not stop it (SIGHUP's default action would).
#[tokio::test]
async fn sighup_without_tls_stops_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let mut idem = Idem::serve(dir.path(), &[]);
    let pid = idem.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().expect("kill -HUP").success());
    idem.wait_for_log("no [tls]", Duration::from_secs(10));
    assert!(idem.child.try_wait().expect("wait").is_none(), "still running");
    let client = ApiClient::new(&idem.url, None).expect("client");
    assert_eq!(client.send(Method::GET, "/healthz", None).await.expect("healthz").status, 200);
}

/// An HTTPS event handler whose certificate a private CA signed, served by idem's own listener code.
struct HttpsHandler {
    url: String,
    ids: Arc<std::sync::Mutex<Vec<String>>>,
    _stop: tokio::sync::watch::Sender<bool>,
}

async fn https_handler(dir: &Path, ca: &Ca) -> HttpsHandler {
    use axum::http::{HeaderMap, StatusCode};
    ca.write_leaf(dir, "handler");
    let cert = idem_server::tls::Certificate::load(&files(dir)).expect("certificate");
    let ids = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&ids);
    let app = axum::Router::new().route(
        "/handle",
        axum::routing::post(move |headers: HeaderMap| {
            let record = Arc::clone(&record);
            async move {
                let id = headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                record.lock().expect("lock").push(id);
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("https://localhost:{}/handle", listener.local_addr().expect("addr").port());
    let limits = idem_server::conn::ConnLimits {
        max_connections: 64,
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let acceptor = cert.acceptor().expect("acceptor");
    tokio::spawn(idem_server::conn::serve_tls(listener, app, limits, Some(acceptor), stopped));
    HttpsHandler { url, ids, _stop: stop }
}

async fn until_ended(s: &TestServer, id: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let receipt = s.expect(Method::GET, &format!("/v1/receipts/{id}"), None, 200).await;
        if receipt["status"] == "completed" || receipt["status"] == "dead" {
            return receipt;
        }
        assert!(Instant::now() < deadline, "never ended: {receipt}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn events_are_delivered_to_an_https_handler_signed_by_the_ca_file() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("private CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let handler = https_handler(dir.path(), &ca).await;
    let source: idem_server::config::SourceConfig = toml::from_str(&format!(
        "name = \"partner\"\nhandler_url = \"{}\"\nevent_id = \"/id\"\nmax_attempts = 1\n\
         signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
        handler.url
    ))
    .expect("source");
    for trusted in [true, false] {
        let s = TestServer::start_with(
            |c| {
                c.sources = vec![source.clone()];
                c.tls.ca_file = trusted.then(|| ca_file.clone());
            },
            Arc::new(SystemClock),
        )
        .await;
        let reply = s.post("/v1/sources/partner/events", serde_json::json!({"id": "e1"}), 202).await;
        let id = reply["receipt_id"].as_str().expect("receipt").to_owned();
        let receipt = until_ended(&s, &id).await;
        if trusted {
            assert_eq!(receipt["status"], "completed", "{receipt}");
            assert!(handler.ids.lock().expect("lock").contains(&id), "the handler got it");
        } else {
            assert_eq!(receipt["status"], "dead", "an unknown CA is refused: {receipt}");
            let error = receipt["attempts"][0]["error"].as_str().unwrap_or("").to_lowercase();
            assert!(error.contains("certificate"), "the attempt says why: {error}");
        }
        s.stop().await;
    }
}

#[test]
fn config_check_refuses_a_public_listener_in_clear() {
    let dir = tempfile::tempdir().expect("dir");
    let ca = Ca::new("idem test CA");
    ca.write_leaf(dir.path(), "idem");
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let check = |toml: &str| {
        let path = dir.path().join("idem.toml");
        std::fs::write(&path, toml).expect("config");
        binary::run(&["config", "check", "--config", path.to_str().expect("path")], &[])
    };
    let public = "listen = \"0.0.0.0:7070\"\n[auth]\ntokens = [\"t0k-long-enough\"]\n";
    let (code, _, err) = check(public);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("terminated_by_proxy") && err.contains("0.0.0.0:7070"), "{err}");
    let (code, _, err) = check(&format!("{public}[tls]\nterminated_by_proxy = true\n"));
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = check(&format!("{public}[tls]\ncert = {cert:?}\nkey = {key:?}\n"));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cert.pem"), "{out}");
    let (other, _) = ca.leaf("other");
    std::fs::write(dir.path().join("other.pem"), other).expect("write");
    let mismatched = dir.path().join("other.pem");
    let (code, _, err) = check(&format!("{public}[tls]\ncert = {mismatched:?}\nkey = {key:?}\n"));
    assert_eq!(code, 2, "a certificate that is not the key's: {err}");
    assert!(err.contains("tls") && err.contains("do not make a pair"), "{err}");
    let (code, _, err) = check("[auth]\ntokens = [\"   \"]\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("auth.tokens[0]") && err.contains("whitespace"), "{err}");
}

/// The gateway listens with `[gateway.tls]` and forwards to an `https://` upstream whose
/// certificate the private CA in `[tls] ca_file` signed; a replay is still a replay.
#[tokio::test]
async fn the_gateway_listens_with_tls_and_forwards_to_an_https_upstream() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempfile::tempdir().expect("dir");
    let (upstream_dir, gateway_dir) = (dir.path().join("upstream"), dir.path().join("gateway"));
    std::fs::create_dir_all(&upstream_dir).expect("dir");
    std::fs::create_dir_all(&gateway_dir).expect("dir");
    let ca = Ca::new("private CA");
    let ca_file = ca.write(dir.path(), "ca.pem");
    ca.write_leaf(&upstream_dir, "upstream");
    ca.write_leaf(&gateway_dir, "gateway");
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let app = axum::Router::new().route(
        "/orders",
        axum::routing::post(move || {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move { (axum::http::StatusCode::CREATED, format!("order {n}")) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let upstream = format!("https://localhost:{}", listener.local_addr().expect("addr").port());
    let limits = idem_server::conn::ConnLimits {
        max_connections: 64,
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
    };
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let acceptor =
        idem_server::tls::Certificate::load(&files(&upstream_dir)).expect("cert").acceptor().expect("acceptor");
    tokio::spawn(idem_server::conn::serve_tls(listener, app, limits, Some(acceptor), stopped));

    let gateway: idem_server::config::GatewayConfig = toml::from_str(&format!(
        "listen = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n[tls]\ncert = {:?}\nkey = {:?}\n\
         [[routes]]\npath = \"/orders\"\nkey = \"required\"\n",
        gateway_dir.join("cert.pem"),
        gateway_dir.join("key.pem"),
    ))
    .expect("gateway config");
    let s = TestServer::start_with(
        |c| {
            c.gateway = Some(gateway);
            c.tls.ca_file = Some(ca_file.clone());
        },
        Arc::new(SystemClock),
    )
    .await;
    let port = s.gateway_url.as_deref().expect("gateway").rsplit(':').next().expect("port").to_owned();
    let client = ApiClient::with_ca(&format!("https://localhost:{port}"), None, Some(&ca_file)).expect("client");
    let key = [("idempotency-key", "\"order-1\""), ("content-type", "application/json"), ("authorization", "Bearer t")];
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let reply = client
            .send_with(Method::POST, "/orders", Some(bytes::Bytes::from_static(b"{}")), &key)
            .await
            .expect("through the gateway");
        assert_eq!(reply.status, 201, "{}", String::from_utf8_lossy(&reply.body));
        bodies.push((reply.body.clone(), reply.headers.get("idempotent-replayed").is_some()));
    }
    assert_eq!(bodies[0].0, bodies[1].0);
    assert_eq!((bodies[0].1, bodies[1].1), (false, true), "the second is a replay");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the upstream was called once, over TLS");
    s.stop().await;
}

/// `[resp]` serves TLS with the API listener's certificate when `[tls]` gives one: a Redis client
/// that trusts the CA gets `PONG` and a durable `SET … NX`; a client in clear gets nothing.
#[tokio::test]
async fn the_redis_protocol_serves_tls_with_the_api_certificate() {
    let certs = tempfile::tempdir().expect("dir");
    let ca = Ca::new("idem test CA");
    let leaf = ca.write_leaf(certs.path(), "api");
    let tls = files(certs.path());
    let s = TestServer::start_with(
        |c| {
            c.tls.cert = Some(tls.cert.clone());
            c.tls.key = Some(tls.key.clone());
            c.resp = Some(idem_server::config::RespConfig {
                listen: "127.0.0.1:0".parse().expect("addr"),
                namespace: idem_core::Namespace::new("redis").expect("valid"),
            });
        },
        Arc::new(SystemClock),
    )
    .await;
    let addr = s.resp_addr.expect("resp").to_string();
    let (mut stream, presented) = handshake(&addr, &ca).await;
    assert_eq!(presented, leaf, "the API listener's certificate");
    stream
        .write_all(b"*1\r\n$4\r\nPING\r\n*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n")
        .await
        .expect("write");
    let mut replies = Vec::new();
    while !replies.ends_with(b"+OK\r\n") {
        let mut buf = [0u8; 256];
        let n = stream.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&replies));
        replies.extend_from_slice(&buf[..n]);
    }
    assert_eq!(replies, b"+PONG\r\n+OK\r\n");
    let mut clear = TcpStream::connect(&addr).await.expect("connect");
    clear.write_all(b"*1\r\n$4\r\nPING\r\n").await.expect("write");
    let mut buf = [0u8; 64];
    let answered = tokio::time::timeout(Duration::from_secs(15), clear.read(&mut buf)).await;
    assert!(!matches!(answered, Ok(Ok(n)) if buf[..n].starts_with(b"+PONG")), "no Redis in clear on a TLS listener");
    s.stop().await;
}
