//! A small HTTP client for the CLI verbs (`idem claims …`, `idem import`) and for tests: plain
//! HTTP/1.1 with connection pooling, JSON in, status and body out; and the failures the command
//! line exits with.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use clap::Args;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid server URL {0:?}: use http://HOST:PORT or https://HOST:PORT")]
    Url(String),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("cannot reach {url}: {message}")]
    Connect { url: String, message: String },
}

#[derive(Clone)]
pub struct ApiClient {
    base: String,
    token: Option<String>,
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

/// A response: its status and whole body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

impl ApiClient {
    pub fn new(base: &str, token: Option<String>) -> Result<Self, ClientError> {
        Self::with_ca(base, token, None)
    }

    /// A client for `base` (`http://` or `https://`); an `https://` server's certificate is verified
    /// against the system's roots plus `ca_file`'s.
    /// The base URL requests go to.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn with_ca(base: &str, token: Option<String>, ca_file: Option<&Path>) -> Result<Self, ClientError> {
        let base = base.trim_end_matches('/').to_owned();
        let web = base.starts_with("http://") || base.starts_with("https://");
        if !web || base.parse::<http::Uri>().is_err() {
            return Err(ClientError::Url(base));
        }
        let tls = crate::tls::client_config(ca_file)?;
        let connector = crate::tls::connector(HttpConnector::new(), &tls);
        let http = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self { base, token, http })
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, ClientError> {
        let bytes = body.map(|b| Bytes::from(b.to_string()));
        self.send_raw(method, path, bytes, "application/json").await
    }

    pub async fn send_raw(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        content_type: &str,
    ) -> Result<Reply, ClientError> {
        let headers: &[(&str, &str)] = if body.is_some() { &[("content-type", content_type)] } else { &[] };
        self.send_with(method, path, body, headers).await
    }

    /// Sends a request with exactly these extra headers (and the token, if any).
    pub async fn send_with(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        headers: &[(&str, &str)],
    ) -> Result<Reply, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut builder = Request::builder().method(method).uri(&url);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        if let Some(token) = &self.token {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = builder.body(Full::new(body.unwrap_or_default())).map_err(|_| ClientError::Url(url.clone()))?;
        let connect_error = |e: &(dyn std::error::Error + 'static)| ClientError::Connect {
            url: url.clone(),
            message: idem_core::error::chain(e),
        };
        let response = self.http.request(request).await.map_err(|e| connect_error(&e))?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| connect_error(&e))?.to_bytes();
        Ok(Reply { status: parts.status, headers: parts.headers, body })
    }
}

#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The server's base URL [env: IDEM_URL, or IDEM_SERVER; default: http://127.0.0.1:7070].
    #[arg(long, env = "IDEM_URL")]
    pub server: Option<String>,
    /// Bearer token, when the server requires one.
    #[arg(long, env = "IDEM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Certificate authorities (PEM) to trust for an https:// server, besides the system's.
    #[arg(long, env = "IDEM_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

/// A failure with the exit code it deserves: 1 for "not found / refused", 2 for bad usage or config
/// (an argument the server answers 400 to included).
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Self { code: 2, message: message.into() }
    }
    pub fn runtime(message: impl Into<String>) -> Self {
        Self { code: 1, message: message.into() }
    }
}

/// Where the server is when neither `--server` nor `IDEM_URL` says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7070";

impl ClientArgs {
    /// `--server`, else `IDEM_URL` (clap reads both), else `IDEM_SERVER` (its older name), else
    /// the default.
    pub fn server(&self) -> String {
        self.server
            .clone()
            .or_else(|| std::env::var("IDEM_SERVER").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| DEFAULT_SERVER.to_owned())
    }
}

pub fn connect(client: &ClientArgs) -> Result<ApiClient, Failure> {
    ApiClient::with_ca(&client.server(), client.token.clone(), client.ca_file.as_deref())
        .map_err(|e| Failure::usage(e.to_string()))
}

/// Whether a failed answer is idem's own: RFC 9457 problem+json with an `urn:idem:problem:` type.
/// Anything else (a web server's 404 page, a proxy's error) comes from something that is not idem.
pub fn is_idem_problem(reply: &Reply, problem: &serde_json::Value) -> bool {
    let problem_json = reply
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/problem+json"));
    problem_json && problem.get("type").and_then(|t| t.as_str()).is_some_and(|t| t.starts_with("urn:idem:problem:"))
}

/// Sends a request; a non-2xx answer becomes a failure carrying the problem's detail.
pub async fn send(
    client: &ApiClient,
    method: Method,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Result<Reply, Failure> {
    let reply = client.send(method, path, body).await.map_err(|e| {
        Failure::runtime(format!(
            "{e}\n(is idem running there? point the CLI elsewhere with --server URL or IDEM_URL=URL)"
        ))
    })?;
    if reply.status.is_success() {
        return Ok(reply);
    }
    let problem = reply.json();
    if !is_idem_problem(&reply, &problem) {
        return Err(Failure::runtime(format!(
            "{} answered {} to {path} without an idem problem document: it does not look like idem (check --server or IDEM_URL)",
            client.base(),
            reply.status
        )));
    }
    let detail = problem.get("detail").and_then(|d| d.as_str()).unwrap_or("");
    let field = problem.get("field").and_then(|f| f.as_str()).map(|f| format!(" (field {f})")).unwrap_or_default();
    let message = format!("server answered {}: {detail}{field}", reply.status);
    // The server found the request as typed invalid: a usage error, like a bad argument.
    if reply.status == StatusCode::BAD_REQUEST {
        return Err(Failure::usage(message));
    }
    Err(Failure::runtime(message))
}
