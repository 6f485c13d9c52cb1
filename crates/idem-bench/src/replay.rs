//! Bulk replay of dead letters while events keep arriving: does a replay of thousands of receipts
//! hold up intake? Event intake is measured alone, then again while `POST /v1/receipts/replay`
//! replays every dead letter of another source (in steps of 500, one transaction each), and the
//! replay is timed alone and under that load. The dead letters die again (their handler refuses
//! connections), so each replay also costs a round of deliveries, as it would for a user whose
//! handler is still down.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::load::{Measured, Plan};
use crate::scenario::{Context, Post, any_answer, measure_posts};
use crate::table::Table;
use crate::target::{HttpConn, HttpConns, Idem, Upstream, unique_name};

const LOADERS: usize = 32;

pub async fn replay(ctx: &Context, dead: u64) -> Result<Table, String> {
    let upstream_process = Upstream::start().await?;
    let upstream = upstream_process.url.clone();
    let config = format!(
        "[[sources]]\nname = \"bench\"\nhandler_url = \"{upstream}/handle\"\nevent_id = \"/id\"\nconcurrency = 64\n\
         signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n\
         [[sources]]\nname = \"down\"\nhandler_url = \"http://127.0.0.1:9/refused\"\nevent_id = \"/id\"\n\
         max_attempts = 1\nconcurrency = 64\nsigning_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n"
    );
    let idem = Idem::start(&ctx.backend, &config).await?;
    eprintln!("  storing {dead} dead letters");
    store_dead(&idem.url, dead).await?;
    let mut control = HttpConn::connect(&idem.url).await?;
    wait_dead(&mut control, dead).await?;

    let run = unique_name("r").replace('_', "-");
    let event = move |c, n| Post::body(format!("{{\"id\":\"{run}-{c}-{n}\",\"amount\":42}}"));
    let alone =
        measure_posts(ctx, "idem event intake, alone", 1, (&idem.url, "/v1/sources/bench/events"), event, any_answer)
            .await;

    let started = Instant::now();
    replay_all(&mut control, dead).await?;
    let replay_alone = started.elapsed();
    wait_dead(&mut control, dead).await?;

    // Intake again, measured only while the replay runs: the window is the replay's own length
    // when alone, and the replay started as counting starts (under load it takes longer).
    let window = Plan {
        connections: ctx.plan.connections,
        warmup: Duration::from_millis(500),
        duration: replay_alone.max(Duration::from_millis(500)),
    };
    let during_ctx = Context {
        plan: window,
        database_url: ctx.database_url.clone(),
        backend: ctx.backend.clone(),
        quick: ctx.quick,
        claim_anchors: Default::default(),
    };
    let url = idem.url.clone();
    let replay_task = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut conn = HttpConn::connect(&url).await?;
        let started = Instant::now();
        replay_all(&mut conn, dead).await?;
        Ok::<_, String>(started.elapsed())
    });
    let run = unique_name("d").replace('_', "-");
    let event = move |c, n| Post::body(format!("{{\"id\":\"{run}-{c}-{n}\",\"amount\":42}}"));
    let during = measure_posts(
        &during_ctx,
        "idem event intake, during the bulk replay",
        1,
        (&idem.url, "/v1/sources/bench/events"),
        event,
        any_answer,
    )
    .await;
    let replay_loaded = replay_task.await.map_err(|e| e.to_string())??;
    let memory = idem.memory();
    let rate = |name: &str, took: Duration| Measured::throughput(name, dead as f64 / took.as_secs_f64(), dead);
    let mut table = Table::new(
        "replay",
        vec![
            during,
            rate("bulk replay alone, receipts/s", replay_alone),
            rate("bulk replay under intake, receipts/s", replay_loaded),
        ],
        vec![alone],
    )
    .memory(memory);
    table.ratios.retain(|r| r.row.starts_with("idem event intake"));
    let (a, d) = (&table.anchors[0], &table.rows[0]);
    table.notes.push(format!(
        "{dead} dead letters replayed in {:.2} s alone and {:.2} s under intake; intake measured over the {:.2} s from the replay's start \
         (which also holds the replayed receipts' new deliveries): p99 {:.2} ms alone, {:.2} ms during (p50 {:.2} → {:.2} ms)",
        replay_alone.as_secs_f64(),
        replay_loaded.as_secs_f64(),
        window.duration.as_secs_f64(),
        a.p99_ms,
        d.p99_ms,
        a.p50_ms,
        d.p50_ms
    ));
    drop((idem, upstream_process));
    Ok(table)
}

/// Sends `n` events to the source whose handler is down; each dies after its one attempt.
async fn store_dead(url: &str, n: u64) -> Result<(), String> {
    let conns = HttpConns::new(url, LOADERS);
    let run = Arc::new(unique_name("dead").replace('_', "-"));
    let tasks: Vec<_> = (0..LOADERS)
        .map(|c| {
            let (conns, run) = (Arc::clone(&conns), Arc::clone(&run));
            tokio::spawn(async move {
                let mut i = c as u64;
                while i < n {
                    let body = format!("{{\"id\":\"{run}-{i}\"}}");
                    conns.post(c, "/v1/sources/down/events", body, &[]).await?;
                    i += LOADERS as u64;
                }
                Ok::<_, String>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// Waits until `n` receipts of the source that is down are dead.
async fn wait_dead(conn: &mut HttpConn, n: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let answer = conn.post("/v1/receipts/replay", r#"{"source":"down","dry_run":true}"#.into(), &[]).await?;
        let matching = serde_json::from_slice::<serde_json::Value>(&answer).ok().and_then(|v| v["matching"].as_u64());
        eprint!("\r  dead letters: {} of {n} ", matching.unwrap_or(0));
        if matching == Some(n) {
            eprintln!();
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("only {matching:?} of {n} receipts went dead in 10 minutes"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn replay_all(conn: &mut HttpConn, n: u64) -> Result<(), String> {
    let answer = conn.post("/v1/receipts/replay", r#"{"source":"down"}"#.into(), &[]).await?;
    let queued = serde_json::from_slice::<serde_json::Value>(&answer).ok().and_then(|v| v["queued"].as_u64());
    if queued == Some(n) { Ok(()) } else { Err(format!("the bulk replay queued {queued:?}, not {n}")) }
}
