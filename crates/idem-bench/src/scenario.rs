//! The scenarios. Each measures idem and the anchors that give its figures meaning, in one run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OnceCell};

use crate::load::{self, Measured, Plan};
use crate::table::Table;
use crate::target::{self, Backend, Idem, Redis, RedisConn, Upstream, pg_error, unique_name};

pub struct Context {
    pub plan: Plan,
    /// The PostgreSQL of the `INSERT … ON CONFLICT` anchor (and of idem with `--store postgres`).
    pub database_url: String,
    pub backend: Backend,
    pub quick: bool,
    /// The per-key anchors, measured once per run and shared by `claims` and `claims-batch`.
    pub claim_anchors: OnceCell<(Vec<Measured>, Vec<String>)>,
}

fn unique(prefix: &str) -> String {
    unique_name(prefix).replace('_', "-")
}

/// Single claims of unique keys (and with 10 % repeats), beside Redis and PostgreSQL.
pub async fn claims(ctx: &Context) -> Result<Table, String> {
    let idem = Idem::start(&ctx.backend, "").await?;
    let client = target::http();
    let url = format!("{}/v1/claims/bench", idem.url);
    let mut rows = Vec::new();
    for (name, repeat) in [("idem single claims", false), ("idem single claims, 10 % repeats", true)] {
        let (client, url, run) = (client.clone(), url.clone(), unique("c"));
        rows.push(
            load::run(name, 1, ctx.plan, move |c, n| {
                let (client, url) = (client.clone(), url.clone());
                let n = if repeat && n % 10 == 0 && n > 10 { n - 10 } else { n };
                let body = format!("{{\"parts\":[\"{run}\",\"{c}\",\"{n}\"]}}");
                async move { target::post(&client, &url, body, &[]).await }
            })
            .await,
        );
    }
    let memory = idem.memory();
    drop(idem);
    let (mut anchors, skipped) = claim_anchors(ctx).await;
    anchors.push(http_ceiling(ctx, 1, |c, n| format!("{{\"parts\":[\"ceiling\",\"{c}\",\"{n}\"]}}")).await?);
    Ok(Table::new("claims", rows, anchors).skipped(skipped).memory(memory))
}

/// Redis `SET NX EX` (in memory and fsync-always) and PostgreSQL `INSERT … ON CONFLICT`.
async fn claim_anchors(ctx: &Context) -> (Vec<Measured>, Vec<String>) {
    ctx.claim_anchors.get_or_init(|| measure_claim_anchors(ctx)).await.clone()
}

async fn measure_claim_anchors(ctx: &Context) -> (Vec<Measured>, Vec<String>) {
    let (mut anchors, mut skipped) = (Vec::new(), Vec::new());
    for (name, durable) in [("redis SET NX EX (in memory)", false), ("redis SET NX EX (appendfsync always)", true)] {
        let Some(redis) = Redis::start(durable).await else {
            skipped.push(format!("{name}: no redis-server here"));
            continue;
        };
        let mut conns = Vec::new();
        for _ in 0..ctx.plan.connections {
            match RedisConn::connect(redis.port).await {
                Ok(c) => conns.push(Mutex::new(c)),
                Err(e) => skipped.push(format!("{name}: {e}")),
            }
        }
        if conns.len() < ctx.plan.connections {
            continue;
        }
        let (conns, run) = (Arc::new(conns), unique("r"));
        anchors.push(
            load::run(name, 1, ctx.plan, move |c, n| {
                let (conns, key) = (Arc::clone(&conns), format!("{run}-{c}-{n}"));
                async move { conns[c].lock().await.set_nx(&key).await }
            })
            .await,
        );
        drop(redis);
    }
    match postgres_anchor(ctx).await {
        Ok(m) => anchors.push(m),
        Err(e) => skipped.push(format!("postgres INSERT … ON CONFLICT: {e}")),
    }
    (anchors, skipped)
}

async fn postgres_anchor(ctx: &Context) -> Result<Measured, String> {
    let table = unique_name("idem_bench");
    let mut clients = Vec::new();
    for _ in 0..ctx.plan.connections {
        let (client, connection) =
            tokio_postgres::connect(&ctx.database_url, tokio_postgres::NoTls).await.map_err(pg_error)?;
        tokio::spawn(connection);
        clients.push(client);
    }
    clients[0]
        .batch_execute(&format!(
            "CREATE TABLE {table} (id text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())"
        ))
        .await
        .map_err(pg_error)?;
    let clients = Arc::new(clients);
    let sql = Arc::new(format!("INSERT INTO {table} (id) VALUES ($1) ON CONFLICT DO NOTHING"));
    let shared = Arc::clone(&clients);
    let measured = load::run("postgres INSERT … ON CONFLICT DO NOTHING", 1, ctx.plan, move |c, n| {
        let (clients, sql) = (Arc::clone(&shared), Arc::clone(&sql));
        async move { clients[c].execute(sql.as_str(), &[&format!("{c}-{n}")]).await.map(drop).map_err(pg_error) }
    })
    .await;
    let _ = clients[0].batch_execute(&format!("DROP TABLE {table}")).await;
    Ok(measured)
}

/// A 500-item batch of unique keys.
fn batch_body(run: &str, c: usize, n: u64) -> String {
    let items: Vec<String> = (0..500).map(|i| format!("{{\"key\":\"{run}-{c}-{n}-{i}\"}}")).collect();
    format!("{{\"items\":[{}]}}", items.join(","))
}

/// The machine's HTTP ceiling: a minimal axum server answering "ok" to the same bodies, over the
/// same connections, from its own process.
pub async fn http_ceiling<B>(ctx: &Context, per_op: u64, body: B) -> Result<Measured, String>
where
    B: Fn(usize, u64) -> String + Send + Sync + 'static,
{
    let server = Upstream::start().await?;
    let (client, url) = (target::http(), format!("{}/ok", server.url));
    let name = if per_op == 1 {
        "HTTP ceiling (axum \"ok\" server)".to_owned()
    } else {
        format!("HTTP ceiling (axum \"ok\" server), {per_op}-item bodies")
    };
    Ok(load::run(&name, per_op, ctx.plan, move |c, n| {
        let (client, url, body) = (client.clone(), url.clone(), body(c, n));
        async move { target::post(&client, &url, body, &[]).await }
    })
    .await)
}

/// 500-item batches, in keys per second, beside the same anchors.
pub async fn claims_batch(ctx: &Context) -> Result<Table, String> {
    let idem = Idem::start(&ctx.backend, "[limits]\nmax_body_bytes = 4194304\n").await?;
    let (client, url, run) = (target::http(), format!("{}/v1/claims/bench/batch", idem.url), unique("b"));
    let row = load::run("idem 500-item batches", 500, ctx.plan, move |c, n| {
        let (client, url) = (client.clone(), url.clone());
        let body = batch_body(&run, c, n);
        async move { target::post(&client, &url, body, &[]).await }
    })
    .await;
    let memory = idem.memory();
    drop(idem);
    let (mut anchors, skipped) = claim_anchors(ctx).await;
    anchors.push(http_ceiling(ctx, 500, |c, n| batch_body("ceiling", c, n)).await?);
    Ok(Table::new("claims-batch", vec![row], anchors).skipped(skipped).memory(memory))
}

/// The gateway's replay and first-execution paths, beside the upstream called directly and the
/// machine's HTTP ceiling.
pub async fn gateway(ctx: &Context) -> Result<Table, String> {
    let upstream_process = Upstream::start().await?;
    let upstream = upstream_process.url.clone();
    let gateway_port = target::free_port();
    let config = format!(
        "[gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\nupstream = \"{upstream}\"\n\n[[gateway.routes]]\npath = \"/orders\"\nmethods = [\"POST\"]\nkey = \"required\"\n"
    );
    let idem = Idem::start(&ctx.backend, &config).await?;
    let client = target::http();
    let gw = format!("http://127.0.0.1:{gateway_port}/orders");
    // Complete the keys that the replay run will cycle through.
    for k in 0..1000 {
        let key = format!("\"replay-{k}\"");
        target::post(&client, &gw, "{\"item\":\"book\"}".into(), &[("idempotency-key", &key)]).await?;
    }
    let mut rows = Vec::new();
    let (c2, gw2) = (client.clone(), gw.clone());
    rows.push(
        load::run("idem gateway replays", 1, ctx.plan, move |c, n| {
            let (client, url, key) = (c2.clone(), gw2.clone(), format!("\"replay-{}\"", (c as u64 * 7919 + n) % 1000));
            async move { target::post(&client, &url, "{\"item\":\"book\"}".into(), &[("idempotency-key", &key)]).await }
        })
        .await,
    );
    let (c3, gw3, run) = (client.clone(), gw.clone(), unique("g"));
    rows.push(
        load::run("idem gateway first executions", 1, ctx.plan, move |c, n| {
            let (client, url, key) = (c3.clone(), gw3.clone(), format!("\"{run}-{c}-{n}\""));
            async move { target::post(&client, &url, "{\"item\":\"book\"}".into(), &[("idempotency-key", &key)]).await }
        })
        .await,
    );
    let memory = idem.memory();
    drop(idem);
    let (c4, direct) = (client.clone(), format!("{upstream}/orders"));
    let anchors = vec![
        load::run("upstream called directly", 1, ctx.plan, move |_, _| {
            let (client, url) = (c4.clone(), direct.clone());
            async move { target::post(&client, &url, "{\"item\":\"book\"}".into(), &[]).await }
        })
        .await,
    ];
    drop(upstream_process);
    Ok(Table::new("gateway", rows, anchors).memory(memory))
}

/// Durable event intake and end-to-end delivery to the built-in handler, beside single claims of
/// the same process measured just before (while nothing is being delivered).
pub async fn events(ctx: &Context) -> Result<Table, String> {
    let upstream_process = Upstream::start().await?;
    let upstream = upstream_process.url.clone();
    let config = format!(
        "[[sources]]\nname = \"bench\"\nhandler_url = \"{upstream}/handle\"\nevent_id = \"/id\"\nconcurrency = 64\n\
         signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n"
    );
    let idem = Idem::start(&ctx.backend, &config).await?;
    let client = target::http();
    let (c1, claims_url, run) = (client.clone(), format!("{}/v1/claims/bench", idem.url), unique("ec"));
    let claims = load::run("idem single claims (same process)", 1, ctx.plan, move |c, n| {
        let (client, url, body) = (c1.clone(), claims_url.clone(), format!("{{\"key\":\"{run}-{c}-{n}\"}}"));
        async move { target::post(&client, &url, body, &[]).await }
    })
    .await;
    let started = Instant::now();
    let (c2, url, run) = (client.clone(), format!("{}/v1/sources/bench/events", idem.url), unique("e"));
    let intake = load::run("idem event intake (202)", 1, ctx.plan, move |c, n| {
        let (client, url, body) = (c2.clone(), url.clone(), format!("{{\"id\":\"{run}-{c}-{n}\",\"amount\":42}}"));
        async move { target::post(&client, &url, body, &[]).await }
    })
    .await;
    let delivery = delivered(&client, &idem, started).await?;
    let memory = idem.memory();
    drop((idem, upstream_process));
    Ok(Table::new("events", vec![intake, delivery], vec![claims]).memory(memory))
}

/// Waits until every accepted event is delivered and completed; the rate is completed deliveries
/// from the first event sent (warm-up included) to the last completion.
async fn delivered(client: &target::Http, idem: &Idem, started: Instant) -> Result<Measured, String> {
    let metrics = format!("{}/metrics", idem.url);
    let value = |text: &str, series: &str| -> f64 {
        text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok()).unwrap_or(0.0)
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let text = target::get_text(client, &metrics).await?;
        let accepted = value(&text, "idem_events_intake_total{source=\"bench\",outcome=\"accepted\"}");
        let completed = value(&text, "idem_deliveries_total{source=\"bench\",outcome=\"completed\"}");
        let elapsed = started.elapsed().as_secs_f64();
        eprint!("\r  delivering: {completed:.0} of {accepted:.0} completed ");
        if completed >= accepted && accepted > 0.0 {
            eprintln!();
            return Ok(Measured::throughput(
                "idem delivery, accepted → completed",
                completed / elapsed,
                completed as u64,
            ));
        }
        if Instant::now() > deadline {
            return Err(format!("only {completed} of {accepted} events delivered after 10 minutes"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
