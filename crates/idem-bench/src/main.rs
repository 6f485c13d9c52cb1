//! `idem-bench`: idem measured side by side with its anchors, in one run, on one machine. Each
//! scenario starts what it needs (idem on a fresh data dir, a built-in upstream, a private Redis)
//! and prints a table with ratios — absolute figures drift on shared machines; ratios hold.
//!
//! ```sh
//! cargo build --release -p idem-server -p idem-bench
//! ./target/release/idem-bench all --quick --json bench.json
//! ```

mod expiry;
mod jwt;
mod load;
mod pin;
mod replay;
mod scenario;
mod stored;
mod table;
mod target;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use table::Table;

#[derive(Debug, Parser)]
#[command(name = "idem-bench", about = "idem beside its anchors, in one run")]
struct Cli {
    #[command(subcommand)]
    scenario: Which,
    /// Short runs (1 s warm-up, 4 s per measurement): `all --quick` takes about 2½ minutes.
    #[arg(long, global = true)]
    quick: bool,
    /// Seconds per measurement (default 10, or 4 with --quick).
    #[arg(long, global = true)]
    seconds: Option<u64>,
    /// Concurrent connections.
    #[arg(long, global = true, default_value_t = 64)]
    connections: usize,
    /// Also write the results as JSON.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    /// Runs of each scenario (anchors included, so each round's ratios compare measurements a
    /// minute apart); the table shows each row's median round and each ratio's median and range.
    #[arg(long, global = true, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// The store of the idem under test: `embedded` (the log engine, events in SQLite), or
    /// `postgres` (a fresh schema in the --database-url database, dropped afterwards).
    #[arg(long, global = true, value_enum, default_value_t = StoreKind::Embedded)]
    store: StoreKind,
    /// PostgreSQL for the INSERT … ON CONFLICT anchor (and for idem with --store postgres).
    #[arg(
        long,
        global = true,
        env = "IDEM_BENCH_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    database_url: String,
    /// The load generator on the first core, idem and every anchor (Redis, the built-in servers,
    /// the running PostgreSQL) on the others, for the whole run (with `taskset`).
    #[arg(long, global = true)]
    pin: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StoreKind {
    #[value(alias = "sqlite")]
    Embedded,
    Postgres,
}

#[derive(Debug, Clone, Subcommand, PartialEq, Eq)]
enum Which {
    /// Single durable claims (unique keys, and 10 % repeats) beside Redis SET NX and PostgreSQL.
    Claims,
    /// 500-item batch claims, in keys per second.
    ClaimsBatch,
    /// The gateway's replay and first-execution paths beside the upstream called directly.
    Gateway,
    /// Gateway first executions at a quarter of the upstream's capacity (open loop): the latency
    /// idem adds over the upstream called directly at the same rate, p50 and p99.
    GatewayLatency,
    /// What a `jwt:` scope costs: one token verification in process (HS256, RS256, ES256, EdDSA),
    /// and gateway replays scoped by `jwt:sub` beside the same scoped by the header.
    Jwt,
    /// Event intake and end-to-end delivery beside single claims of the same build.
    Events,
    /// 500-key batch lookups among a million stored claims, beside PostgreSQL and Redis.
    Lookup,
    /// Claims and lookups as the store grows (0, 1 million and 10 million stored claims).
    Scale {
        /// Stored claims at which to measure, comma-separated [default: 0,1000000,10000000; with
        /// --quick 0,1000000, since storing ten million claims takes minutes].
        #[arg(long, value_delimiter = ',')]
        stages: Vec<u64>,
    },
    /// Claims expiring while the sweeper (every second) and compaction run, with clients claiming
    /// beside them: no error, and the data dir back under half its peak within a minute.
    Expiry {
        /// Claims stored first, never expiring [default: 0].
        #[arg(long, default_value_t = 0)]
        stored: u64,
        /// Claims with `ttl_seconds: 1` [default: 60000, 300 batches of 200].
        #[arg(long, default_value_t = 60_000)]
        expiring: u64,
        /// Bytes of data in each expiring claim.
        #[arg(long, default_value_t = 4096)]
        data_bytes: usize,
    },
    /// Event intake while a bulk replay of dead letters runs, beside intake alone.
    Replay {
        /// Dead letters to replay [default: 10000; with --quick 2000].
        #[arg(long)]
        dead: Option<u64>,
    },
    /// Every scenario above.
    All,
    /// (internal) Serve the built-in upstream on ADDR, as its own process.
    #[command(hide = true)]
    Upstream { addr: String },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Which::Upstream { addr } = &cli.scenario {
        return match target::serve_upstream(addr).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(format!("idem-bench upstream: {e}")),
        };
    }
    let _postgres_pinned = if cli.pin {
        match pin_everything(&cli.database_url).await {
            Ok(pinned) => pinned,
            Err(e) => return fail(format!("idem-bench: --pin: {e}")),
        }
    } else {
        None
    };
    let contexts = contexts(&cli);
    let (mut tables, mut failed) = (Vec::new(), 0u64);
    for w in scenarios(&cli.scenario) {
        let mut rounds = Vec::new();
        for (round, ctx) in contexts.iter().enumerate() {
            if contexts.len() > 1 {
                eprintln!("  {w:?}: round {} of {}", round + 1, contexts.len());
            }
            match run(&w, ctx).await {
                Ok(table) => {
                    failed += table.rows.iter().chain(&table.anchors).map(|m| m.errors).sum::<u64>();
                    rounds.push(table);
                }
                Err(e) => return fail(format!("idem-bench: {w:?} failed: {e}")),
            }
        }
        if let Some(table) = Table::combine(rounds) {
            table.print();
            tables.push(table);
        }
    }
    if let Some(path) = &cli.json
        && let Err(e) = write_json(&cli, path, &tables)
    {
        return fail(format!("idem-bench: cannot write {}: {e}", path.display()));
    }
    // A run in which requests failed measured something else than it says: fail it (CI's smoke
    // test relies on this).
    if failed > 0 {
        return fail(format!("idem-bench: {failed} requests failed; the figures above do not stand"));
    }
    ExitCode::SUCCESS
}

fn fail(message: String) -> ExitCode {
    eprintln!("{message}");
    ExitCode::FAILURE
}

fn seconds(cli: &Cli) -> u64 {
    cli.seconds.unwrap_or(if cli.quick { 4 } else { 10 })
}

/// One context per round: `claims` and `claims-batch` share a round's anchors.
fn contexts(cli: &Cli) -> Vec<scenario::Context> {
    let plan = load::Plan {
        connections: cli.connections,
        warmup: Duration::from_secs(if cli.quick { 1 } else { 2 }),
        duration: Duration::from_secs(seconds(cli)),
    };
    let backend = match cli.store {
        StoreKind::Embedded => target::Backend::Embedded,
        StoreKind::Postgres => target::Backend::Postgres(cli.database_url.clone()),
    };
    (0..cli.rounds)
        .map(|_| scenario::Context {
            plan,
            database_url: cli.database_url.clone(),
            backend: backend.clone(),
            quick: cli.quick,
            claim_anchors: Default::default(),
        })
        .collect()
}

fn scenarios(which: &Which) -> Vec<Which> {
    match which.clone() {
        Which::All => vec![
            Which::Claims,
            Which::ClaimsBatch,
            Which::Lookup,
            Which::Gateway,
            Which::GatewayLatency,
            Which::Jwt,
            Which::Events,
            Which::Replay { dead: None },
            Which::Scale { stages: Vec::new() },
        ],
        one => vec![one],
    }
}

/// One round of one scenario.
async fn run(w: &Which, ctx: &scenario::Context) -> Result<Table, String> {
    match w {
        Which::Claims => scenario::claims(ctx).await,
        Which::ClaimsBatch => scenario::claims_batch(ctx).await,
        Which::Gateway => scenario::gateway(ctx).await,
        Which::GatewayLatency => scenario::gateway_latency(ctx).await,
        Which::Jwt => jwt::jwt(ctx).await,
        Which::Events => scenario::events(ctx).await,
        Which::Replay { dead } => replay::replay(ctx, dead.unwrap_or(if ctx.quick { 2_000 } else { 10_000 })).await,
        Which::Lookup => stored::lookup(ctx).await,
        Which::Expiry { stored, expiring, data_bytes } => expiry::expiry(ctx, *stored, *expiring, *data_bytes).await,
        Which::Scale { stages } => stored::scale(ctx, stages.clone()).await,
        Which::All | Which::Upstream { .. } => unreachable!("handled by main"),
    }
}

fn write_json(cli: &Cli, path: &std::path::Path, tables: &[Table]) -> std::io::Result<()> {
    let doc = serde_json::json!({
        "machine": { "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0) },
        "seconds_per_measurement": seconds(cli),
        "connections": cli.connections,
        "rounds": cli.rounds,
        "pinned": cli.pin,
        "store": format!("{:?}", cli.store).to_lowercase(),
        "scenarios": tables,
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
}

/// `--pin`: this process on core 0, what it starts on the rest, and the running PostgreSQL there
/// too for the run (without PostgreSQL here, its anchor is skipped anyway).
async fn pin_everything(database_url: &str) -> Result<Option<pin::PostgresPinned>, String> {
    pin::enable()?;
    eprintln!("idem-bench: pinned: the load generator on core 0, idem and the anchors on the other cores");
    let Ok((client, connection)) = tokio_postgres::connect(database_url, tokio_postgres::NoTls).await else {
        return Ok(None);
    };
    tokio::spawn(connection);
    let row = client.query_one("SHOW data_directory", &[]).await.map_err(target::pg_error)?;
    let pinned = pin::postgres(row.get::<_, &str>(0))?;
    eprintln!("idem-bench: pinned: PostgreSQL (its postmaster and backends) too, until the run ends");
    Ok(Some(pinned))
}
