//! The command line: `idem serve` and `idem config check` ([`serve`]), `idem import` ([`import`]),
//! `idem migrate`, `idem health` ([`health`]), and the client verbs `idem claims …` /
//! `idem operations …` / `idem receipts …` ([`verbs`]) that talk to a running server through
//! [`client`]. `data_dir` refuses, in words, a data dir `idem serve` may not write.

pub mod client;
mod data_dir;
pub mod health;
pub mod import;
pub mod secret;
pub mod serve;
pub mod token;
pub mod verbs;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use client::{ClientArgs, Failure};
use import::ImportArgs;
pub use serve::{load_config, open_store};

/// What `idem --version` prints after the name: the version, the commit and that commit's date
/// (`build.rs`; `unknown` when built outside a git checkout).
pub const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("IDEM_COMMIT"), ", ", env!("IDEM_COMMIT_DATE"), ")");

#[derive(Debug, Parser)]
#[command(
    name = "idem",
    version = VERSION,
    about = "Make side effects happen once: claims, idempotency keys, operations, events.",
    after_help = "Exit codes: 0 done; 1 not found, refused by the server, or a runtime failure; \
                  2 bad usage or config (an argument the server answers 400 to included); \
                  3 `claims put` found the key already claimed."
)]
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
    /// Make API tokens.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Make signing secrets (whsec_…) for [[sources]].
    #[command(subcommand)]
    Secret(secret::SecretCommand),
    /// Load existing keys from JSON Lines into a running server, one claim per line.
    Import(ImportArgs),
    /// Claims on a running server.
    #[command(subcommand)]
    Claims(ClaimsCommand),
    /// Event receipts on a running server.
    #[command(subcommand)]
    Receipts(ReceiptsCommand),
    /// Operations (idempotent work) on a running server.
    #[command(subcommand)]
    Operations(OperationsCommand),
    /// Verify the embedded store's files without starting (safe while idem runs): every segment
    /// the log's manifest lists, every record's checksum, and SQLite's integrity check of the
    /// events (exit 1 when anything acknowledged cannot be read).
    Check(ConfigArgs),
    /// Mend a damaged log so that idem starts again: shows what it would drop (nothing is changed
    /// without --yes); with --yes drops the damaged stretches, keeps every intact record and says
    /// how many it dropped. idem must not be running.
    Repair {
        /// Do it (every file changed is first copied into the log's damaged/ directory).
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Copy the embedded store into DIR while idem keeps serving: a consistent copy to restore
    /// from (start idem with `--data-dir DIR`).
    Backup {
        /// An empty or new directory.
        dir: PathBuf,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Exit 0 when the idem at --url is ready (`GET /readyz` answers 200), else 1 saying why: a
    /// health check for containers and scripts.
    Health(health::HealthArgs),
    /// Prepare a PostgreSQL database for idem (apply pending migrations).
    Migrate {
        /// The database (or IDEM_DATABASE_URL).
        #[arg(long, env = "IDEM_DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum OperationsCommand {
    /// Print an operation: in progress, or completed with its result (exit 1 when absent).
    Get {
        namespace: String,
        /// The operation id; or give --key / --part.
        id: Option<String>,
        #[command(flatten)]
        key: KeyArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Forget a completed operation so that its work may run again (exit 1 when absent or held).
    Delete {
        namespace: String,
        id: Option<String>,
        #[command(flatten)]
        key: KeyArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum ReceiptsCommand {
    /// A page of receipts, newest first.
    List {
        /// Only receipts of this source.
        #[arg(long)]
        source: Option<String>,
        /// Only receipts in this state.
        #[arg(long, value_parser = idem_core::event::ReceiptStatus::NAMES)]
        status: Option<String>,
        /// Only the receipt(s) of this event id.
        #[arg(long)]
        event_id: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The `next_cursor` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
        /// table: one line per receipt, for people; json: the API's page as it is, for programs.
        /// Default: table when stdout is a terminal, else json.
        #[arg(long, value_enum)]
        output: Option<Output>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// One receipt with its attempts (exit 1 when absent).
    Show {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Deliver a receipt again from attempt 1, or with --status every receipt that matches
    /// (`idem receipts replay --status dead --source partner --dry-run` counts them first).
    Replay {
        /// One receipt (rcpt_…); leave it out to replay every match of the filters.
        id: Option<String>,
        #[command(flatten)]
        filter: ReplayFilterArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Mark a dead receipt as handled by hand: it leaves the dead letters, and can still be
    /// replayed.
    Discard {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// How `idem receipts list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// An RFC 3339 time, checked before anything is sent: a mistake is a usage error (exit 2).
fn rfc3339(text: &str) -> Result<String, String> {
    match idem_core::Timestamp::parse_rfc3339(text) {
        Some(_) => Ok(text.to_owned()),
        None => Err("not an RFC 3339 time such as 2026-11-24T00:00:00Z".into()),
    }
}

/// Which receipts `idem receipts replay` replays when given no id.
#[derive(Debug, Args)]
pub struct ReplayFilterArgs {
    /// Replay every receipt in this state.
    #[arg(long, value_parser = ["dead", "completed", "discarded"])]
    pub status: Option<String>,
    /// Only receipts of this source.
    #[arg(long)]
    pub source: Option<String>,
    /// Only the receipt(s) of this event id.
    #[arg(long)]
    pub event_id: Option<String>,
    /// RFC 3339: only receipts created before this time.
    #[arg(long, value_parser = rfc3339)]
    pub created_before: Option<String>,
    /// RFC 3339: only receipts created after this time.
    #[arg(long, value_parser = rfc3339)]
    pub created_after: Option<String>,
    /// Count the matching receipts and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl ReplayFilterArgs {
    fn is_empty(&self) -> bool {
        self.status.is_none()
            && self.source.is_none()
            && self.event_id.is_none()
            && self.created_before.is_none()
            && self.created_after.is_none()
            && !self.dry_run
    }

    /// The body of `POST /v1/receipts/replay`.
    fn body(self) -> serde_json::Value {
        let mut body = serde_json::json!({"dry_run": self.dry_run});
        for (field, value) in [
            ("status", self.status),
            ("source", self.source),
            ("event_id", self.event_id),
            ("created_before", self.created_before),
            ("created_after", self.created_after),
        ] {
            if let Some(value) = value {
                body[field] = value.into();
            }
        }
        body
    }
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
    /// Store backend: embedded or postgres (overrides `[store] type`).
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
    /// Allow a non-loopback `listen` with no tokens configured.
    #[arg(long)]
    pub insecure_no_auth: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the config and print the effective result, secrets redacted.
    Check(ConfigArgs),
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
    /// Delete a claim (exit 1 when absent), or with --prefix every claim whose parts begin so.
    Delete {
        namespace: String,
        /// The claim id; or give --key / --part, or --prefix to delete every claim under a prefix.
        id: Option<String>,
        #[command(flatten)]
        key: KeyArgs,
        /// Delete every live claim whose parts begin with these; repeat for each part, in order.
        #[arg(long = "prefix", conflicts_with_all = ["id", "key", "part"])]
        prefix: Vec<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print the live claims whose parts begin with a prefix, one JSON record per line, in parts order.
    List {
        namespace: String,
        /// A part of the prefix; repeat for each part, in order (at least one).
        #[arg(long = "prefix", required = true)]
        prefix: Vec<String>,
        /// Print at most this many.
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        client: ClientArgs,
    },
}

pub async fn dispatch(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Serve(args) => serve::serve(args).await,
        Command::Config(ConfigCommand::Check(args)) => {
            let config = load_config(&args)?;
            for warning in &config.warnings {
                eprintln!("idem: warning: {warning}");
            }
            config.check_exposure(false).map_err(Failure::usage)?;
            config.check_transport().map_err(Failure::usage)?;
            crate::tls::check_files(&config).map_err(|e| Failure::usage(e.to_string()))?;
            crate::jwks::check_files(&config).map_err(|e| Failure::usage(e.to_string()))?;
            print!("{}", config.to_redacted_toml());
            eprintln!("idem: config ok");
            Ok(())
        }
        Command::Token(command) => token::run(command),
        Command::Secret(command) => secret::run(command),
        Command::Check(args) => serve::check(&load_config(&args)?),
        Command::Repair { yes, config } => serve::repair(&load_config(&config)?, yes),
        Command::Backup { dir, config } => serve::backup(&load_config(&config)?, &dir).await,
        Command::Import(args) => import::run(args).await,
        Command::Claims(command) => verbs::claims(command).await,
        Command::Receipts(command) => verbs::receipts(command).await,
        Command::Operations(command) => verbs::operations(command).await,
        Command::Health(args) => health::run(args).await,
        Command::Migrate { database_url } => {
            let version =
                idem_postgres::PgStore::migrate(&database_url).await.map_err(|e| Failure::runtime(e.to_string()))?;
            eprintln!("idem: the database is at schema version {version}");
            Ok(())
        }
    }
}
