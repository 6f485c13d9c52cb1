//! The scenarios. Each measures idem and the anchors that give its figures meaning, in one run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tokio::sync::Mutex;

use crate::load::{self, Measured, Plan};
use crate::target::{self, Idem, Redis, RedisConn};

pub struct Context {
    pub plan: Plan,
    pub database_url: String,
}

/// One scenario's results: idem's rows, the anchors' rows, and idem's heap.
#[derive(Debug, Serialize)]
pub struct Table {
    pub scenario: &'static str,
    pub rows: Vec<Measured>,
    pub anchors: Vec<Measured>,
    pub skipped: Vec<String>,
    pub idem_heap_mib: Option<f64>,
}

impl Table {
    pub fn print(&self) {
        println!("\n## {}", self.scenario);
        println!(
            "{:<40} {:>12} {:>12} {:>9} {:>9} {:>9} {:>7}",
            "", "ops/s", "items/s", "p50 ms", "p99 ms", "max ms", "errors"
        );
        for m in self.rows.iter().chain(&self.anchors) {
            println!(
                "{:<40} {:>12.0} {:>12.0} {:>9.2} {:>9.2} {:>9.1} {:>7}",
                m.name,
                m.ops_per_sec,
                m.items_per_sec(),
                m.p50_ms,
                m.p99_ms,
                m.max_ms,
                m.errors
            );
        }
        for row in &self.rows {
            for anchor in &self.anchors {
                println!(
                    "  {} / {}: {:.2}x",
                    row.name,
                    anchor.name,
                    row.items_per_sec() / anchor.items_per_sec().max(f64::MIN_POSITIVE)
                );
            }
        }
        for note in &self.skipped {
            println!("  (skipped: {note})");
        }
        if let Some(heap) = self.idem_heap_mib {
            println!("  idem heap (RssAnon): {heap:.0} MiB");
        }
    }
}

fn unique(prefix: &str) -> String {
    static RUN: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}-{}", std::process::id(), RUN.fetch_add(1, Ordering::Relaxed))
}

/// Single claims of unique keys (and with 10 % repeats), beside Redis and PostgreSQL.
pub async fn claims(ctx: &Context) -> Result<Table, String> {
    let idem = Idem::start("").await?;
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
    let heap = idem.heap_mib();
    drop(idem);
    let (anchors, skipped) = claim_anchors(ctx).await;
    Ok(Table { scenario: "claims", rows, anchors, skipped, idem_heap_mib: heap })
}

/// Redis `SET NX EX` (in memory and fsync-always) and PostgreSQL `INSERT … ON CONFLICT`.
async fn claim_anchors(ctx: &Context) -> (Vec<Measured>, Vec<String>) {
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
    let table = unique("idem_bench").replace('-', "_");
    let mut clients = Vec::new();
    for _ in 0..ctx.plan.connections {
        let (client, connection) =
            tokio_postgres::connect(&ctx.database_url, tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        clients.push(client);
    }
    clients[0]
        .batch_execute(&format!(
            "CREATE TABLE {table} (id text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())"
        ))
        .await
        .map_err(|e| e.to_string())?;
    let clients = Arc::new(clients);
    let sql = Arc::new(format!("INSERT INTO {table} (id) VALUES ($1) ON CONFLICT DO NOTHING"));
    let shared = Arc::clone(&clients);
    let measured =
        load::run("postgres INSERT … ON CONFLICT DO NOTHING", 1, ctx.plan, move |c, n| {
            let (clients, sql) = (Arc::clone(&shared), Arc::clone(&sql));
            async move {
                clients[c].execute(sql.as_str(), &[&format!("{c}-{n}")]).await.map(drop).map_err(|e| e.to_string())
            }
        })
        .await;
    let _ = clients[0].batch_execute(&format!("DROP TABLE {table}")).await;
    Ok(measured)
}

/// 500-item batches, in keys per second, beside the same anchors.
pub async fn claims_batch(ctx: &Context) -> Result<Table, String> {
    let idem = Idem::start("[limits]\nmax_body_bytes = 4194304\n").await?;
    let (client, url, run) = (target::http(), format!("{}/v1/claims/bench/batch", idem.url), unique("b"));
    let row = load::run("idem 500-item batches", 500, ctx.plan, move |c, n| {
        let (client, url) = (client.clone(), url.clone());
        let items: Vec<String> = (0..500).map(|i| format!("{{\"key\":\"{run}-{c}-{n}-{i}\"}}")).collect();
        let body = format!("{{\"items\":[{}]}}", items.join(","));
        async move { target::post(&client, &url, body, &[]).await }
    })
    .await;
    let heap = idem.heap_mib();
    drop(idem);
    let (anchors, skipped) = claim_anchors(ctx).await;
    Ok(Table { scenario: "claims-batch", rows: vec![row], anchors, skipped, idem_heap_mib: heap })
}

/// The gateway's replay and first-execution paths, beside the upstream called directly and the
/// machine's HTTP ceiling.
pub async fn gateway(ctx: &Context) -> Result<Table, String> {
    let upstream_process = target::Upstream::start().await?;
    let upstream = upstream_process.url.clone();
    let gateway_port = target::free_port();
    let config = format!(
        "[gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\nupstream = \"{upstream}\"\n\n[[gateway.routes]]\npath = \"/orders\"\nmethods = [\"POST\"]\nkey = \"required\"\n"
    );
    let idem = Idem::start(&config).await?;
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
    let heap = idem.heap_mib();
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
    Ok(Table { scenario: "gateway", rows, anchors, skipped: Vec::new(), idem_heap_mib: heap })
}

/// Durable event intake (deliveries running to a built-in handler), beside single claims.
pub async fn events(ctx: &Context) -> Result<Table, String> {
    let upstream_process = target::Upstream::start().await?;
    let upstream = upstream_process.url.clone();
    let config = format!(
        "[[sources]]\nname = \"bench\"\nhandler_url = \"{upstream}/handle\"\nevent_id = \"/id\"\nconcurrency = 64\n\
         signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n"
    );
    let idem = Idem::start(&config).await?;
    let client = target::http();
    let (c1, url, run) = (client.clone(), format!("{}/v1/sources/bench/events", idem.url), unique("e"));
    let intake = load::run("idem event intake (202)", 1, ctx.plan, move |c, n| {
        let (client, url, body) = (c1.clone(), url.clone(), format!("{{\"id\":\"{run}-{c}-{n}\",\"amount\":42}}"));
        async move { target::post(&client, &url, body, &[]).await }
    })
    .await;
    let (c2, claims_url, run) = (client.clone(), format!("{}/v1/claims/bench", idem.url), unique("ec"));
    let claims = load::run("idem single claims (same process)", 1, ctx.plan, move |c, n| {
        let (client, url, body) = (c2.clone(), claims_url.clone(), format!("{{\"key\":\"{run}-{c}-{n}\"}}"));
        async move { target::post(&client, &url, body, &[]).await }
    })
    .await;
    let heap = idem.heap_mib();
    drop((idem, upstream_process));
    Ok(Table {
        scenario: "events",
        rows: vec![intake],
        anchors: vec![claims],
        skipped: Vec::new(),
        idem_heap_mib: heap,
    })
}
