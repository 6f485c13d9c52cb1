//! The command line: `idem serve`, `idem config check`, `idem import`, and the client verbs
//! `idem claims put|get|delete` that talk to a running server.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use http::Method;
use idem_core::{ClaimId, Clock, Namespace, Parts, Store, SystemClock};
use idem_sqlite::{SqliteOptions, SqliteStore};

use crate::Listeners;
use crate::client::{ApiClient, Reply};
use crate::config::{Config, Overrides, StoreConfig};

#[derive(Debug, Parser)]
#[command(name = "idem", version, about = "Make side effects happen once: claims, idempotency keys, events.")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (with no arguments: 127.0.0.1:7070, data in ./idem-data).
    Serve(ServeArgs),
    /// Work with config files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Load existing keys from JSON Lines into a running server, one claim per line.
    Import(ImportArgs),
    /// Claims on a running server.
    #[command(subcommand)]
    Claims(ClaimsCommand),
    /// Event receipts on a running server.
    #[command(subcommand)]
    Receipts(ReceiptsCommand),
    /// Prepare a PostgreSQL database for idem (apply pending migrations).
    Migrate {
        /// The database (or IDEM_DATABASE_URL).
        #[arg(long, env = "IDEM_DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ReceiptsCommand {
    /// A page of receipts, newest first.
    List {
        #[arg(long)]
        source: Option<String>,
        /// accepted, processing, retrying, completed or dead.
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The `next_cursor` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// One receipt with its attempts (exit 1 when absent).
    Show {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Deliver a dead or completed receipt again from attempt 1.
    Replay {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// A TOML config file.
    #[arg(long, env = "IDEM_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address of the API (overrides `listen`).
    #[arg(long)]
    pub listen: Option<String>,
    /// Directory of the embedded store (overrides `data_dir`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Store backend: sqlite or postgres (overrides `[store] type`).
    #[arg(long)]
    pub store: Option<String>,
    /// PostgreSQL URL (overrides `[store] url`).
    #[arg(long, env = "IDEM_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Allow a non-loopback `listen` with no `[auth] tokens`.
    #[arg(long)]
    pub insecure_no_auth: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the config and print the effective result, secrets redacted.
    Check(ConfigArgs),
}

#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The server's base URL.
    #[arg(long, env = "IDEM_SERVER", default_value = "http://127.0.0.1:7070")]
    pub server: String,
    /// Bearer token, when the server requires one.
    #[arg(long, env = "IDEM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// JSON Lines file, or - for standard input.
    pub file: PathBuf,
    /// Namespace for lines that do not name one.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Claims sent per request.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The key (one-part form).
    #[arg(long, conflicts_with = "part")]
    pub key: Option<String>,
    /// One key part; repeat for a composite key, in order.
    #[arg(long = "part")]
    pub part: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum ClaimsCommand {
    /// Claim a key: prints the record and whether this call claimed it.
    Put {
        namespace: String,
        #[command(flatten)]
        key: KeyArgs,
        /// JSON stored with the claim.
        #[arg(long)]
        data: Option<String>,
        /// Seconds until the claim expires.
        #[arg(long)]
        ttl_seconds: Option<u64>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print a claim (exit 1 when absent).
    Get {
        namespace: String,
        /// The claim id; or give --key / --part.
        id: Option<String>,
        #[command(flatten)]
        key: KeyArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete a claim (exit 1 when absent).
    Delete {
        namespace: String,
        id: Option<String>,
        #[command(flatten)]
        key: KeyArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// A failure with the exit code it deserves: 1 for "not found / rejected", 2 for bad usage or config.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Self { code: 2, message: message.into() }
    }
    fn runtime(message: impl Into<String>) -> Self {
        Self { code: 1, message: message.into() }
    }
}

pub async fn dispatch(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Config(ConfigCommand::Check(args)) => {
            let config = load_config(&args)?;
            print!("{}", config.to_redacted_toml());
            eprintln!("idem: config ok");
            Ok(())
        }
        Command::Import(args) => crate::import::run(args).await,
        Command::Claims(command) => claims(command).await,
        Command::Receipts(command) => receipts(command).await,
        Command::Migrate { database_url } => {
            let version =
                idem_postgres::PgStore::migrate(&database_url).await.map_err(|e| Failure::runtime(e.to_string()))?;
            eprintln!("idem: the database is at schema version {version}");
            Ok(())
        }
    }
}

pub fn load_config(args: &ConfigArgs) -> Result<Config, Failure> {
    let overrides = Overrides {
        listen: args.listen.clone(),
        data_dir: args.data_dir.clone(),
        store: args.store.clone(),
        database_url: args.database_url.clone(),
    };
    Config::load(args.config.as_deref(), std::env::vars(), &overrides).map_err(|e| Failure::usage(e.to_string()))
}

/// Chooses the backend, once, for the whole process; answers it with the clock it keeps time by
/// (the system's for the embedded store, the database's for PostgreSQL), which the rest of the
/// server must share.
pub async fn open_store(config: &Config) -> Result<(Arc<dyn Store>, Arc<dyn Clock>), Failure> {
    match &config.store {
        StoreConfig::Sqlite {} => {
            let clock: Arc<dyn Clock> = Arc::new(SystemClock);
            let store = SqliteStore::open(&config.data_dir, Arc::clone(&clock), SqliteOptions::default())
                .map_err(|e| Failure::runtime(e.to_string()))?;
            Ok((Arc::new(store), clock))
        }
        StoreConfig::Postgres { url, pool_size } => {
            let time = idem_postgres::TimeSource::Database { local: Arc::new(SystemClock) };
            let store = idem_postgres::PgStore::connect(url.expose(), *pool_size, time)
                .await
                .map_err(|e| Failure::runtime(e.to_string()))?;
            let clock = store.clock();
            Ok((Arc::new(store), clock))
        }
    }
}

async fn serve(args: ServeArgs) -> Result<(), Failure> {
    let config = load_config(&args.config)?;
    crate::telemetry::init_logging(&config.log);
    if !config.listen.ip().is_loopback() && config.auth.tokens.is_empty() && !args.insecure_no_auth {
        return Err(Failure::usage(format!(
            "refusing to listen on {} with no [auth] tokens: anyone who can reach it could claim and delete keys. \
             Set [auth] tokens, listen on a loopback address, or pass --insecure-no-auth",
            config.listen
        )));
    }
    let (store, clock) = open_store(&config).await?;
    let listeners = Listeners::bind(&config).await.map_err(|e| Failure::runtime(format!("cannot listen: {e}")))?;
    if let Some(gateway) = listeners.gateway.as_ref().and_then(|l| l.local_addr().ok()) {
        let upstream = config.gateway.as_ref().map_or("", |g| g.upstream.as_str());
        tracing::info!(addr = %gateway, upstream, "idem gateway listening");
    }
    let addr = listeners.api.local_addr().map_err(|e| Failure::runtime(e.to_string()))?;
    let store_kind = match &config.store {
        StoreConfig::Sqlite {} => format!("sqlite in {}", config.data_dir.display()),
        StoreConfig::Postgres { .. } => "postgres".to_owned(),
    };
    tracing::info!(%addr, store = store_kind, "idem listening");
    crate::run(config, store, clock, listeners, shutdown_signal()).await.map_err(|e| Failure::runtime(e.to_string()))
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
    tracing::info!("shutting down: finishing in-flight requests");
}

fn key_parts(key: KeyArgs) -> Result<Option<Parts>, Failure> {
    let parts = match (key.key, key.part.is_empty()) {
        (Some(k), _) => Parts::single(k),
        (None, false) => Parts::new(key.part),
        (None, true) => return Ok(None),
    };
    parts.map(Some).map_err(|e| Failure::usage(format!("invalid key: {e}")))
}

fn claim_id(id: Option<String>, key: KeyArgs) -> Result<ClaimId, Failure> {
    match (id, key_parts(key)?) {
        (Some(id), None) => ClaimId::parse(&id).map_err(|e| Failure::usage(e.to_string())),
        (None, Some(parts)) => Ok(parts.id()),
        _ => Err(Failure::usage("give either an id or --key/--part")),
    }
}

fn connect(client: &ClientArgs) -> Result<ApiClient, Failure> {
    ApiClient::new(&client.server, client.token.clone()).map_err(|e| Failure::usage(e.to_string()))
}

fn check_namespace(ns: &str) -> Result<(), Failure> {
    Namespace::new(ns).map(drop).map_err(|e| Failure::usage(e.to_string()))
}

async fn claims(command: ClaimsCommand) -> Result<(), Failure> {
    let reply = match command {
        ClaimsCommand::Put { namespace, key, data, ttl_seconds, client } => {
            check_namespace(&namespace)?;
            let parts = key_parts(key)?.ok_or_else(|| Failure::usage("give --key or --part"))?;
            let data: Option<serde_json::Value> = data
                .map(|d| serde_json::from_str(&d))
                .transpose()
                .map_err(|e| Failure::usage(format!("--data is not JSON: {e}")))?;
            let body = serde_json::json!({"parts": parts.as_slice(), "data": data, "ttl_seconds": ttl_seconds});
            send(&connect(&client)?, Method::POST, &format!("/v1/claims/{namespace}"), Some(&body)).await?
        }
        ClaimsCommand::Get { namespace, id, key, client } => {
            check_namespace(&namespace)?;
            let id = claim_id(id, key)?;
            send(&connect(&client)?, Method::GET, &format!("/v1/claims/{namespace}/{id}"), None).await?
        }
        ClaimsCommand::Delete { namespace, id, key, client } => {
            check_namespace(&namespace)?;
            let id = claim_id(id, key)?;
            send(&connect(&client)?, Method::DELETE, &format!("/v1/claims/{namespace}/{id}"), None).await?
        }
    };
    if !reply.body.is_empty() {
        println!("{}", serde_json::to_string_pretty(&reply.json()).unwrap_or_default());
    }
    Ok(())
}

async fn receipts(command: ReceiptsCommand) -> Result<(), Failure> {
    let reply = match command {
        ReceiptsCommand::List { source, status, limit, cursor, client } => {
            let mut query = vec![format!("limit={limit}")];
            let params = [("source", source), ("status", status), ("cursor", cursor)];
            query.extend(params.into_iter().filter_map(|(k, v)| v.map(|v| format!("{k}={}", percent_encode(&v)))));
            send(&connect(&client)?, Method::GET, &format!("/v1/receipts?{}", query.join("&")), None).await?
        }
        ReceiptsCommand::Show { id, client } => {
            send(&connect(&client)?, Method::GET, &format!("/v1/receipts/{}", percent_encode(&id)), None).await?
        }
        ReceiptsCommand::Replay { id, client } => {
            send(&connect(&client)?, Method::POST, &format!("/v1/receipts/{}/replay", percent_encode(&id)), None)
                .await?
        }
    };
    println!("{}", serde_json::to_string_pretty(&reply.json()).unwrap_or_default());
    Ok(())
}

/// Encodes a query or path value: everything but unreserved characters.
fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Sends a request; a non-2xx answer becomes a failure carrying the problem's detail.
pub async fn send(
    client: &ApiClient,
    method: Method,
    path: &str,
    body: Option<&serde_json::Value>,
) -> Result<Reply, Failure> {
    let reply = client.send(method, path, body).await.map_err(|e| Failure::runtime(e.to_string()))?;
    if reply.status.is_success() {
        return Ok(reply);
    }
    let problem = reply.json();
    let detail = problem.get("detail").and_then(|d| d.as_str()).unwrap_or("");
    let field = problem.get("field").and_then(|f| f.as_str()).map(|f| format!(" (field {f})")).unwrap_or_default();
    Err(Failure::runtime(format!("server answered {}: {detail}{field}", reply.status)))
}
