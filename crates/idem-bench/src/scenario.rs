//! The scenarios. Each measures idem and the anchors that give its figures meaning, in one run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OnceCell};

use crate::load::{self, Measured, Plan};
use crate::table::Table;
use crate::target::{
    self, Backend, HttpConn, HttpConns, Idem, PgTable, Redis, RedisConn, Upstream, pg_error, unique_name,
};

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

/// A cheap, well-mixed pseudo-random number (splitmix64), for keys and picks.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A request of a measurement: its body, and the Idempotency-Key and `Authorization` to send with
/// it, if any.
pub struct Post {
    pub body: String,
    pub key: Option<String>,
    pub authorization: Option<Arc<str>>,
}

impl Post {
    pub fn body(body: String) -> Self {
        Self { body, key: None, authorization: None }
    }

    pub fn keyed(body: String, key: String) -> Self {
        Self { body, key: Some(key), authorization: None }
    }
}

/// Any 2xx answer will do.
pub fn any_answer(_: &[u8]) -> Result<(), String> {
    Ok(())
}

/// Measures POSTs to `base` + `path`, each loop on a connection of its own; `make(c, n)` builds
/// request `n` of connection `c`, and `check` judges each 2xx answer's body.
pub async fn measure_posts<M>(
    ctx: &Context,
    name: &str,
    per_op: u64,
    (base, path): (&str, &str),
    make: M,
    check: fn(&[u8]) -> Result<(), String>,
) -> Measured
where
    M: Fn(usize, u64) -> Post + Send + Sync + 'static,
{
    let (conns, path) = (HttpConns::new(base, ctx.plan.connections), Arc::new(path.to_owned()));
    load::run(name, per_op, ctx.plan, move |c, n| {
        let (conns, path, post) = (Arc::clone(&conns), Arc::clone(&path), make(c, n));
        async move {
            let mut headers: Vec<(&str, &str)> = post.key.iter().map(|k| ("idempotency-key", k.as_str())).collect();
            headers.extend(post.authorization.as_deref().map(|a| ("authorization", a)));
            check(&conns.post(c, &path, post.body, &headers).await?)
        }
    })
    .await
}

/// Single claims of unique keys (and with 10 % repeats), beside Redis and PostgreSQL.
pub async fn claims(ctx: &Context) -> Result<Table, String> {
    let idem = Idem::start(&ctx.backend, "").await?;
    let mut rows = Vec::new();
    for (name, repeat) in [("idem single claims", false), ("idem single claims, 10 % repeats", true)] {
        let run = unique("c");
        let make = move |c, n| {
            let n = if repeat && n % 10 == 0 && n > 10 { n - 10 } else { n };
            Post::body(format!("{{\"parts\":[\"{run}\",\"{c}\",\"{n}\"]}}"))
        };
        rows.push(measure_posts(ctx, name, 1, (&idem.url, "/v1/claims/bench"), make, any_answer).await);
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
    let sql = "INSERT INTO {table} (id) VALUES ($1) ON CONFLICT DO NOTHING";
    let table = PgTable::create(&ctx.database_url, ctx.plan.connections, "", sql).await?;
    let shared = Arc::clone(&table);
    let measured = load::run("postgres INSERT … ON CONFLICT DO NOTHING", 1, ctx.plan, move |c, n| {
        let table = Arc::clone(&shared);
        async move {
            let (client, statement) = &table.clients[c];
            // Keys spread over the whole index, as idem's SHA-256 ids are: sequential keys per
            // connection would make PostgreSQL's inserts cheaper than any user's.
            let key = format!("{:016x}", mix((c as u64) << 40 ^ n));
            client.execute(statement, &[&key]).await.map(drop).map_err(pg_error)
        }
    })
    .await;
    table.drop_table().await;
    Ok(measured)
}

/// PostgreSQL's own rate for batches: one prepared multi-row `INSERT … ON CONFLICT DO NOTHING` of
/// 500 keys (an array, unnested) per statement, in keys per second: the floor a batch claim on
/// PostgreSQL stands beside.
async fn postgres_batch_anchor(ctx: &Context) -> Result<Measured, String> {
    let sql = "INSERT INTO {table} (id) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING";
    let table = PgTable::create(&ctx.database_url, ctx.plan.connections, "", sql).await?;
    let shared = Arc::clone(&table);
    let name = "postgres INSERT … ON CONFLICT DO NOTHING, 500 keys per statement";
    let measured = load::run(name, 500, ctx.plan, move |c, n| {
        let table = Arc::clone(&shared);
        async move {
            let (client, statement) = &table.clients[c];
            let keys: Vec<String> =
                (0..500u64).map(|i| format!("{:016x}", mix((c as u64) << 40 ^ n << 9 ^ i))).collect();
            client.execute(statement, &[&keys]).await.map(drop).map_err(pg_error)
        }
    })
    .await;
    table.drop_table().await;
    Ok(measured)
}

/// The same multi-row insert into a table of idem's `claims` shape (crates/idem-postgres's schema:
/// its columns, its primary key and its two indexes), with the rows a batch of one-part keys
/// without expiry stores: a 32-byte id, the encoded parts, the creation time. What PostgreSQL
/// itself must do for idem's batch, beside which idem's own share shows (#44).
async fn postgres_batch_anchor_claims_shape(ctx: &Context) -> Result<Measured, String> {
    let columns = "(ns text NOT NULL, id bytea NOT NULL, parts bytea NOT NULL, data text, created_at bigint NOT NULL,
                    expires_at bigint, client_token bytea, PRIMARY KEY (ns, id))";
    let setup = "CREATE INDEX ON {table} (ns, parts) INCLUDE (expires_at);
                 CREATE INDEX ON {table} (expires_at) WHERE expires_at IS NOT NULL;";
    let sql = "INSERT INTO {table} (ns, id, parts, created_at)
               SELECT 'bench', a.id, a.parts, $3 FROM unnest($1::bytea[], $2::bytea[]) AS a(id, parts)
               ON CONFLICT DO NOTHING";
    let table = PgTable::create_as(&ctx.database_url, ctx.plan.connections, columns, setup, sql).await?;
    let shared = Arc::clone(&table);
    let name = "postgres INSERT … ON CONFLICT DO NOTHING, 500 keys per statement, claims' shape";
    let measured = load::run(name, 500, ctx.plan, move |c, n| {
        let table = Arc::clone(&shared);
        async move {
            let (client, statement) = &table.clients[c];
            let (mut ids, mut parts) = (Vec::with_capacity(500), Vec::with_capacity(500));
            for i in 0..500u64 {
                let seed = mix((c as u64) << 40 ^ n << 9 ^ i);
                let id: Vec<u8> = (0..4u64).flat_map(|k| mix(seed ^ k).to_le_bytes()).collect();
                ids.push(id);
                // A one-part key as idem encodes it (`Parts::encode`: each part, then a zero byte).
                let mut encoded = format!("b-{c}-{n}-{i}").into_bytes();
                encoded.push(0);
                parts.push(encoded);
            }
            let created_at = 1_800_000_000_000i64;
            client.execute(statement, &[&ids, &parts, &created_at]).await.map(drop).map_err(pg_error)
        }
    })
    .await;
    table.drop_table().await;
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
    let name = if per_op == 1 {
        "HTTP ceiling (axum \"ok\" server)".to_owned()
    } else {
        format!("HTTP ceiling (axum \"ok\" server), {per_op}-item bodies")
    };
    Ok(measure_posts(ctx, &name, per_op, (&server.url, "/ok"), move |c, n| Post::body(body(c, n)), any_answer).await)
}

/// 500-item batches, in keys per second, beside the same anchors.
pub async fn claims_batch(ctx: &Context) -> Result<Table, String> {
    let idem = Idem::start(&ctx.backend, "[limits]\nmax_body_bytes = 4194304\n").await?;
    let run = unique("b");
    let make = move |c, n| Post::body(batch_body(&run, c, n));
    let row =
        measure_posts(ctx, "idem 500-item batches", 500, (&idem.url, "/v1/claims/bench/batch"), make, any_answer).await;
    let memory = idem.memory();
    drop(idem);
    let (mut anchors, mut skipped) = claim_anchors(ctx).await;
    match postgres_batch_anchor(ctx).await {
        Ok(m) => anchors.push(m),
        Err(e) => skipped.push(format!("postgres multi-row INSERT … ON CONFLICT: {e}")),
    }
    match postgres_batch_anchor_claims_shape(ctx).await {
        Ok(m) => anchors.push(m),
        Err(e) => skipped.push(format!("postgres multi-row INSERT … ON CONFLICT, claims' shape: {e}")),
    }
    anchors.push(http_ceiling(ctx, 500, |c, n| batch_body("ceiling", c, n)).await?);
    Ok(Table::new("claims-batch", vec![row], anchors).skipped(skipped).memory(memory))
}

/// The gateway scenarios' route scope: one load generator, no callers to tell apart (the `jwt`
/// scenario measures what telling them apart costs).
const ONE_CALLER: &str = "scope = []\n";

/// The gateway's replay and first-execution paths, beside the upstream called directly.
pub async fn gateway(ctx: &Context) -> Result<Table, String> {
    let upstream_process = Upstream::start().await?;
    let upstream = upstream_process.url.clone();
    let gateway_port = target::free_port();
    let config = format!(
        "[gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\nupstream = \"{upstream}\"\n\n[[gateway.routes]]\npath = \"/orders\"\nmethods = [\"POST\"]\nkey = \"required\"\n{ONE_CALLER}"
    );
    let idem = Idem::start(&ctx.backend, &config).await?;
    let gateway = format!("http://127.0.0.1:{gateway_port}");
    let order = || "{\"item\":\"book\"}".to_owned();
    // Complete the keys that the replay run will cycle through.
    let mut setup = HttpConn::connect(&gateway).await?;
    for k in 0..1000 {
        setup.post("/orders", order(), &[("idempotency-key", &format!("\"replay-{k}\""))]).await?;
    }
    let replay = move |c: usize, n: u64| Post::keyed(order(), format!("\"replay-{}\"", (c as u64 * 7919 + n) % 1000));
    let run = unique("g");
    let first = move |c, n| Post::keyed(order(), format!("\"{run}-{c}-{n}\""));
    let rows = vec![
        measure_posts(ctx, "idem gateway replays", 1, (&gateway, "/orders"), replay, any_answer).await,
        measure_posts(ctx, "idem gateway first executions", 1, (&gateway, "/orders"), first, any_answer).await,
    ];
    let memory = idem.memory();
    drop(idem);
    let direct = measure_posts(
        ctx,
        "upstream called directly",
        1,
        (&upstream, "/orders"),
        move |_, _| Post::body(order()),
        any_answer,
    )
    .await;
    drop(upstream_process);
    Ok(Table::new("gateway", rows, vec![direct]).memory(memory))
}

/// Gateway first executions as a user feels them: at a quarter of what the upstream called
/// directly can answer (measured first, closed loop; the issue's moderate rate), and at a tenth of
/// it, open loop, the latency idem adds over the upstream called directly at the same rate.
pub async fn gateway_latency(ctx: &Context) -> Result<Table, String> {
    const FRACTIONS: [(f64, &str); 2] = [(4.0, "a quarter"), (10.0, "a tenth")];
    let upstream_process = Upstream::start().await?;
    let upstream = upstream_process.url.clone();
    let order = || "{\"item\":\"book\"}".to_owned();
    let direct = move |_, _| Post::body(order());
    let capacity = measure_posts(ctx, "upstream, closed loop", 1, (&upstream, "/orders"), direct, any_answer).await;
    let rates = FRACTIONS.map(|(f, words)| ((capacity.ops_per_sec / f).max(1.0).round(), words));
    let mut directs = Vec::new();
    for (rate, words) in rates {
        let name = format!("upstream called directly, {words} of its capacity");
        directs.push(at_rate(ctx, &name, rate, &upstream, |_, _| None).await);
    }
    let gateway_port = target::free_port();
    let config = format!(
        "[gateway]\nlisten = \"127.0.0.1:{gateway_port}\"\nupstream = \"{upstream}\"\n\n[[gateway.routes]]\npath = \"/orders\"\nmethods = [\"POST\"]\nkey = \"required\"\n{ONE_CALLER}"
    );
    let idem = Idem::start(&ctx.backend, &config).await?;
    let gateway = format!("http://127.0.0.1:{gateway_port}");
    let mut pairs = Vec::new();
    for ((rate, words), direct) in rates.into_iter().zip(directs) {
        let run = unique("gl");
        let key = move |c: usize, n: u64| Some(format!("\"{run}-{c}-{n}\""));
        let name = format!("idem gateway first executions, {words} of the upstream's capacity");
        pairs.push((at_rate(ctx, &name, rate, &gateway, key).await, direct));
    }
    let memory = idem.memory();
    drop((idem, upstream_process));
    let sync = tokio::task::spawn_blocking(|| target::fdatasync_latency(Duration::from_secs(2)))
        .await
        .map_err(|e| e.to_string())??;
    let mut table = Table::latency("gateway-latency", pairs).memory(memory);
    let [(quarter, _), (tenth, _)] = rates;
    table.notes.push(format!(
        "one 4 KiB write + fdatasync on this disk, after the run: p50 {:.2} ms, p99 {:.2} ms (a first \
         execution waits for two: its key taken, its answer stored)",
        sync.0, sync.1
    ));
    table.notes.push(format!(
        "the rates: {quarter:.0}/s and {tenth:.0}/s, of the upstream's closed-loop {:.0}/s",
        capacity.ops_per_sec
    ));
    Ok(table)
}

/// `POST /orders` to `base` at `rate` a second, open loop, with the key `key(c, n)` if any.
async fn at_rate<K>(ctx: &Context, name: &str, rate: f64, base: &str, key: K) -> Measured
where
    K: Fn(usize, u64) -> Option<String> + Send + Sync + 'static,
{
    let conns = HttpConns::new(base, ctx.plan.connections);
    load::run_at_rate(name, rate, ctx.plan, move |c, n| {
        let (conns, key) = (Arc::clone(&conns), key(c, n));
        async move {
            let headers: Vec<(&str, &str)> = key.iter().map(|k| ("idempotency-key", k.as_str())).collect();
            conns.post(c, "/orders", "{\"item\":\"book\"}".to_owned(), &headers).await.map(drop)
        }
    })
    .await
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
    let run = unique("ec");
    let claim = move |c, n| Post::body(format!("{{\"key\":\"{run}-{c}-{n}\"}}"));
    let claims =
        measure_posts(ctx, "idem single claims (same process)", 1, (&idem.url, "/v1/claims/bench"), claim, any_answer)
            .await;
    let started = Instant::now();
    let run = unique("e");
    let event = move |c, n| Post::body(format!("{{\"id\":\"{run}-{c}-{n}\",\"amount\":42}}"));
    let intake =
        measure_posts(ctx, "idem event intake (202)", 1, (&idem.url, "/v1/sources/bench/events"), event, any_answer)
            .await;
    let delivery = delivered(&target::http(), &idem, started).await?;
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
