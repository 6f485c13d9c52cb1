//! The load generator: a closed loop of N connections, each sending its next request as soon as
//! the last one answered; a warm-up whose requests are not counted; latency recorded per
//! connection in an HDR histogram and merged at the end; a progress line every second.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// What one measurement found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measured {
    pub name: String,
    /// Operations per second (an operation may carry several keys: see `per_op`).
    pub ops_per_sec: f64,
    /// Items per operation (500 for 500-item batches); `ops_per_sec * per_op` is items/s.
    pub per_op: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
    pub total: u64,
}

impl Measured {
    /// A rate measured by counting, without per-operation latencies.
    pub fn throughput(name: &str, ops_per_sec: f64, total: u64) -> Self {
        Self {
            name: name.to_owned(),
            ops_per_sec,
            per_op: 1,
            p50_ms: f64::NAN,
            p90_ms: f64::NAN,
            p99_ms: f64::NAN,
            max_ms: f64::NAN,
            errors: 0,
            total,
        }
    }

    pub fn items_per_sec(&self) -> f64 {
        self.ops_per_sec * self.per_op as f64
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub connections: usize,
    pub warmup: Duration,
    pub duration: Duration,
}

/// Runs `op(connection, n)` in `plan.connections` loops; an `Err` counts as an error.
pub async fn run<F, Fut>(name: &str, per_op: u64, plan: Plan, op: F) -> Measured
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let op = Arc::new(op);
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..plan.connections)
        .map(|c| {
            let (op, counting, stop, done) =
                (Arc::clone(&op), Arc::clone(&counting), Arc::clone(&stop), Arc::clone(&done));
            tokio::spawn(async move {
                let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds");
                let (mut errors, mut first_error) = (0u64, None);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let started = Instant::now();
                    let counted = counting.load(Ordering::Relaxed);
                    let result = op(c, n).await;
                    if counted && counting.load(Ordering::Relaxed) {
                        let _ = hist.record(started.elapsed().as_micros().max(1) as u64);
                        done.fetch_add(1, Ordering::Relaxed);
                        if let Err(e) = result {
                            errors += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                }
                (hist, errors, first_error)
            })
        })
        .collect();
    tokio::time::sleep(plan.warmup).await;
    counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    while started.elapsed() < plan.duration {
        tokio::time::sleep(Duration::from_secs(1).min(plan.duration)).await;
        let secs = started.elapsed().as_secs_f64();
        eprint!("\r  {name}: {:>5.1}s  {:>10.0} ops/s ", secs, done.load(Ordering::Relaxed) as f64 / secs);
    }
    // Requests still in flight when the time is up are neither counted nor timed.
    counting.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!();
    let mut merged = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds");
    let mut errors = 0;
    for task in tasks {
        if let Ok((hist, e, first)) = task.await {
            let _ = merged.add(&hist);
            errors += e;
            if let Some(first) = first.filter(|_| e > 0) {
                eprintln!("  {name}: {e} errors on one connection, first: {first}");
            }
        }
    }
    let ms = |q: f64| merged.value_at_quantile(q) as f64 / 1000.0;
    Measured {
        name: name.to_owned(),
        ops_per_sec: merged.len() as f64 / elapsed,
        per_op,
        p50_ms: ms(0.5),
        p90_ms: ms(0.9),
        p99_ms: ms(0.99),
        max_ms: merged.max() as f64 / 1000.0,
        errors,
        total: merged.len(),
    }
}
