//! The test harness: an in-process server started through `idem_server::run` on port 0, a client
//! whose helpers assert status codes, and a runner for the real binary.

pub mod binary;
pub mod certs;
pub mod faulty;
pub mod over_leasing;
pub mod pg;
pub mod receiver;
pub mod upstream;

use std::sync::Arc;

use http::{Method, StatusCode};
use idem_core::{Clock, Stores, SystemClock};
use idem_server::Config;
use idem_server::cli::client::{ApiClient, Reply};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub struct TestServer {
    pub url: String,
    /// The gateway proxy's base URL, when the config has a `[gateway]`.
    pub gateway_url: Option<String>,
    /// The Redis protocol's address, when the config has a `[resp]`.
    pub resp_addr: Option<std::net::SocketAddr>,
    pub client: ApiClient,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(|_| {}, Arc::new(SystemClock)).await
    }

    /// Starts a server on a fresh data dir; `configure` edits the config first.
    pub async fn start_with(configure: impl FnOnce(&mut Config), clock: Arc<dyn Clock>) -> Self {
        Self::start_in(tempfile::tempdir().expect("temp dir"), configure, clock).await
    }

    /// Starts a server whose data dir is `dir` (unless `configure` sets another).
    pub async fn start_in(dir: tempfile::TempDir, configure: impl FnOnce(&mut Config), clock: Arc<dyn Clock>) -> Self {
        let mut config = Config { data_dir: dir.path().to_owned(), ..Config::default() };
        configure(&mut config);
        // The embedded store as `idem serve` opens it: the log engine for claims and keys, SQLite
        // for events.
        let stores =
            idem_server::embedded::open(&config.data_dir, Arc::clone(&clock)).await.expect("open the embedded store");
        Self::start_on(stores, dir, config, clock).await
    }

    /// Starts a server on the embedded store whose events go through `wrap` (a store that
    /// misbehaves on purpose); `configure` edits the config first.
    pub async fn start_wrapping_events(
        wrap: impl FnOnce(Arc<dyn idem_core::EventStore>) -> Arc<dyn idem_core::EventStore>,
        configure: impl FnOnce(&mut Config),
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = Config { data_dir: dir.path().to_owned(), ..Config::default() };
        configure(&mut config);
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let stores =
            idem_server::embedded::open(&config.data_dir, Arc::clone(&clock)).await.expect("open the embedded store");
        let stores = Stores { events: wrap(Arc::clone(&stores.events)), ..stores };
        Self::start_on(stores, dir, config, clock).await
    }

    /// Starts a server on PostgreSQL at `url`, with `options`; `configure` edits the config first.
    pub async fn start_postgres(
        url: &str,
        options: &idem_postgres::PgOptions,
        configure: impl FnOnce(&mut Config),
    ) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let time = idem_postgres::TimeSource::Given(Arc::clone(&clock));
        let store = idem_postgres::PgStore::connect(url, options, time).await.expect("open PostgreSQL");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = Config { data_dir: dir.path().to_owned(), ..Config::default() };
        configure(&mut config);
        Self::start_on(Stores::of(Arc::new(store)), dir, config, clock).await
    }

    async fn start_on(stores: Stores, dir: tempfile::TempDir, mut config: Config, clock: Arc<dyn Clock>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let gateway = match config.gateway.as_mut() {
            Some(g) => Some(bind_anywhere(&mut g.listen).await),
            None => None,
        };
        let gateway_url = gateway.as_ref().map(|l| format!("http://{}", l.local_addr().expect("addr")));
        let resp = match config.resp.as_mut() {
            Some(r) => Some(bind_anywhere(&mut r.listen).await),
            None => None,
        };
        let resp_addr = resp.as_ref().map(|l| l.local_addr().expect("addr"));
        let listeners = idem_server::Listeners { api: listener, gateway, resp };
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let task = tokio::spawn(idem_server::run(config, stores, clock, listeners, shutdown));
        let client = ApiClient::new(&url, None).expect("client");
        Self { url, gateway_url, resp_addr, client, dir, stop: Some(stop), task }
    }

    pub fn client_with_token(&self, token: &str) -> ApiClient {
        ApiClient::new(&self.url, Some(token.to_owned())).expect("client")
    }

    /// Sends a request and asserts the status; returns the JSON body.
    pub async fn expect(&self, method: Method, path: &str, body: Option<Value>, status: u16) -> Value {
        expect(&self.client, method, path, body, status).await
    }

    pub async fn post(&self, path: &str, body: Value, status: u16) -> Value {
        self.expect(Method::POST, path, Some(body), status).await
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.expect("server task").expect("server ran");
    }
}

/// A listener on a free loopback port, written into the config's `listen`.
async fn bind_anywhere(listen: &mut std::net::SocketAddr) -> TcpListener {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    *listen = listener.local_addr().expect("addr");
    listener
}

pub async fn expect(client: &ApiClient, method: Method, path: &str, body: Option<Value>, status: u16) -> Value {
    let reply = client.send(method.clone(), path, body.as_ref()).await.expect("request");
    assert_status(&reply, status, &format!("{method} {path}"));
    reply.json()
}

/// The value of one series on `client`'s `/metrics` (`series`: the name with its labels, as
/// Prometheus prints them); a series that is not there panics, naming it.
pub async fn metric(client: &ApiClient, series: &str) -> f64 {
    let text = client.send(Method::GET, "/metrics", None).await.expect("metrics");
    let text = String::from_utf8_lossy(&text.body).into_owned();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

pub fn assert_status(reply: &Reply, status: u16, what: &str) {
    assert_eq!(
        reply.status,
        StatusCode::from_u16(status).expect("valid status"),
        "{what}: unexpected status; body: {}",
        String::from_utf8_lossy(&reply.body)
    );
}

/// Asserts a problem+json answer and returns it.
pub fn assert_problem(reply: &Reply, status: u16, what: &str) -> Value {
    assert_status(reply, status, what);
    let content_type = reply.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert_eq!(content_type, "application/problem+json", "{what}: content type");
    let problem = reply.json();
    assert_eq!(problem["status"], status, "{what}: problem status");
    for member in ["type", "title", "detail"] {
        assert!(problem[member].is_string(), "{what}: problem lacks {member}: {problem}");
    }
    problem
}
