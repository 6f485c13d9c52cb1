//! `expiry`: claims that expire while the sweeper and compaction run, with clients claiming
//! beside them — where the embedded engine once wedged (issue #22): compaction retired segments
//! that expired claims still pointed into, and from then on every sweep failed, with every client
//! command that shared its group.
//!
//! idem runs with the sweeper every second. Optionally `stored` claims that never expire are
//! loaded first; then `expiring` claims with `ttl_seconds: 1` and `data_bytes` of data each are
//! sent in batches of 200, while four connections keep claiming new keys (with a 5-second TTL, so
//! that they do not pile up); the data dir's size is
//! sampled until at least half of what it grew by beyond the claims that stay has come back (with
//! nothing stored first: back under half its peak), or two minutes pass. Any answer that is not
//! 2xx is counted as an error (and fails the run), and so is a data dir that has not come back so a
//! minute after the last expiring claim was sent. (Before the fix, this run answered hundreds of
//! 500s and the data dir never shrank.)

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::load::Measured;
use crate::scenario::Context;
use crate::table::Table;
use crate::target::{HttpConns, Idem, get_text, http, unique_name};

const BATCH: u64 = 200;
const CONFIG: &str = "[sweeper]\ninterval = \"1s\"\n[limits]\nmax_body_bytes = 16777216\n";

/// Bytes of files under `dir`, recursively.
fn size_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => size_of(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// How long the expiring claims take to send: a steady stream, so that claims expire all along
/// while the sweeper and compaction run (sent as fast as possible, they would all expire at once).
const SENDING: Duration = Duration::from_secs(20);

pub async fn expiry(ctx: &Context, stored: u64, expiring: u64, data_bytes: usize) -> Result<Table, String> {
    let idem = Idem::start(&ctx.backend, CONFIG).await?;
    let data_dir = idem.data_dir();
    if stored > 0 {
        crate::stored::load(&idem, &unique_name("forever"), 0, stored).await?;
    }
    // What the claims that stay take: the expiring ones' space must come back above it.
    let floor = size_of(&data_dir);
    let stop = Arc::new(AtomicBool::new(false));
    let side = tokio::spawn(claim_beside(idem.url.clone(), Arc::clone(&stop)));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = tokio::spawn(sample(data_dir.clone(), Arc::clone(&peak), Arc::clone(&stop)));
    let sent_at = Instant::now();
    let (sent, send_errors) = send_expiring(&idem.url, expiring, data_bytes).await;
    let sending = sent_at.elapsed();
    eprintln!("  sent {sent} expiring claims in {:.0} s; waiting for the data dir to shrink", sending.as_secs_f64());
    let finished = Instant::now();
    let mut under_half = None;
    while finished.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let size = size_of(&data_dir);
        let peak = peak.fetch_max(size, Ordering::Relaxed).max(size);
        if size.saturating_sub(floor) * 2 < peak.saturating_sub(floor) {
            under_half = Some(finished.elapsed());
            break;
        }
    }
    // The clients beside go on a few seconds more: sweeps and compaction keep running under them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let (side_ok, side_errors, side_seconds) = side.await.map_err(|e| e.to_string())?;
    let _ = sampler.await;
    let metrics = get_text(&http(), &format!("{}/metrics", idem.url)).await.unwrap_or_default();
    let (final_size, peak) = (size_of(&data_dir), peak.load(Ordering::Relaxed));
    let memory = idem.memory();
    drop(idem);

    let mut rows = vec![
        Measured {
            errors: send_errors,
            ..Measured::throughput("expiring claims sent (ttl 1 s)", sent as f64 / sending.as_secs_f64(), sent)
        },
        Measured {
            errors: side_errors,
            ..Measured::throughput("single claims beside them", side_ok as f64 / side_seconds.max(0.001), side_ok)
        },
    ];
    let mut notes = vec![
        format!(
            "{stored} claims stored without expiry, then {expiring} expiring claims of {data_bytes} bytes of data, 200 per batch"
        ),
        format!(
            "data dir: {:.0} MiB before the expiring claims, peak {:.0} MiB, {:.0} MiB at the end; sweeper deleted {}, store commit errors {}, command errors {}",
            floor as f64 / 1048576.0,
            peak as f64 / 1048576.0,
            final_size as f64 / 1048576.0,
            metric(&metrics, idem_metrics::store::SWEPT.name),
            metric(&metrics, idem_metrics::store::COMMIT_ERRORS.name),
            metric(&metrics, idem_metrics::store::COMMAND_ERRORS.name),
        ),
    ];
    match under_half {
        Some(after) if after <= Duration::from_secs(60) => notes.push(format!(
            "half the space the expiring claims took back {:.1} s after the last one was sent",
            after.as_secs_f64()
        )),
        _ => {
            notes.push("NOT half the space the expiring claims took back within a minute: the sweeper or compaction fell behind".into());
            rows[0].errors += 1;
        }
    }
    let mut table = Table::new("expiry", rows, Vec::new()).memory(memory);
    table.notes = notes;
    Ok(table)
}

/// A counter's value in Prometheus text, summed over its labels.
fn metric(metrics: &str, name: &str) -> u64 {
    let lines = metrics.lines().filter(|l| l.starts_with(name));
    lines.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).map(|v| v as u64).sum()
}

/// Keeps the data dir's largest size in `peak` until `stop`.
async fn sample(dir: std::path::PathBuf, peak: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        peak.fetch_max(size_of(&dir), Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends `expiring` claims in batches of `BATCH` on two connections; answers how many were sent
/// and how many calls failed.
async fn send_expiring(base: &str, expiring: u64, data_bytes: usize) -> (u64, u64) {
    let conns = HttpConns::new(base, 2);
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let run = unique_name("exp");
    let pad = "x".repeat(data_bytes);
    let batches = expiring.div_ceil(BATCH).max(1);
    let started = Instant::now();
    let senders: Vec<_> = (0..2)
        .map(|c| {
            let (conns, next, errors, run, pad) =
                (Arc::clone(&conns), Arc::clone(&next), Arc::clone(&errors), run.clone(), pad.clone());
            tokio::spawn(async move {
                loop {
                    let start = next.fetch_add(BATCH, Ordering::Relaxed);
                    if start >= expiring {
                        return;
                    }
                    let due = started + SENDING.mul_f64((start / BATCH) as f64 / batches as f64);
                    tokio::time::sleep_until(due.into()).await;
                    let items: Vec<String> = (start..(start + BATCH).min(expiring))
                        .map(|i| format!("{{\"key\":\"{run}-{i}\",\"ttl_seconds\":1,\"data\":{{\"pad\":\"{pad}\"}}}}"))
                        .collect();
                    let body = format!("{{\"items\":[{}]}}", items.join(","));
                    if let Err(e) = conns.post(c, "/v1/claims/expiring/batch", body, &[]).await
                        && errors.fetch_add(1, Ordering::Relaxed) < 3
                    {
                        eprintln!("  an expiring batch failed: {e}");
                    }
                }
            })
        })
        .collect();
    for sender in senders {
        let _ = sender.await;
    }
    (expiring, errors.load(Ordering::Relaxed))
}

/// Claims new keys on four connections until `stop`; answers claims made, failures, and seconds.
async fn claim_beside(base: String, stop: Arc<AtomicBool>) -> (u64, u64, f64) {
    let conns = HttpConns::new(&base, 4);
    let (ok, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let run = unique_name("side");
    let workers: Vec<_> = (0..4)
        .map(|c| {
            let (conns, ok, errors, stop, run) =
                (Arc::clone(&conns), Arc::clone(&ok), Arc::clone(&errors), Arc::clone(&stop), run.clone());
            tokio::spawn(async move {
                for n in 0u64.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    // Short-lived too, so that what they store does not pile up and hide whether
                    // the expiring claims' space came back.
                    let body = format!("{{\"key\":\"{run}-{c}-{n}\",\"ttl_seconds\":5}}");
                    match conns.post(c, "/v1/claims/beside", body, &[]).await {
                        Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("  a claim beside the expiring ones failed: {e}");
                            }
                            0
                        }
                    };
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.await;
    }
    (ok.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), started.elapsed().as_secs_f64())
}
