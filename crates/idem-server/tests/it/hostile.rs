//! Clients that misbehave, against the real binary: sockets that connect and send nothing, a client
//! that sends its headers a byte at a time, uploads announced too large, `Expect` headers idem does
//! not support, and JSON that is not an object. None of them may lock others out or get anything
//! but a clear answer.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use http::Method;
use idem_server::cli::client::ApiClient;
use serde_json::json;

use crate::support::binary::Idem;
use crate::support::{TestServer, assert_problem};

fn address(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

/// With the usual open-file limit of 1,024, 1,100 sockets that never send a byte stay open while a
/// normal client keeps claiming: every one of its claims is answered, the cap (not the file limit)
/// is what holds the flood back, and the idle sockets are closed by the header timeout. A client
/// that sends its headers a byte every 300 ms is cut off within the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_clients_cannot_lock_others_out() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Long enough that the flood's 1,100 connections are all open at once even while other tests
    // load the machine (with 2 s, a slow flood's first sockets timed out before the cap was hit).
    let env = [("IDEM_LIMITS__HEADER_READ_TIMEOUT", "5s"), ("IDEM_LIMITS__IDLE_TIMEOUT", "6s")];
    let idem = Idem::serve_with(dir.path(), &[], &env, Some(1024));
    let addr = address(&idem.url);
    let claimant = ApiClient::new(&idem.url, None).expect("client");
    let warm = claimant.send(Method::POST, "/v1/claims/flood", Some(&json!({"key": "warm"}))).await.expect("claim");
    assert_eq!(warm.status, 201);

    let flood = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || (0..1100).filter_map(|_| TcpStream::connect(&addr).ok()).collect::<Vec<_>>()
    });
    let mut answered = 0;
    for i in 0..60 {
        let reply = claimant.send(Method::POST, "/v1/claims/flood", Some(&json!({"key": format!("k{i}")}))).await;
        let reply = reply.expect("every claim is answered");
        assert_eq!(reply.status, 201, "claim {i}");
        answered += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sockets = flood.await.expect("flood");
    assert_eq!(answered, 60);
    assert!(sockets.len() >= 1000, "the flood connected: {}", sockets.len());

    // A new client gets through too, once the idle sockets ahead of it have timed out.
    let started = Instant::now();
    let fresh = ApiClient::new(&idem.url, None).expect("client");
    let ready = tokio::time::timeout(Duration::from_secs(20), fresh.send(Method::GET, "/readyz", None)).await;
    assert_eq!(ready.expect("answered in time").expect("readyz").status, 200, "after {:?}", started.elapsed());
    idem.wait_for_log("connection limit reached", Duration::from_secs(5));
    let log: Vec<String> = idem.log.try_iter().collect();
    assert!(
        !log.iter().any(|l| l.contains("Too many open files")),
        "the file limit was never hit:\n{}",
        log.join("\n")
    );
    drop(sockets);

    let slow = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(&addr).expect("connect");
        let started = Instant::now();
        for byte in
            b"POST /v1/claims/slow HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n".iter().cycle()
        {
            if stream.write_all(&[*byte]).is_err() || started.elapsed() > Duration::from_secs(15) {
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
            stream.set_nonblocking(true).expect("nonblocking");
            let mut probe = [0u8; 1];
            if matches!(stream.read(&mut probe), Ok(0)) {
                break; // closed by the server
            }
            stream.set_nonblocking(false).expect("blocking");
        }
        started.elapsed()
    });
    let cut_off_after = slow.await.expect("slowloris");
    assert!(
        cut_off_after < Duration::from_secs(8),
        "a byte-at-a-time client is closed within the timeout: {cut_off_after:?}"
    );
}

/// The connection's time limits move with each request: a kept-alive connection used every 250 ms
/// stays open well past both limits counted from its start; once idle it is closed after
/// `idle_timeout`; and a request whose headers stop half-way is cut off after
/// `header_read_timeout`, though the idle limit would have allowed longer.
#[tokio::test]
async fn time_limits_follow_each_request_on_a_kept_alive_connection() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("IDEM_LIMITS__HEADER_READ_TIMEOUT", "1s"), ("IDEM_LIMITS__IDLE_TIMEOUT", "2s")];
    let idem = Idem::serve_with(dir.path(), &[], &env, None);
    let addr = address(&idem.url);
    let (used_for, closed_idle_after, closed_half_head_after) = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(&addr).expect("connect");
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(3500) {
            stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("send");
            assert!(read_response(&mut stream), "answered on the kept-alive connection at {:?}", started.elapsed());
            std::thread::sleep(Duration::from_millis(250));
        }
        let used_for = started.elapsed();
        let idle_since = Instant::now();
        let closed_idle_after = closed_after(&mut stream, idle_since);

        let mut stream = TcpStream::connect(&addr).expect("connect");
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("send");
        assert!(read_response(&mut stream));
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost:").expect("send half");
        let half_sent = Instant::now();
        (used_for, closed_idle_after, closed_after(&mut stream, half_sent))
    })
    .await
    .expect("client");
    assert!(used_for >= Duration::from_millis(3500));
    assert!(
        closed_idle_after >= Duration::from_millis(1500) && closed_idle_after < Duration::from_secs(4),
        "closed {closed_idle_after:?} after going idle (idle_timeout 2 s)"
    );
    assert!(
        closed_half_head_after >= Duration::from_millis(800) && closed_half_head_after < Duration::from_millis(1900),
        "closed {closed_half_head_after:?} after half a head (header_read_timeout 1 s)"
    );
}

/// Reads one whole response (headers and a `Content-Length` body); false if the connection ended.
fn read_response(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let body: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + body {
                return head.starts_with("http/1.1 200");
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

/// How long after `since` the server closed the connection (reads until the end; 10 s at most).
fn closed_after(stream: &mut TcpStream, since: Instant) -> Duration {
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut chunk = [0u8; 256];
    while let Ok(n) = stream.read(&mut chunk) {
        if n == 0 {
            break;
        }
    }
    since.elapsed()
}

/// Read a raw HTTP/1.1 answer's status line (and only that).
fn status_line(stream: &mut TcpStream) -> String {
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => answer.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&answer).trim().to_owned()
}

/// A 100 MB upload with `Expect: 100-continue` is refused with 413 before it is invited to send a
/// byte; an `Expect` idem does not support is 417; both as problem+json.
#[tokio::test]
async fn announced_uploads_and_unknown_expectations_are_refused_up_front() {
    let s = TestServer::start().await;
    let addr = address(&s.url);
    let answers = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for expect in ["100-continue", "x-teapot"] {
            let mut stream = TcpStream::connect(&addr).expect("connect");
            let head = format!(
                "POST /v1/claims/up HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\nExpect: {expect}\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).expect("write");
            lines.push(status_line(&mut stream));
        }
        lines
    })
    .await
    .expect("raw requests");
    assert!(answers[0].starts_with("HTTP/1.1 413"), "413 without 100 Continue first: {answers:?}");
    assert!(answers[1].starts_with("HTTP/1.1 417"), "{answers:?}");
    let reply = s
        .client
        .send_with(
            Method::POST,
            "/v1/claims/up",
            Some(bytes::Bytes::from_static(b"{}")),
            &[("content-type", "application/json"), ("expect", "x-teapot")],
        )
        .await
        .expect("request");
    assert_problem(&reply, 417, "an unsupported Expect");
    let big = "x".repeat(20_000);
    let reply = s
        .client
        .send_with(Method::GET, "/v1/claims/up/0", None, &[("x-padding", big.as_str())])
        .await
        .expect("request");
    let problem = assert_problem(&reply, 431, "headers over limits.max_header_bytes");
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains("limits.max_header_bytes")), "{problem}");
    s.stop().await;
}

/// A JSON array (serde would read it as the struct's fields in order) or any other non-object is
/// refused as the body, everywhere a JSON object is expected; nothing is written.
#[tokio::test]
async fn only_json_objects_are_requests() {
    let s = TestServer::start().await;
    for (path, body) in [
        ("/v1/claims/arr", json!(["k", null, {"a": 1}, 60])),
        ("/v1/claims/arr/batch", json!([[{"key": "k"}]])),
        ("/v1/claims/arr/lookup", json!([["k"]])),
        ("/v1/operations/arr/begin", json!(["k"])),
        ("/v1/claims/arr", json!("k")),
        ("/v1/claims/arr", json!(7)),
    ] {
        let reply = s.client.send(Method::POST, path, Some(&body)).await.expect("request");
        let problem = assert_problem(&reply, 400, &format!("{path} {body}"));
        assert_eq!(
            (problem["field"].as_str(), problem["detail"].as_str()),
            (Some("body"), Some("body: must be a JSON object"))
        );
    }
    s.post("/v1/claims/arr", json!({"key": "k"}), 201).await;
    s.stop().await;
}

/// A request refused before its body is read (here: no token) leaves the rest of the body on the
/// wire, so the connection cannot carry another request: the answer says `Connection: close`
/// (clients with a connection pool otherwise sent their next request on a connection about to
/// close, and got no answer). A request whose body was read keeps its connection.
#[tokio::test]
async fn an_answer_given_before_the_body_was_read_closes_the_connection() {
    let s = TestServer::start_with(
        |c| c.auth.tokens = vec![idem_server::config::Secret::new("t0k")],
        std::sync::Arc::new(idem_core::SystemClock),
    )
    .await;
    let addr = address(&s.url);
    let exchange = move |head: String, body: &[u8]| {
        let mut socket = TcpStream::connect(&addr).expect("connect");
        socket.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        socket.write_all(head.as_bytes()).expect("head");
        socket.write_all(body).expect("body");
        let mut answer = vec![0; 4096];
        let n = socket.read(&mut answer).expect("an answer");
        String::from_utf8_lossy(&answer[..n]).to_ascii_lowercase()
    };
    // The headers now, the body never: refused at once, the body unread.
    let refused = tokio::task::spawn_blocking(move || {
        exchange(
            "POST /v1/claims/ns HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n".into(),
            b"",
        )
    })
    .await
    .expect("ran");
    assert!(refused.starts_with("http/1.1 401"), "{refused}");
    assert!(refused.contains("connection: close"), "{refused}");
    let addr = address(&s.url);
    let read = tokio::task::spawn_blocking(move || {
        let body = br#"{"key":"k"}"#;
        let mut socket = TcpStream::connect(&addr).expect("connect");
        socket.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let head = format!(
            "POST /v1/claims/ns HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer t0k\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).expect("head");
        socket.write_all(body).expect("body");
        let mut answer = vec![0; 4096];
        let n = socket.read(&mut answer).expect("an answer");
        String::from_utf8_lossy(&answer[..n]).to_ascii_lowercase()
    })
    .await
    .expect("ran");
    assert!(read.starts_with("http/1.1 201"), "{read}");
    assert!(!read.contains("connection: close"), "a read body keeps the connection: {read}");
}
