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

/// An open loop: `rate` requests a second whatever the answers do, on at most
/// `plan.connections` connections at once, for the latency a user feels at a moderate load
/// rather than the most a closed loop can push through. Each request is released when it is due
/// (the generator wakes every millisecond, the timer's grain, and releases everything due by
/// then) and its latency runs from its release, through waiting for a free connection, to its
/// answer: a slow answer that holds up later requests counts against them too (no coordinated
/// omission). `op(connection, n)` as in [`run`].
pub async fn run_at_rate<F, Fut>(name: &str, rate: f64, plan: Plan, op: F) -> Measured
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let (op, free) = (Arc::new(op), Arc::new(tokio::sync::Mutex::new((0..plan.connections).collect::<Vec<_>>())));
    let slots = Arc::new(tokio::sync::Semaphore::new(plan.connections));
    let tally = Arc::new(std::sync::Mutex::new(Tally::new()));
    let started = Instant::now();
    let (measure_from, end) = (started + plan.warmup, started + plan.warmup + plan.duration);
    let mut released = 0u64;
    let mut tasks = tokio::task::JoinSet::new();
    while Instant::now() < end {
        let due = (started.elapsed().as_secs_f64() * rate) as u64;
        for n in released..due {
            let (op, free, slots, tally) = (Arc::clone(&op), Arc::clone(&free), Arc::clone(&slots), Arc::clone(&tally));
            let (release, counted) = (Instant::now(), Instant::now() >= measure_from);
            tasks.spawn(async move {
                let _slot = slots.acquire().await.expect("the semaphore is never closed");
                let c = free.lock().await.pop().expect("a slot means a free connection");
                let result = op(c, n).await;
                free.lock().await.push(c);
                if counted && Instant::now() < end {
                    tally.lock().expect("no panics while holding the tally").record(release.elapsed(), result);
                }
            });
        }
        released = released.max(due);
        while tasks.try_join_next().is_some() {}
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    while tasks.join_next().await.is_some() {}
    let tally = std::mem::replace(&mut *tally.lock().expect("no panics while holding the tally"), Tally::new());
    tally.measured(name, plan.duration.as_secs_f64())
}

/// Latencies and errors of an open loop.
struct Tally {
    hist: Histogram<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    fn new() -> Self {
        let hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds");
        Self { hist, errors: 0, first_error: None }
    }

    fn record(&mut self, latency: Duration, result: Result<(), String>) {
        let _ = self.hist.record(latency.as_micros().max(1) as u64);
        if let Err(e) = result {
            self.errors += 1;
            self.first_error.get_or_insert(e);
        }
    }

    fn measured(self, name: &str, seconds: f64) -> Measured {
        if let Some(first) = &self.first_error {
            eprintln!("  {name}: {} errors, first: {first}", self.errors);
        }
        let ms = |q: f64| self.hist.value_at_quantile(q) as f64 / 1000.0;
        Measured {
            name: name.to_owned(),
            ops_per_sec: self.hist.len() as f64 / seconds,
            per_op: 1,
            p50_ms: ms(0.5),
            p90_ms: ms(0.9),
            p99_ms: ms(0.99),
            max_ms: self.hist.max() as f64 / 1000.0,
            errors: self.errors,
            total: self.hist.len(),
        }
    }
}
