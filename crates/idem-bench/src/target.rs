//! What the harness measures against: idem itself (a fresh process on a fresh data dir), a
//! built-in minimal upstream and "ok" server, a private Redis and the local PostgreSQL.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

pub type Http = Client<HttpConnector, Full<Bytes>>;

pub fn http() -> Http {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1024).build(connector)
}

/// POSTs `body` with extra headers; a non-2xx answer is an error.
pub async fn post(client: &Http, url: &str, body: String, headers: &[(&str, &str)]) -> Result<(), String> {
    let mut request = Request::builder().method(Method::POST).uri(url).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from(body))).map_err(|e| e.to_string())?;
    let response = client.request(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let _ = response.into_body().collect().await;
    if status.is_success() { Ok(()) } else { Err(format!("status {status}")) }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(7499)
}

/// An `idem serve` started for one scenario, stopped when dropped.
pub struct Idem {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Idem {
    /// The `idem` binary beside this one (same cargo profile).
    fn binary() -> PathBuf {
        let me = std::env::current_exe().unwrap_or_default();
        me.parent().map(|d| d.join("idem")).unwrap_or_else(|| PathBuf::from("idem"))
    }

    /// Starts idem with `config` (TOML) and waits until it is ready.
    pub async fn start(config: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = free_port();
        let file = dir.path().join("idem.toml");
        std::fs::write(&file, config).map_err(|e| e.to_string())?;
        let child = Command::new(Self::binary())
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--config"])
            .arg(&file)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env("IDEM_LOG__LEVEL", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {}: {e} (build it: cargo build --release -p idem-server)",
                    Self::binary().display()
                )
            })?;
        let idem = Self { child, url: format!("http://127.0.0.1:{port}"), _dir: dir };
        let client = http();
        for _ in 0..200 {
            let ready = Request::get(format!("{}/readyz", idem.url))
                .body(Full::new(Bytes::new()))
                .map_err(|e| e.to_string())?;
            if client.request(ready).await.is_ok_and(|r| r.status().is_success()) {
                return Ok(idem);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err("idem did not become ready".into())
    }

    /// Heap of the idem process (RssAnon; the mapped database file is page cache, not heap).
    pub fn heap_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kib: f64 = status.lines().find(|l| l.starts_with("RssAnon:"))?.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    }
}

impl Drop for Idem {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The built-in minimal upstream: `POST /orders` → 201 with a small JSON body, `POST /handle` →
/// 200 (an event handler). It runs as its own process (this binary, re-launched), like idem, so
/// that measuring it directly does not share the load generator's runtime.
pub struct Upstream {
    child: Child,
    pub url: String,
}

impl Upstream {
    pub async fn start() -> Result<Self, String> {
        let port = free_port();
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let child = Command::new(me)
            .args(["upstream", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let upstream = Self { child, url: format!("http://127.0.0.1:{port}") };
        for _ in 0..200 {
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Ok(upstream);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err("the built-in upstream did not start".into())
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `idem-bench upstream ADDR` runs.
pub async fn serve_upstream(addr: &str) -> Result<(), String> {
    use axum::routing::post;
    let app = axum::Router::new()
        .route(
            "/orders",
            post(|| async { (http::StatusCode::CREATED, [("content-type", "application/json")], "{\"order_id\":1}") }),
        )
        .route("/handle", post(|| async { http::StatusCode::OK }));
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| e.to_string())?;
    axum::serve(listener, app).await.map_err(|e| e.to_string())
}

/// A private `redis-server` on a free port (in memory, or fsyncing every write), if installed.
pub struct Redis {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub async fn start(durable: bool) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let port = free_port();
        let mut args = vec![
            "--port".to_owned(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            String::new(),
        ];
        if durable {
            args.extend(["--appendonly", "yes", "--appendfsync", "always"].map(String::from));
        } else {
            args.extend(["--appendonly", "no"].map(String::from));
        }
        args.extend(["--dir".to_owned(), dir.path().to_string_lossy().into_owned()]);
        let child =
            Command::new("redis-server").args(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
        let redis = Self { child, port, _dir: dir };
        for _ in 0..100 {
            if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Some(redis);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One Redis connection speaking just enough RESP for `SET key v NX EX 86400`.
pub struct RedisConn(BufReader<TcpStream>);

impl RedisConn {
    pub async fn connect(port: u16) -> Result<Self, String> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Self(BufReader::new(stream)))
    }

    pub async fn set_nx(&mut self, key: &str) -> Result<(), String> {
        let cmd =
            format!("*6\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nEX\r\n$5\r\n86400\r\n", key.len());
        self.0.get_mut().write_all(cmd.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.0.read_line(&mut line).await.map_err(|e| e.to_string())?;
        if line.starts_with('+') || line.starts_with("$-1") { Ok(()) } else { Err(format!("redis answered {line:?}")) }
    }
}
