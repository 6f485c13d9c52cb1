//! What the harness measures against: idem itself (a fresh process on a fresh data dir), a
//! built-in minimal upstream and "ok" server, a private Redis and the local PostgreSQL.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::table::Memory;

/// A pooled client, for the few requests outside measurements (readiness, metrics).
pub type Http = Client<HttpConnector, Full<Bytes>>;

pub fn http() -> Http {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1024).build(connector)
}

/// One HTTP/1.1 connection per load-generating loop, used only by that loop: the request written
/// in one call from a reused buffer, the answer read with just enough parsing for a status, a
/// `content-length` or chunked body. On a 2-core machine the client shares the cores with what it
/// measures, so its cost per request shows in every figure; hyper's client (pool, connection task,
/// header maps) cost about a third of the throughput of a minimal server, against wrk's figure.
pub struct HttpConn {
    host: String,
    stream: BufReader<TcpStream>,
    out: Vec<u8>,
    line: Vec<u8>,
}

impl HttpConn {
    /// Connects to `base` (`http://host:port`).
    pub async fn connect(base: &str) -> Result<Self, String> {
        let host = base.strip_prefix("http://").ok_or_else(|| format!("not an http:// URL: {base}"))?.to_owned();
        let stream = TcpStream::connect(&host).await.map_err(|e| format!("{host}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Self { host, stream: BufReader::with_capacity(64 * 1024, stream), out: Vec::new(), line: Vec::new() })
    }

    /// POSTs `body` to `path` with extra headers and returns the answer's body; a non-2xx answer
    /// is an error.
    pub async fn post(&mut self, path: &str, body: String, headers: &[(&str, &str)]) -> Result<Bytes, String> {
        use std::io::Write as _;
        self.out.clear();
        let _ = write!(
            self.out,
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            self.host,
            body.len()
        );
        for (name, value) in headers {
            let _ = write!(self.out, "{name}: {value}\r\n");
        }
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(body.as_bytes());
        self.stream.get_mut().write_all(&self.out).await.map_err(|e| e.to_string())?;

        self.read_line().await?;
        let status = self.line.get(9..12).and_then(|s| std::str::from_utf8(s).ok()?.parse::<u16>().ok());
        let status = status.ok_or_else(|| format!("not an HTTP answer: {:?}", String::from_utf8_lossy(&self.line)))?;
        let (mut length, mut chunked) = (None, false);
        loop {
            self.read_line().await?;
            let line = self.line.as_slice();
            if line == b"\r\n" {
                break;
            }
            let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
            let (name, value) = (&line[..colon], String::from_utf8_lossy(&line[colon + 1..]));
            if name.eq_ignore_ascii_case(b"content-length") {
                length = value.trim().parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                chunked = value.trim().eq_ignore_ascii_case("chunked");
            }
        }
        let mut answer = Vec::new();
        if chunked {
            loop {
                self.read_line().await?;
                let size = String::from_utf8_lossy(&self.line);
                let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or_default(), 16)
                    .map_err(|_| format!("bad chunk size {size:?}"))?;
                if size == 0 {
                    self.read_line().await?; // the empty line after the last chunk (no trailers)
                    break;
                }
                let start = answer.len();
                answer.resize(start + size + 2, 0);
                self.stream.read_exact(&mut answer[start..]).await.map_err(|e| e.to_string())?;
                answer.truncate(start + size);
            }
        } else if let Some(length) = length {
            answer.resize(length, 0);
            self.stream.read_exact(&mut answer).await.map_err(|e| e.to_string())?;
        }
        if (200..300).contains(&status) { Ok(Bytes::from(answer)) } else { Err(format!("status {status}")) }
    }

    async fn read_line(&mut self) -> Result<(), String> {
        self.line.clear();
        match self.stream.read_until(b'\n', &mut self.line).await {
            Ok(0) => Err("the server closed the connection".into()),
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// One `HttpConn` per load-generating connection, each used only by its own loop.
pub struct HttpConns {
    base: String,
    conns: Vec<Mutex<Option<HttpConn>>>,
}

impl HttpConns {
    pub fn new(base: &str, n: usize) -> Arc<Self> {
        Arc::new(Self { base: base.to_owned(), conns: (0..n).map(|_| Mutex::new(None)).collect() })
    }

    /// POSTs on connection `c`, connecting (again) when it has none; a failed request drops the
    /// connection, so the next one starts afresh.
    pub async fn post(&self, c: usize, path: &str, body: String, headers: &[(&str, &str)]) -> Result<Bytes, String> {
        let mut slot = self.conns[c].lock().await;
        let conn = match slot.as_mut() {
            Some(conn) => conn,
            None => slot.insert(HttpConn::connect(&self.base).await?),
        };
        let result = conn.post(path, body, headers).await;
        if result.is_err() {
            *slot = None;
        }
        result
    }
}

/// GETs `url` and returns the answer as text; a non-2xx answer is an error.
pub async fn get_text(client: &Http, url: &str) -> Result<String, String> {
    let request = Request::get(url).body(Full::new(Bytes::new())).map_err(|e| e.to_string())?;
    let response = client.request(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    if status.is_success() { Ok(String::from_utf8_lossy(&body).into_owned()) } else { Err(format!("status {status}")) }
}

/// Where idem's warnings go: nowhere, or (with `BENCH_IDEM_LOG=FILE`) appended to a file.
fn idem_stderr() -> Stdio {
    let file = std::env::var_os("BENCH_IDEM_LOG")
        .and_then(|path| std::fs::OpenOptions::new().create(true).append(true).open(path).ok());
    file.map_or_else(Stdio::null, Stdio::from)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(7499)
}

/// Which store the idem under test uses.
#[derive(Debug, Clone)]
pub enum Backend {
    /// The embedded store, in a fresh data dir.
    Embedded,
    /// PostgreSQL at this URL, in a fresh schema dropped afterwards.
    Postgres(String),
}

/// An `idem serve` started for one scenario, stopped when dropped.
pub struct Idem {
    child: Child,
    /// How it was started, to start it again on the same data.
    args: Vec<std::ffi::OsString>,
    envs: Vec<(String, String)>,
    pub url: String,
    schema: Option<(String, String)>,
    peaks: Arc<std::sync::Mutex<(f64, f64)>>,
    stop_sampler: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

impl Idem {
    /// The `idem` binary beside this one (same cargo profile).
    fn binary() -> PathBuf {
        let me = std::env::current_exe().unwrap_or_default();
        me.parent().map(|d| d.join("idem")).unwrap_or_else(|| PathBuf::from("idem"))
    }

    /// Starts `idem` with `args` (on the system under test's cores with `--pin`).
    fn spawn(args: &[std::ffi::OsString], envs: &[(String, String)]) -> std::io::Result<Child> {
        crate::pin::command(Self::binary())
            .args(args)
            .envs(envs.iter().cloned())
            .stdout(Stdio::null())
            .stderr(idem_stderr())
            .spawn()
    }

    /// Starts idem on `backend` with `config` (TOML) and waits until it is ready.
    pub async fn start(backend: &Backend, config: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = free_port();
        let file = dir.path().join("idem.toml");
        std::fs::write(&file, config).map_err(|e| e.to_string())?;
        let mut args: Vec<std::ffi::OsString> =
            ["serve", "--listen", &format!("127.0.0.1:{port}"), "--config"].map(Into::into).to_vec();
        args.extend([file.into_os_string(), "--data-dir".into(), dir.path().join("data").into_os_string()]);
        let mut envs = vec![("IDEM_LOG__LEVEL".to_owned(), "warn".to_owned())];
        let mut schema = None;
        if let Backend::Postgres(base) = backend {
            let name = unique_name("idem_bench");
            let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls)
                .await
                .map_err(|e| format!("postgres: {}", pg_error(e)))?;
            tokio::spawn(connection);
            client
                .batch_execute(&format!("CREATE SCHEMA {name}"))
                .await
                .map_err(|e| format!("postgres: {}", pg_error(e)))?;
            let sep = if base.contains('?') { '&' } else { '?' };
            args.extend(["--store".into(), "postgres".into()]);
            envs.push(("IDEM_DATABASE_URL".into(), format!("{base}{sep}options=-c%20search_path%3D{name}")));
            schema = Some((base.clone(), name));
        }
        let child = Self::spawn(&args, &envs).map_err(|e| {
            format!("cannot start {}: {e} (build it: cargo build --release -p idem-server)", Self::binary().display())
        })?;
        let peaks = Arc::new(std::sync::Mutex::new((0.0, 0.0)));
        let stop_sampler = Arc::new(AtomicBool::new(false));
        sample_memory(child.id(), Arc::clone(&peaks), Arc::clone(&stop_sampler));
        let idem =
            Self { child, args, envs, url: format!("http://127.0.0.1:{port}"), schema, peaks, stop_sampler, _dir: dir };
        idem.wait_ready().await?;
        Ok(idem)
    }

    async fn wait_ready(&self) -> Result<(), String> {
        let client = http();
        for _ in 0..1200 {
            let ready = Request::get(format!("{}/readyz", self.url))
                .body(Full::new(Bytes::new()))
                .map_err(|e| e.to_string())?;
            if client.request(ready).await.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err("idem did not become ready".into())
    }

    /// Kills idem with SIGKILL and starts it again on the same data; answers how long it took
    /// from the start of the new process until it answered `/readyz`.
    pub async fn kill9_and_restart(&mut self) -> Result<Duration, String> {
        self.child.kill().map_err(|e| e.to_string())?;
        self.child.wait().map_err(|e| e.to_string())?;
        self.stop_sampler.store(true, Ordering::Relaxed);
        let started = std::time::Instant::now();
        self.child = Self::spawn(&self.args, &self.envs).map_err(|e| e.to_string())?;
        self.stop_sampler = Arc::new(AtomicBool::new(false));
        sample_memory(self.child.id(), Arc::clone(&self.peaks), Arc::clone(&self.stop_sampler));
        self.wait_ready().await?;
        Ok(started.elapsed())
    }

    /// The data dir of the embedded store.
    pub fn data_dir(&self) -> PathBuf {
        self._dir.path().join("data")
    }

    /// The process's anonymous resident memory (its heap) right now, in MiB.
    pub fn heap_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        field_mib(&status, "RssAnon:")
    }

    /// The process's memory: the kernel's peak RSS, and the peaks of what the sampler saw.
    pub fn memory(&self) -> Option<Memory> {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        // One last PSS sample: the sampler reads it only every five seconds.
        let pss = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok().and_then(|t| field_mib(&t, "Pss:"));
        let peaks = *self.peaks.lock().ok()?;
        let peaks = (peaks.0.max(pss.unwrap_or(0.0)), peaks.1);
        Some(Memory { peak_rss_mib: field_mib(&status, "VmHWM:")?, peak_pss_mib: peaks.0, peak_heap_mib: peaks.1 })
    }
}

/// A value in KiB from a `/proc` file, in MiB.
fn field_mib(text: &str, field: &str) -> Option<f64> {
    let kib: f64 = text.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Samples a process's heap (RssAnon) every second and its proportional set size (PSS: pages of
/// the memory-mapped database counted once, however many connections map them) every five,
/// keeping the peaks, until `stop`. A thread of its own, off the load generator's runtime: reading
/// `smaps_rollup` walks every mapping, which takes milliseconds once the database is large.
fn sample_memory(pid: u32, peaks: Arc<std::sync::Mutex<(f64, f64)>>, stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut tick = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let read = |file: &str, field: &str| {
                std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok().and_then(|t| field_mib(&t, field))
            };
            let pss = if tick.is_multiple_of(5) { read("smaps_rollup", "Pss:") } else { None };
            let heap = read("status", "RssAnon:");
            if let Ok(mut peaks) = peaks.lock() {
                *peaks = (peaks.0.max(pss.unwrap_or(0.0)), peaks.1.max(heap.unwrap_or(0.0)));
            }
            tick += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
    });
}

impl Drop for Idem {
    fn drop(&mut self) {
        self.stop_sampler.store(true, Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some((base, name)) = self.schema.take() {
            // Drop runs inside the (multi-threaded) runtime: leave it briefly to clean up.
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    if let Ok((client, connection)) = tokio_postgres::connect(&base, tokio_postgres::NoTls).await {
                        tokio::spawn(connection);
                        let _ = client.batch_execute(&format!("DROP SCHEMA {name} CASCADE")).await;
                    }
                })
            });
        }
    }
}

/// A table of the PostgreSQL anchors (`id text PRIMARY KEY`, `created_at`), made with `setup`
/// after it (`{table}` stands for its name), with `connections` clients each holding `sql`
/// prepared: one round trip per query, as pgbench's. Dropped with `drop_table`.
pub struct PgTable {
    pub name: String,
    pub clients: Vec<(tokio_postgres::Client, tokio_postgres::Statement)>,
}

impl PgTable {
    pub async fn create(url: &str, connections: usize, setup: &str, sql: &str) -> Result<Arc<Self>, String> {
        Self::create_as(
            url,
            connections,
            "(id text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())",
            setup,
            sql,
        )
        .await
    }

    /// A table of the given columns (`(…)`, as after `CREATE TABLE name`), then `setup`, with `sql`
    /// prepared on each connection (`{table}` in either stands for the table's name).
    pub async fn create_as(
        url: &str,
        connections: usize,
        columns: &str,
        setup: &str,
        sql: &str,
    ) -> Result<Arc<Self>, String> {
        let name = unique_name("idem_bench");
        let mut clients = Vec::new();
        for _ in 0..connections {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(pg_error)?;
            tokio::spawn(connection);
            clients.push(client);
        }
        let first = clients.first().ok_or("no connections")?;
        first
            .batch_execute(&format!("CREATE TABLE {name} {columns}; {}", setup.replace("{table}", &name)))
            .await
            .map_err(pg_error)?;
        let sql = sql.replace("{table}", &name);
        let mut prepared = Vec::new();
        for client in clients {
            let statement = client.prepare(&sql).await.map_err(pg_error)?;
            prepared.push((client, statement));
        }
        Ok(Arc::new(Self { name, clients: prepared }))
    }

    pub async fn drop_table(&self) {
        if let Some((client, _)) = self.clients.first() {
            let _ = client.batch_execute(&format!("DROP TABLE {}", self.name)).await;
        }
    }
}

/// A PostgreSQL error with the server's message, where there is one.
pub fn pg_error(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

/// A name no other run of this process or of another one uses (for keys, tables, schemas).
pub fn unique_name(prefix: &str) -> String {
    static RUN: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}_{}_{}", std::process::id(), RUN.fetch_add(1, Ordering::Relaxed))
}

/// The built-in minimal upstream: `POST /orders` → 201 with a small JSON body, `POST /handle` →
/// 200 (an event handler), `POST /ok` → 200 "ok" (the machine's HTTP ceiling). It runs as its own process (this binary, re-launched), like idem, so
/// that measuring it directly does not share the load generator's runtime.
pub struct Upstream {
    child: Child,
    pub url: String,
}

impl Upstream {
    pub async fn start() -> Result<Self, String> {
        let port = free_port();
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let child = crate::pin::command(me)
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
        .route("/handle", post(|| async { http::StatusCode::OK }))
        .route("/ok", post(|| async { "ok" }));
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
            crate::pin::command("redis-server").args(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
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

/// One Redis connection speaking just enough RESP for `SET key v NX EX 86400`, `MSET` and `MGET`.
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

    /// Stores every key with `MSET`, a thousand per command.
    pub async fn mset(&mut self, keys: impl Iterator<Item = String>) -> Result<(), String> {
        let keys: Vec<String> = keys.collect();
        for chunk in keys.chunks(1000) {
            let mut cmd = format!("*{}\r\n$4\r\nMSET\r\n", 1 + 2 * chunk.len());
            for key in chunk {
                cmd.push_str(&format!("${}\r\n{key}\r\n$1\r\nv\r\n", key.len()));
            }
            self.0.get_mut().write_all(cmd.as_bytes()).await.map_err(|e| e.to_string())?;
            let line = self.line().await?;
            if !line.starts_with('+') {
                return Err(format!("redis answered {line:?}"));
            }
        }
        Ok(())
    }

    /// `MGET` of `keys`; how many of them exist.
    pub async fn mget(&mut self, keys: &[String]) -> Result<usize, String> {
        let mut cmd = format!("*{}\r\n$4\r\nMGET\r\n", 1 + keys.len());
        for key in keys {
            cmd.push_str(&format!("${}\r\n{key}\r\n", key.len()));
        }
        self.0.get_mut().write_all(cmd.as_bytes()).await.map_err(|e| e.to_string())?;
        let header = self.line().await?;
        let n: usize =
            header.trim_start_matches('*').trim().parse().map_err(|_| format!("redis answered {header:?}"))?;
        let mut found = 0;
        for _ in 0..n {
            let bulk = self.line().await?;
            if bulk.starts_with("$-1") {
                continue;
            }
            self.line().await?;
            found += 1;
        }
        Ok(found)
    }

    async fn line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        match self.0.read_line(&mut line).await {
            Ok(0) => Err("redis closed the connection".into()),
            Ok(_) => Ok(line),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// One 4 KiB write and `fdatasync` at the end of a file in a fresh directory under the system's
/// temporary directory (where every idem under test keeps its data), over and over for
/// `duration`: the p50 and p99, in ms, of what one durable write costs on this disk, now.
pub fn fdatasync_latency(duration: Duration) -> Result<(f64, f64), String> {
    use std::io::Write as _;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut file = std::fs::File::create(dir.path().join("sync")).map_err(|e| e.to_string())?;
    let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string())?;
    let (page, started) = ([7u8; 4096], std::time::Instant::now());
    while started.elapsed() < duration {
        let one = std::time::Instant::now();
        file.write_all(&page).and_then(|()| file.sync_data()).map_err(|e| e.to_string())?;
        let _ = hist.record(one.elapsed().as_micros().max(1) as u64);
    }
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Ok((ms(0.5), ms(0.99)))
}
