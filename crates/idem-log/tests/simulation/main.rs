//! A deterministic simulation of the engine: the real `LogStore` on a simulated disk
//! ([`idem_log::sim::SimDisk`]) and a manual clock, driven by random workloads from a seed, checked
//! after every step against a plain in-memory model of what was acknowledged.
//!
//! Each seed runs a few hundred steps drawn from: claims (single and batches, with and without TTL,
//! small and multi-sector data), deletes, gateway-style leased keys (begin, complete, release,
//! extend, forget, leases running out), sweeps, compaction, moving the mark, `backup` (the copy is
//! opened and checked too), time jumping by milliseconds, hours or days, a full disk, failures of a
//! single write, sync, length change, create, rename, delete or directory sync, clean restarts,
//! and power cuts: between steps, in the middle of one (after any number of the disk operations
//! it makes), and in the middle of start-up itself. A power cut keeps any subset of what was not
//! synced, torn at sector size and out of order.
//!
//! After every recovery the store must hold exactly what the model says: every acknowledged
//! change, nothing expired or deleted brought back, and a step cut short by the crash either
//! wholly there or wholly absent; start-up must never refuse a state a crash can leave; `check`
//! must find no damage; the claim counts must be exact; and once swept and compacted, the log must
//! take under twice its live data (plus the segment being written).
//!
//! ```sh
//! cargo test -p idem-log --test simulation -- --nocapture          # the CI budget (IDEM_SIM_SECONDS, 45 s)
//! IDEM_SIM_SECONDS=3600 IDEM_SIM_FIRST_SEED=$RANDOM cargo test --release -p idem-log --test simulation -- --nocapture
//! IDEM_SIM_SEED=1234 IDEM_SIM_TRACE=1 cargo test -p idem-log --test simulation -- --nocapture   # replay one seed
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::request::{LeaseToken, RequestState};
use idem_core::{ClaimId, ClaimStore, Clock, ManualClock, RequestStore, StoreLifecycle};
use idem_log::sim::{FaultOp, Rng, SimDisk};
use idem_log::{LogOptions, LogStore, counts_at};

mod model;

use model::*;

const DIR: &str = "/data/log";
/// Small segments, so that rolling, sealing and compaction happen every few dozen steps.
const SEGMENT: u64 = 6 * 1024;
const STEPS: usize = 300;

#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    steps: u64,
    crashes: u64,
    crashes_mid_step: u64,
    crashes_in_start_up: u64,
    restarts: u64,
    faults: u64,
    compactions: u64,
    backups: u64,
    simulated_ms: i64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.steps += o.steps;
        self.crashes += o.crashes;
        self.crashes_mid_step += o.crashes_mid_step;
        self.crashes_in_start_up += o.crashes_in_start_up;
        self.restarts += o.restarts;
        self.faults += o.faults;
        self.compactions += o.compactions;
        self.backups += o.backups;
        self.simulated_ms += o.simulated_ms;
    }
}

macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(format!($($why)+));
        }
    };
}

struct Sim {
    rng: Rng,
    disk: SimDisk,
    clock: Arc<ManualClock>,
    store: Option<LogStore>,
    model: Model,
    /// A step a crash cut short: (the model before it, the model had it happened).
    pending: Option<(Op, Model, Model)>,
    stats: Stats,
    trace: bool,
    backups: usize,
    /// The greatest fencing number a begin got so far.
    max_fence: u64,
}

fn options(disk: &SimDisk) -> LogOptions {
    LogOptions {
        segment_bytes: SEGMENT,
        max_group_items: 20_000,
        compact_every: Duration::from_secs(86_400 * 365),
        mark_every: None,
        preallocate: 2048,
        disk: Arc::new(disk.clone()),
    }
}

impl Sim {
    fn now(&self) -> i64 {
        self.clock.now().millis()
    }

    fn store(&self) -> Result<&LogStore, String> {
        self.store.as_ref().ok_or_else(|| "no store open".to_owned())
    }

    fn say(&self, what: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("[{:>4}] {}", self.stats.steps, compact(&what()));
        }
    }

    fn open(&mut self) -> Result<(), String> {
        for attempt in 0..8 {
            // Now and then the power goes during start-up itself.
            let dies = attempt < 6 && self.rng.chance(8);
            if dies {
                self.disk.die_after(self.rng.below(12));
            }
            match LogStore::open(Path::new(DIR), self.clock.clone(), options(&self.disk)) {
                Ok(store) if !self.disk.is_dead() => {
                    self.disk.call_off_power_cut();
                    self.store = Some(store);
                    return Ok(());
                }
                Ok(store) => drop(store),
                Err(e) if !self.disk.is_dead() => return Err(format!("start-up refused a state a crash left: {e}")),
                Err(_) => {}
            }
            self.stats.crashes_in_start_up += 1;
            self.disk = self.disk.crash(self.rng.next_u64());
        }
        Err("start-up never completed".into())
    }

    /// The power goes now; the process dies with it.
    async fn crash(&mut self) -> Result<(), String> {
        self.stats.crashes += 1;
        let next = self.disk.crash(self.rng.next_u64());
        self.say(|| "power cut".into());
        // The old process is gone: its store is dropped without closing, on the old disk.
        drop(self.store.take());
        self.disk = next;
        self.open()?;
        self.resolve_pending().await?;
        self.check_all().await
    }

    async fn restart(&mut self) -> Result<(), String> {
        self.stats.restarts += 1;
        if let Some(store) = self.store.take() {
            store.close().await;
        }
        self.open()?;
        self.check_all().await
    }

    /// A step cut short by a crash happened wholly or not at all: which, the store says.
    async fn resolve_pending(&mut self) -> Result<(), String> {
        let Some((op, before, after)) = self.pending.take() else { return Ok(()) };
        let now = self.now();
        let is_before = self.matches(&op, &before, now).await?;
        let is_after = self.matches(&op, &after, now).await?;
        ensure!(is_before || is_after, "a step cut short by a crash is half there: {op:?}");
        self.model = if is_after { after } else { before };
        self.say(|| format!("cut-short step {}", if is_after { "happened" } else { "did not happen" }));
        Ok(())
    }

    /// Do the keys `op` touches read as `model` says?
    async fn matches(&self, op: &Op, model: &Model, now: i64) -> Result<bool, String> {
        for key in op.claim_keys() {
            if self.read_claim(&key).await? != model.claim(&key, now).cloned() {
                return Ok(false);
            }
        }
        if let Some(key) = op.request_key() {
            return Ok(self.read_request(key).await? == view(model.request(key, now)));
        }
        Ok(true)
    }

    async fn read_claim(&self, key: &Key) -> Result<Option<MClaim>, String> {
        let found = self.store()?.get(&namespace(&key.0), &parts_of(&key.1).id()).await.map_err(|e| e.to_string())?;
        Ok(found.map(|r| MClaim {
            data: r.data.map(|d| d.get().to_owned()),
            created_at: r.created_at.millis(),
            expires_at: r.expires_at.map_or(NEVER, |t| t.millis()),
            client: None,
        }))
    }

    async fn read_request(&self, key: &str) -> Result<Option<ReqView>, String> {
        let state = self.store()?.peek_request(&request_id(key)).await.map_err(|e| e.to_string())?;
        Ok(state.map(|s| match s {
            RequestState::Held { fingerprint, lease_until, held } => {
                ReqView { completed: false, until: lease_until.millis(), fingerprint, body: held }
            }
            RequestState::Completed { fingerprint, result, expires_at } => {
                ReqView { completed: true, until: expires_at.millis(), fingerprint, body: result }
            }
        }))
    }

    /// The whole store against the model.
    async fn check_all(&mut self) -> Result<(), String> {
        let now = self.now();
        let store = self.store()?;
        for ns in NAMESPACES {
            let keys: Vec<Vec<String>> = all_keys();
            let ids: Vec<ClaimId> = keys.iter().map(|k| parts_of(k).id()).collect();
            let found = store.lookup(&namespace(ns), &ids).await.map_err(|e| e.to_string())?;
            for (parts, found) in keys.iter().zip(found) {
                let key = (ns.to_owned(), parts.clone());
                let want = self.model.claim(&key, now);
                let got = found.map(|r| MClaim {
                    data: r.data.map(|d| d.get().to_owned()),
                    created_at: r.created_at.millis(),
                    expires_at: r.expires_at.map_or(NEVER, |t| t.millis()),
                    client: None,
                });
                ensure!(got.as_ref() == want, "claim {key:?}: the store has {got:?}, the model {want:?}");
            }
            for p in 0..PREFIXES {
                let prefix = vec![format!("p{p}")];
                let want =
                    self.model.claims.iter().any(|((n, k), c)| n == ns && k.starts_with(&prefix) && c.expires_at > now);
                let got = store.prefix_exists(&namespace(ns), &parts_of(&prefix)).await.map_err(|e| e.to_string())?;
                ensure!(got == want, "prefix {ns}/{prefix:?}: the store says {got}, the model {want}");
            }
        }
        for r in 0..REQUESTS {
            let key = format!("r{r}");
            let got = self.read_request(&key).await?;
            let want = view(self.model.request(&key, now));
            ensure!(got == want, "key {key}: the store has {got:?}, the model {want:?}");
        }
        // Exact, but for claims that expired within the current second (counted until the sweeper
        // or a restart drops them, or the second ends).
        let counts: BTreeMap<String, u64> =
            store.count_claims().await.map_err(|e| e.to_string())?.into_iter().collect();
        for ns in NAMESPACES {
            let of_ns = self.model.claims.iter().filter(|((n, _), _)| n == ns);
            let live = of_ns.clone().filter(|(_, c)| c.expires_at > now).count() as u64;
            let at_most = of_ns.filter(|(_, c)| counts_at(c.expires_at, now)).count() as u64;
            let got = counts.get(ns).copied().unwrap_or(0);
            ensure!(
                (live..=at_most).contains(&got),
                "claims counted in {ns}: {got}; the model has {live} live ({at_most} within the second)"
            );
        }
        let report = idem_log::check(&self.disk, Path::new(DIR)).map_err(|e| e.to_string())?;
        ensure!(report.damage.is_empty(), "check found damage in a running log: {:?}", report.damage);
        Ok(())
    }

    /// Sweeps everything expired, compacts, and checks the log is under twice its live data.
    async fn settle(&mut self) -> Result<(), String> {
        let store = self.store()?;
        let e = |e: idem_core::StoreError| e.to_string();
        while store.sweep_expired(1000).await.map_err(e)? == 1000 {}
        while store.sweep_requests(1000).await.map_err(e)? == 1000 {}
        let mut compacted = 0;
        for _ in 0..3 {
            compacted += store.compact_now().await.map_err(e)? as u64;
        }
        self.stats.compactions += compacted;
        let report = idem_log::check(&self.disk, Path::new(DIR)).map_err(|e| e.to_string())?;
        let live = self.live_bytes();
        let bound = 2 * live + 3 * SEGMENT;
        ensure!(report.bytes <= bound, "the log takes {} bytes for {live} live (bound {bound})", report.bytes);
        Ok(())
    }

    /// The bytes the model's live records take in the log's format.
    fn live_bytes(&self) -> u64 {
        let now = self.now();
        let claims: u64 = self
            .model
            .claims
            .iter()
            .filter(|(_, c)| c.expires_at > now)
            .map(|((ns, parts), c)| {
                let encoded: usize = parts.iter().map(|p| p.len() + 1).sum();
                (8 + 1 + 4 + ns.len() + 32 + 4 + encoded + 1 + c.data.as_ref().map_or(0, |d| 4 + d.len()) + 16) as u64
            })
            .sum();
        let requests: u64 = self
            .model
            .requests
            .values()
            .filter(|r| idem_core::request::kept_until(r.completed, r.until) > now)
            .map(|r| (8 + 1 + 32 + 32 + 1 + 16 + 8 + 4 + r.body.len()) as u64)
            .sum();
        claims + requests
    }

    async fn backup(&mut self) -> Result<(), String> {
        self.backups += 1;
        let to = PathBuf::from(format!("/backup/{}", self.backups));
        let copied = idem_log::backup(&self.disk, Path::new(DIR), &to);
        let Ok(copied) = copied else {
            // Only a failure the simulation caused may fail a backup.
            return if self.disk.is_dead() { Ok(()) } else { Err(format!("backup failed: {copied:?}")) };
        };
        self.stats.backups += 1;
        self.say(|| format!("backup of {} records", copied.records));
        let copy = LogStore::open(&to, self.clock.clone(), options(&self.disk))
            .map_err(|e| format!("a backup does not open: {e}"))?;
        let now = self.now();
        for (key, want) in self.model.claims.iter().filter(|(_, c)| c.expires_at > now) {
            let got = copy.get(&namespace(&key.0), &parts_of(&key.1).id()).await.map_err(|e| e.to_string())?;
            ensure!(got.is_some_and(|r| r.created_at.millis() == want.created_at), "the backup lacks {key:?}");
        }
        for (key, want) in self.model.requests.iter().filter(|(_, r)| r.until > now) {
            let got = copy.peek_request(&request_id(key)).await.map_err(|e| e.to_string())?;
            ensure!(got.is_some() && want.until > now, "the backup lacks key {key}");
        }
        copy.close().await;
        Ok(())
    }

    fn random_op(&mut self) -> Op {
        let now = self.now();
        let rng = &mut self.rng;
        let pick = rng.below(100);
        if pick < 36 {
            let ns = NAMESPACES[rng.below(2) as usize].to_owned();
            let n = if rng.chance(60) { 1 } else { 1 + rng.below(12) as usize };
            let items = (0..n)
                .map(|_| {
                    let keys = all_keys();
                    let parts = keys[rng.below(keys.len() as u64) as usize].clone();
                    let data = match rng.below(10) {
                        0..=2 => None,
                        3..=8 => Some(format!("\"{}\"", "d".repeat(rng.below(200) as usize))),
                        _ => Some(format!("{{\"big\":\"{}\"}}", "b".repeat(1000 + rng.below(2500) as usize))),
                    };
                    let ttl = match rng.below(10) {
                        0..=3 => None,
                        4..=7 => Some(Duration::from_millis(200 + rng.below(5000))),
                        _ => Some(Duration::from_secs(3600 + rng.below(3 * 86_400))),
                    };
                    // A few client tokens, so that some claims meet the caller that made them.
                    let client = rng.chance(40).then(|| format!("c{}", rng.below(3)));
                    (parts, data, ttl, client)
                })
                .collect();
            return Op::Claim { ns, items };
        }
        if pick < 46 {
            let keys = all_keys();
            let key =
                (NAMESPACES[rng.below(2) as usize].to_owned(), keys[rng.below(keys.len() as u64) as usize].clone());
            let at = now - 1000 + rng.below(8000) as i64;
            let live_data = self.model.claim(&key, now).map(|c| c.data.clone());
            let when = match rng.below(8) {
                0 | 1 => When::Always,
                2 => When::Live,
                3 => When::Expiring,
                4 => When::Lasting,
                5 => When::ExpiresBefore(at),
                6 => When::ExpiresAfter(at),
                // The data it has (Laravel's lock release), or other data.
                _ => When::DataIs(live_data.filter(|_| rng.chance(70)).unwrap_or(Some("\"other\"".into()))),
            };
            let data = match rng.below(3) {
                0 => None,
                1 => Some(None),
                _ => Some(Some(format!("\"u{}\"", "u".repeat(rng.below(300) as usize)))),
            };
            let expires = match rng.below(4) {
                0 => None,
                1 => Some(None),
                _ => Some(Some(at)),
            };
            let put = (!rng.chance(15)).then_some((data, expires));
            return Op::Update { key, when, put };
        }
        if pick < 50 {
            let keys = all_keys();
            let ns = NAMESPACES[rng.below(2) as usize].to_owned();
            return Op::Delete { key: (ns, keys[rng.below(keys.len() as u64) as usize].clone()) };
        }
        let key = format!("r{}", rng.below(REQUESTS));
        // A lease that ran out is still its holder's to complete, extend or release until a begin
        // takes the key: its token is tried too.
        let held = self.model.kept(&key, now).filter(|r| !r.completed).and_then(|r| r.token);
        let token = match held {
            Some(t) if rng.chance(85) => t,
            _ => LeaseToken([rng.below(255) as u8; 16]),
        };
        match pick {
            50..=71 => Op::Begin {
                key,
                lease: Duration::from_millis(300 + rng.below(10_000)),
                fingerprint: [1 + rng.below(2) as u8; 32],
                held: vec![b'h'; rng.below(300) as usize],
                client: rng.chance(40).then(|| format!("b{}", rng.below(3))),
            },
            72..=85 => {
                let (big, long) = (rng.chance(10), rng.chance(20));
                Op::Complete {
                    key,
                    token,
                    result: vec![b'r'; rng.below(if big { 3000 } else { 200 }) as usize],
                    ttl: Duration::from_millis(500 + rng.below(if long { 86_400_000 } else { 20_000 })),
                }
            }
            86..=90 => Op::Release { key, token },
            91..=95 => Op::Extend { key, token, lease: Duration::from_millis(300 + rng.below(10_000)) },
            _ => Op::Forget { key },
        }
    }

    /// One changing step: run, compare with the model, and keep what was acknowledged.
    /// `risky`: a fault or a power cut is armed, so the step may fail.
    async fn step_op(&mut self, op: Op, risky: bool) -> Result<(), String> {
        let now = self.now();
        let (want, after) = expect(&self.model, &op, now);
        let got = run(self.store()?, &op).await;
        self.say(|| format!("{op:?} -> {got:?}"));
        match got {
            Ok((answer, lease)) => {
                ensure!(answer == want, "{op:?} answered {answer:?}; the model says {want:?}");
                if let (Some((token, fence)), Op::Begin { key, .. }) = (lease, &op) {
                    self.check_lease(key, token, fence, now)?;
                }
                self.model = after;
                if let (Some((token, fence)), Op::Begin { key, .. }) = (lease, &op)
                    && let Some(r) = self.model.requests.get_mut(key)
                {
                    r.token = Some(token);
                    r.fence = Some(fence);
                }
            }
            Err(why) if self.disk.is_dead() => {
                self.say(|| format!("cut short: {why}"));
                self.pending = Some((op, self.model.clone(), after));
            }
            Err(why) => {
                ensure!(risky, "{op:?} failed with no fault injected: {why}");
                // A failed step changed nothing, now or after any crash: the model stays.
            }
        }
        Ok(())
    }

    /// A begin's lease: a retry's (the key held by the same client token) is the one it got before;
    /// a new one's fence is greater than every fence handed out before, across crashes too.
    fn check_lease(&mut self, key: &str, token: LeaseToken, fence: u64, now: i64) -> Result<(), String> {
        match self.model.request(key, now).filter(|r| !r.completed) {
            Some(r) => {
                ensure!(r.token.is_none_or(|t| t == token), "{key}: a retry got another lease token");
                ensure!(r.fence.is_none_or(|f| f == fence), "{key}: a retry got fence {fence}, not {:?}", r.fence);
            }
            None => {
                ensure!(fence > self.max_fence, "{key}: fence {fence} is not above {}", self.max_fence);
                self.max_fence = fence;
            }
        }
        Ok(())
    }

    /// A compaction, a mark or a changing step, with a fault or a power cut armed (it may fail).
    async fn risky_step(&mut self) -> Result<(), String> {
        match self.rng.below(4) {
            0 => drop(self.store()?.compact_now().await),
            1 => drop(self.store()?.mark().await),
            _ => {
                let op = self.random_op();
                self.step_op(op, true).await?;
            }
        }
        Ok(())
    }

    async fn step(&mut self) -> Result<(), String> {
        self.stats.steps += 1;
        let pick = self.rng.below(1000);
        let e = |e: idem_core::StoreError| e.to_string();
        match pick {
            0..=599 => {
                let op = self.random_op();
                self.step_op(op, false).await?;
            }
            600..=679 => {
                let d = match self.rng.below(10) {
                    0..=5 => self.rng.below(1500) as i64,
                    6..=8 => self.rng.below(20_000) as i64,
                    _ => 3_600_000 + self.rng.below(4 * 86_400_000) as i64,
                };
                self.clock.advance(Duration::from_millis(d as u64));
                self.stats.simulated_ms += d;
            }
            680..=719 => {
                let limit = 1 + self.rng.below(50) as usize;
                self.store()?.sweep_expired(limit).await.map_err(e)?;
                self.store()?.sweep_requests(limit).await.map_err(e)?;
            }
            720..=749 => self.stats.compactions += self.store()?.compact_now().await.map_err(e)? as u64,
            750..=769 => self.store()?.mark().await.map_err(e)?,
            770..=789 => self.check_all().await?,
            790..=799 => self.settle().await?,
            800..=807 => self.backup().await?,
            808..=829 => self.restart().await?,
            830..=869 => self.crash().await?,
            870..=919 => {
                // The power goes in the middle of a step, after any of its disk operations.
                self.stats.crashes_mid_step += 1;
                self.disk.die_after(self.rng.below(8));
                self.risky_step().await?;
                self.crash().await?;
            }
            920..=979 => {
                self.stats.faults += 1;
                let fault = FAULTS[self.rng.below(FAULTS.len() as u64) as usize];
                self.disk.fail_next(fault);
                self.risky_step().await?;
                self.disk.clear_faults();
                self.say(|| format!("after a {fault:?} fault"));
            }
            _ => {
                // The disk fills up for a few steps.
                let room = self.disk.used() + self.rng.below(3 * SEGMENT);
                self.disk.set_capacity(Some(room));
                for _ in 0..self.rng.below(6) {
                    let op = self.random_op();
                    self.step_op(op, true).await?;
                }
                self.disk.set_capacity(None);
                self.check_all().await?;
            }
        }
        Ok(())
    }
}

/// A leased key as a read shows it.
const NAMESPACES: [&str; 2] = ["a", "b"];
const PREFIXES: usize = 4;
const REQUESTS: u64 = 24;
const FAULTS: [FaultOp; 7] = [
    FaultOp::Write,
    FaultOp::Sync,
    FaultOp::SetLen,
    FaultOp::Create,
    FaultOp::Rename,
    FaultOp::Remove,
    FaultOp::SyncDir,
];

/// The claim keys the simulation uses: single parts, and two-part keys under a few prefixes.
fn all_keys() -> Vec<Vec<String>> {
    let mut keys: Vec<Vec<String>> = (0..30).map(|i| vec![format!("k{i}")]).collect();
    for p in 0..PREFIXES {
        for q in 0..6 {
            keys.push(vec![format!("p{p}"), format!("q{q}")]);
        }
    }
    keys
}

async fn simulate(seed: u64, trace: bool) -> Result<Stats, (usize, String)> {
    let disk = SimDisk::new(seed);
    let mut sim = Sim {
        rng: Rng::new(seed),
        disk,
        clock: Arc::new(ManualClock::new(idem_conformance::START)),
        store: None,
        model: Model::default(),
        pending: None,
        stats: Stats::default(),
        trace,
        backups: 0,
        max_fence: 0,
    };
    sim.open().map_err(|e| (0, e))?;
    for step in 0..STEPS {
        sim.step().await.map_err(|e| (step, e))?;
    }
    sim.settle().await.map_err(|e| (STEPS, e))?;
    sim.restart().await.map_err(|e| (STEPS, e))?;
    if let Some(store) = sim.store.take() {
        store.close().await;
    }
    Ok(sim.stats)
}

/// A failure's text, with long runs (payloads of one repeated byte) written as `d×120`.
fn compact(text: &str) -> String {
    let tokens: Vec<&str> = text.split(", ").collect();
    let mut joined: Vec<String> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let run = tokens[i..].iter().take_while(|t| **t == tokens[i]).count();
        joined.push(if run > 3 { format!("{}×{run}", tokens[i]) } else { tokens[i..i + run].join(", ") });
        i += run;
    }
    let text = joined.join(", ");
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let run = chars[i..].iter().take_while(|c| **c == chars[i]).count();
        if run > 8 {
            out.push_str(&format!("{}×{run}", chars[i]));
        } else {
            out.extend(&chars[i..i + run]);
        }
        i += run;
    }
    out
}

fn run_seed(seed: u64, trace: bool) -> Result<Stats, String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(simulate(seed, trace))));
    match outcome {
        Ok(Ok(stats)) => Ok(stats),
        Ok(Err((step, why))) => Err(format!("seed {seed} failed at step {step}: {}", compact(&why))),
        Err(_) => Err(format!("seed {seed} panicked")),
    }
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn simulation() {
    let trace = std::env::var("IDEM_SIM_TRACE").is_ok();
    if let Some(seed) = env::<u64>("IDEM_SIM_SEED") {
        match run_seed(seed, trace) {
            Ok(stats) => eprintln!("seed {seed} passed: {stats:?}"),
            Err(why) => panic!("{why}"),
        }
        return;
    }
    let budget = Duration::from_secs(env("IDEM_SIM_SECONDS").unwrap_or(45));
    let first: u64 = env("IDEM_SIM_FIRST_SEED").unwrap_or(0);
    let started = Instant::now();
    let mut total = Stats::default();
    let mut seeds = 0;
    while started.elapsed() < budget {
        let seed = first + seeds;
        match run_seed(seed, trace) {
            Ok(stats) => total.add(&stats),
            Err(why) => panic!(
                "{why}\nreplay it: IDEM_SIM_SEED={seed} IDEM_SIM_TRACE=1 cargo test -p idem-log --test simulation -- --nocapture"
            ),
        }
        seeds += 1;
    }
    eprintln!(
        "simulation: {seeds} seeds from {first} in {:.0} s: {} steps, {} power cuts ({} in the middle of a step, {} during start-up), \
         {} clean restarts, {} injected faults, {} compactions, {} backups, {:.1} simulated days",
        started.elapsed().as_secs_f64(),
        total.steps,
        total.crashes + total.crashes_in_start_up,
        total.crashes_mid_step,
        total.crashes_in_start_up,
        total.restarts,
        total.faults,
        total.compactions,
        total.backups,
        total.simulated_ms as f64 / 86_400_000.0
    );
}
