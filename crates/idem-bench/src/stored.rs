//! Scenarios over a stored population: `lookup` (500-key batch lookups among a million stored
//! claims) and `scale` (claims and lookups as the store grows to ten million).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::load::{self, Measured};
use crate::scenario::{Context, Post, any_answer, http_ceiling, measure_posts, mix};
use crate::table::{Ratio, Table};
use crate::target::{HttpConn, Idem, PgTable, Redis, RedisConn, pg_error, unique_name};

/// Keys per lookup call.
const LOOKUP: usize = 500;
/// Keys per call while loading: the batch API's maximum.
const LOAD_BATCH: u64 = 10_000;
/// idem accepts bodies this large in these scenarios (10,000-item batches).
const CONFIG: &str = "[limits]\nmax_body_bytes = 4194304\n";

/// The `i`-th stored key of a run.
fn key(run: &str, i: u64) -> String {
    format!("{run}-{i}")
}

/// `LOOKUP` stored keys, picked at random among the first `stored`, for request `n` of connection `c`.
fn picks(run: &str, stored: u64, c: usize, n: u64) -> Vec<String> {
    let seed = mix((c as u64) << 40 ^ n);
    (0..LOOKUP as u64).map(|i| key(run, mix(seed ^ i) % stored)).collect()
}

fn lookup_body(keys: &[String]) -> String {
    let items: Vec<String> = keys.iter().map(|k| format!("{{\"key\":\"{k}\"}}")).collect();
    format!("{{\"items\":[{}]}}", items.join(","))
}

/// Stores the keys `from..to` of `run` through the batch API, 10,000 per call, two calls at a time
/// (the writer is single, so more gain nothing), with a progress line.
pub async fn load(idem: &Idem, run: &str, from: u64, to: u64) -> Result<(), String> {
    let next = Arc::new(AtomicU64::new(from));
    let started = Instant::now();
    let loaders: Vec<_> = (0..2)
        .map(|_| {
            let (base, next, run) = (idem.url.clone(), Arc::clone(&next), run.to_owned());
            tokio::spawn(async move {
                let mut conn = HttpConn::connect(&base).await?;
                loop {
                    let start = next.fetch_add(LOAD_BATCH, Ordering::Relaxed);
                    if start >= to {
                        return Ok::<(), String>(());
                    }
                    let items: Vec<String> = (start..(start + LOAD_BATCH).min(to))
                        .map(|i| format!("{{\"key\":\"{}\"}}", key(&run, i)))
                        .collect();
                    let body = format!("{{\"items\":[{}]}}", items.join(","));
                    conn.post("/v1/claims/bench/batch", body, &[]).await.map_err(|e| format!("loading claims: {e}"))?;
                }
            })
        })
        .collect();
    let progress = tokio::spawn({
        let next = Arc::clone(&next);
        async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let done = next.load(Ordering::Relaxed).min(to) - from;
                eprint!(
                    "\r  storing claims: {:>6.2}M of {:.2}M, {:>7.0} claims/s ",
                    (from + done) as f64 / 1e6,
                    to as f64 / 1e6,
                    done as f64 / started.elapsed().as_secs_f64()
                );
            }
        }
    });
    let mut result = Ok(());
    for loader in loaders {
        match loader.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e),
            Err(e) => result = Err(e.to_string()),
        }
    }
    progress.abort();
    eprintln!("\r  stored {:.2}M claims in {:.0} s{:30}", to as f64 / 1e6, started.elapsed().as_secs_f64(), "");
    result
}

/// Measures 500-key lookups of keys among the first `stored` of `run`; a key not found is an error.
async fn measure_lookups(ctx: &Context, name: &str, idem: &Idem, run: &str, stored: u64) -> Measured {
    let run = run.to_owned();
    let make = move |c, n| Post::body(lookup_body(&picks(&run, stored, c, n)));
    measure_posts(ctx, name, LOOKUP as u64, (&idem.url, "/v1/claims/bench/lookup"), make, all_found).await
}

/// A lookup answer in which every key was found.
fn all_found(answer: &[u8]) -> Result<(), String> {
    match answer.windows(15).filter(|w| w == b"\"exists\":false").count() {
        0 => Ok(()),
        missing => Err(format!("{missing} stored keys not found")),
    }
}

/// Measures single claims of new unique keys.
async fn measure_claims(ctx: &Context, name: &str, idem: &Idem) -> Measured {
    let run = unique_name("new");
    let make = move |c, n| Post::body(format!("{{\"key\":\"{run}-{c}-{n}\"}}"));
    measure_posts(ctx, name, 1, (&idem.url, "/v1/claims/bench"), make, any_answer).await
}

/// Lets the checkpointer drain what loading left in the WAL, so that the measurement sees the
/// stored size rather than the load's tail.
async fn settle(ctx: &Context) {
    tokio::time::sleep(if ctx.quick { Duration::from_secs(2) } else { Duration::from_secs(10) }).await;
}

/// 500-key batch lookups among a million stored claims, beside PostgreSQL and Redis holding the
/// same million keys, and the HTTP ceiling for bodies of that size.
pub async fn lookup(ctx: &Context) -> Result<Table, String> {
    const STORED: u64 = 1_000_000;
    let idem = Idem::start(&ctx.backend, CONFIG).await?;
    let run = unique_name("l");
    load(&idem, &run, 0, STORED).await?;
    settle(ctx).await;
    let row = measure_lookups(ctx, "idem 500-key lookups, 1M stored", &idem, &run, STORED).await;
    let memory = idem.memory();
    drop(idem);
    let (mut anchors, mut skipped) = (Vec::new(), Vec::new());
    match postgres_lookups(ctx, STORED).await {
        Ok(m) => anchors.push(m),
        Err(e) => skipped.push(format!("postgres SELECT … = ANY: {e}")),
    }
    match redis_lookups(ctx, STORED).await {
        Ok(m) => anchors.push(m),
        Err(e) => skipped.push(format!("redis MGET: {e}")),
    }
    let ceiling_run = run.clone();
    anchors.push(http_ceiling(ctx, LOOKUP as u64, move |c, n| lookup_body(&picks(&ceiling_run, STORED, c, n))).await?);
    Ok(Table::new("lookup", vec![row], anchors).skipped(skipped).memory(memory))
}

/// `SELECT id, created_at … WHERE id = ANY($1)` of 500 keys among `stored` rows: the rows found
/// come back, as idem's records do.
async fn postgres_lookups(ctx: &Context, stored: u64) -> Result<Measured, String> {
    let run = "pg";
    let setup = format!("INSERT INTO {{table}} (id) SELECT '{run}-' || g FROM generate_series(0, {}) g;", stored - 1);
    let sql = "SELECT id, created_at FROM {table} WHERE id = ANY($1)";
    let table = PgTable::create(&ctx.database_url, ctx.plan.connections, &setup, sql).await?;
    if let Some((client, _)) = table.clients.first() {
        client.batch_execute(&format!("VACUUM ANALYZE {}", table.name)).await.map_err(pg_error)?;
    }
    let shared = Arc::clone(&table);
    let measured = load::run("postgres SELECT … WHERE id = ANY(500 keys)", LOOKUP as u64, ctx.plan, move |c, n| {
        let (table, keys) = (Arc::clone(&shared), picks(run, stored, c, n));
        async move {
            let (client, statement) = &table.clients[c];
            let found = client.query(statement, &[&keys]).await.map_err(pg_error)?.len();
            let distinct = keys.iter().collect::<std::collections::HashSet<_>>().len();
            if found == distinct { Ok(()) } else { Err(format!("found {found} of {distinct}")) }
        }
    })
    .await;
    table.drop_table().await;
    Ok(measured)
}

/// `MGET` of 500 keys among `stored`, on a private in-memory Redis.
async fn redis_lookups(ctx: &Context, stored: u64) -> Result<Measured, String> {
    let redis = Redis::start(false).await.ok_or("no redis-server here")?;
    let run = "redis";
    RedisConn::connect(redis.port).await?.mset((0..stored).map(|i| key(run, i))).await?;
    let mut conns = Vec::new();
    for _ in 0..ctx.plan.connections {
        conns.push(Mutex::new(RedisConn::connect(redis.port).await?));
    }
    let conns = Arc::new(conns);
    let measured = load::run("redis MGET (500 keys, in memory)", LOOKUP as u64, ctx.plan, move |c, n| {
        let (conns, keys) = (Arc::clone(&conns), picks(run, stored, c, n));
        async move {
            let found = conns[c].lock().await.mget(&keys).await?;
            if found == keys.len() { Ok(()) } else { Err(format!("found {found} of {}", keys.len())) }
        }
    })
    .await;
    drop(redis);
    Ok(measured)
}

/// Single claims and 500-key lookups at 0, 1 million and 10 million stored claims (or `stages`),
/// each stage compared with the first.
pub async fn scale(ctx: &Context, mut stages: Vec<u64>) -> Result<Table, String> {
    let mut skipped = Vec::new();
    if stages.is_empty() && ctx.quick {
        stages = vec![0, 1_000_000];
        skipped.push("the 10M stage is left out of --quick runs: storing ten million claims takes minutes".into());
    } else if stages.is_empty() {
        stages = vec![0, 1_000_000, 10_000_000];
    }
    let mut idem = Idem::start(&ctx.backend, CONFIG).await?;
    let base_heap = idem.heap_mib();
    let run = unique_name("s");
    let (mut rows, mut ratios, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    let (mut stored, mut first_claims, mut first_lookups) = (0u64, None::<usize>, None::<usize>);
    let mut claimed = 0u64;
    for stage in stages {
        if stage > stored {
            load(&idem, &run, stored, stage).await?;
            stored = stage;
            settle(ctx).await;
            if let (Some(base), Some(heap)) = (base_heap, idem.heap_mib()) {
                let claims = stored + claimed;
                let per_claim = (heap - base) * 1024.0 * 1024.0 / claims as f64;
                notes.push(format!(
                    "heap at {} stored claims: {heap:.0} MiB, {per_claim:.0} bytes per claim above the {base:.0} MiB at start",
                    millions(claims)
                ));
            }
        }
        let label = millions(stored);
        rows.push(measure_claims(ctx, &format!("idem single claims, {label} stored"), &idem).await);
        claimed += rows[rows.len() - 1].total;
        match first_claims {
            Some(i) => ratios.push(Ratio::of(&rows[rows.len() - 1], &rows[i])),
            None => first_claims = Some(rows.len() - 1),
        }
        if stored > 0 {
            rows.push(
                measure_lookups(ctx, &format!("idem 500-key lookups, {label} stored"), &idem, &run, stored).await,
            );
            match first_lookups {
                Some(i) => ratios.push(Ratio::of(&rows[rows.len() - 1], &rows[i])),
                None => first_lookups = Some(rows.len() - 1),
            }
        }
    }
    let memory = idem.memory();
    if stored > 0 {
        let took = idem.kill9_and_restart().await?;
        let mut conn = HttpConn::connect(&idem.url).await?;
        let answer = conn
            .post("/v1/claims/bench/lookup", lookup_body(&picks(&run, stored, 0, 0)), &[])
            .await
            .map_err(|e| format!("lookup after restart: {e}"))?;
        all_found(&answer).map_err(|e| format!("after kill -9 and restart: {e}"))?;
        notes.push(format!(
            "restart after kill -9 with {} stored claims: ready in {:.1} s; {LOOKUP} stored keys picked at random all found",
            millions(stored + claimed),
            took.as_secs_f64()
        ));
    }
    drop(idem);
    let mut table = Table::new("scale", rows, Vec::new()).memory(memory).skipped(skipped);
    table.ratios = ratios;
    table.notes = notes;
    Ok(table)
}

fn millions(n: u64) -> String {
    if n == 0 { "0".into() } else { format!("{}M", n as f64 / 1e6) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_are_stored_keys_and_differ_between_requests() {
        let a = picks("r", 1000, 3, 7);
        assert_eq!(a.len(), LOOKUP);
        assert!(a.iter().all(|k| k.strip_prefix("r-").and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n < 1000)));
        assert_ne!(a, picks("r", 1000, 3, 8));
        assert_ne!(a, picks("r", 1000, 4, 7));
        let distinct: std::collections::HashSet<_> = picks("r", 1_000_000, 0, 1).into_iter().collect();
        assert!(distinct.len() > 490, "picks spread over the stored keys");
    }

    #[test]
    fn lookup_bodies_are_json_items() {
        let body: serde_json::Value = serde_json::from_str(&lookup_body(&["a".into(), "b".into()])).unwrap();
        assert_eq!(body["items"][1]["key"], "b");
    }

    #[test]
    fn stage_labels() {
        assert_eq!(millions(0), "0");
        assert_eq!(millions(1_000_000), "1M");
        assert_eq!(millions(10_000_000), "10M");
        assert_eq!(millions(2_500_000), "2.5M");
    }
}
