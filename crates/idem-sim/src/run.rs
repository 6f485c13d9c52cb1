//! One seed, one run: the seed draws the settings (nodes, lease, timeouts, how often the store loses
//! an answer), the faults (cuts between any two parties, pauses and crashes of nodes, clock steps,
//! a store down or stalled), and the load (gateway clients, operations workers that pause or die);
//! the run goes until every client has its answer (or gives up), on tokio's paused clock in one
//! thread, and the checker judges what happened.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::gateway::{InFlightPolicy, KeyPolicy, PathPattern};
use idem_gateway::RoutePolicy;
use tokio::time::Instant;

use crate::check::{self, Bounds, Verdict};
use crate::client::{self, Job, Order, Sim};
use crate::clock::{Kept, Machine};
use crate::history::History;
use crate::node::{Node, Setup};
use crate::rng::Rng;
use crate::store::Keys;
use crate::world::{self, Fault, Party, Window, World};

/// How a run is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub kept: Kept,
    pub trace: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self { kept: Kept::Database, trace: false }
    }
}

/// What a run came to.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub verdict: Verdict,
    /// The run's fingerprint: the same seed gives the same digest.
    pub digest: u64,
    pub stats: Stats,
    pub trace: Option<String>,
}

#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub simulated: Duration,
    pub attempts: usize,
    pub executions: usize,
    pub faults: Vec<&'static str>,
}

/// Faults happen in the first minute; clients send again once it is over.
const FAULTS_UNTIL: Duration = Duration::from_secs(60);

/// Runs `seed`.
pub fn run(seed: u64, options: Options) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(simulate(seed, options))
}

async fn simulate(seed: u64, options: Options) -> Outcome {
    client::new_run();
    let start = Instant::now();
    let mut rng = Rng::new(seed);
    // The steady clock is the embedded store's: one node.
    let nodes = if options.kept == Kept::Steady { 1 } else { 1 + rng.below(3) as usize };
    let (setup, bounds) = settings(&mut rng, options.kept);
    let faults = schedule(&mut rng, nodes);
    let names: Vec<&'static str> = faults.iter().map(kind).collect();
    let history = History { trace: options.trace.then(String::new), ..History::default() };
    let world = Arc::new(Mutex::new(World { start, rng, faults: faults.clone(), history }));
    let machines: Vec<Machine> = (0..nodes).map(|_| Machine::new(start)).collect();
    for f in &faults {
        if let Fault::Step { node, at, by_ms } = *f {
            let machine = machines[node].clone();
            tokio::spawn(async move {
                world::until(start, at).await;
                machine.step(by_ms);
            });
        }
    }
    let nodes = Arc::new(machines.into_iter().enumerate().map(|(i, m)| Node::new(i, m)).collect::<Vec<_>>());
    let sim = Sim { world: Arc::clone(&world), keys: Arc::new(Mutex::new(Keys::default())), nodes, setup };
    let (orders, jobs) = load(&mut world::lock(&world).rng, sim.nodes.len(), &sim.setup);
    let mut clients = tokio::task::JoinSet::new();
    for order in orders {
        clients.spawn(client::gateway_client(sim.clone(), order));
    }
    for job in jobs {
        clients.spawn(client::worker(sim.clone(), job));
    }
    while clients.join_next().await.is_some() {}
    let w = world::lock(&world);
    let verdict = check::check(&w, bounds);
    let stats = Stats {
        simulated: w.now(),
        attempts: w.history.attempts.len(),
        executions: w.history.executions.len(),
        faults: names,
    };
    Outcome { seed, verdict, digest: w.history.digest(), stats, trace: w.history.trace.clone() }
}

/// The settings of a run: the gateway's route, the store's call timeout, how often an answer is
/// lost; and the bounds the checker holds answers to.
fn settings(rng: &mut Rng, kept: Kept) -> (Setup, Bounds) {
    let lease = Duration::from_secs(rng.pick(&[2, 4, 6, 10, 30]));
    let mut route = RoutePolicy::new(PathPattern::parse("/orders").expect("a path")).with_lease(lease);
    route.key = KeyPolicy::Required;
    route.upstream_timeout = lease * (1 + rng.below(4) as u32) / 10;
    route.max_call = if rng.chance(50) { lease * 3 } else { Duration::from_secs(600) };
    if rng.chance(30) {
        route.in_flight = InFlightPolicy::Wait;
        route.wait_timeout = rng.millis(500, 5_000);
    }
    let call_timeout = Duration::from_secs(rng.pick(&[1, 2, 5]));
    let lose_answers = rng.pick(&[0, 0, 5, 20]);
    let wait = if route.in_flight == InFlightPolicy::Wait { route.wait_timeout } else { Duration::ZERO };
    let bounds = Bounds {
        gateway: route.upstream_timeout + wait + call_timeout * 4 + Duration::from_secs(2),
        api: call_timeout * 5 + Duration::from_secs(2),
        max_call: route.max_call,
    };
    (Setup { route, call_timeout, lose_answers, kept }, bounds)
}

fn kind(fault: &Fault) -> &'static str {
    match fault {
        Fault::Cut { a: Party::Node(_), b: Party::Store, .. } => "cut node-store",
        Fault::Cut { a: Party::Node(_), b: Party::Upstream, .. } => "cut node-upstream",
        Fault::Cut { .. } => "cut clients-node",
        Fault::Pause { .. } => "pause",
        Fault::Crash { .. } => "crash",
        Fault::Step { .. } => "clock step",
        Fault::StoreDown { .. } => "store down",
        Fault::StoreStall { .. } => "store stall",
    }
}

/// Up to four faults in the first minute.
fn schedule(rng: &mut Rng, nodes: usize) -> Vec<Fault> {
    let mut faults = Vec::new();
    for _ in 0..rng.below(5) {
        let node = rng.below(nodes as u64) as usize;
        let from = rng.millis(500, FAULTS_UNTIL.as_millis() as u64 - 20_000);
        let window = |rng: &mut Rng, lo, hi| Window { from, until: from + rng.millis(lo, hi) };
        faults.push(match rng.below(8) {
            0 => Fault::Cut { a: Party::Node(node), b: Party::Store, window: window(rng, 200, 15_000) },
            1 => Fault::Cut { a: Party::Node(node), b: Party::Upstream, window: window(rng, 200, 15_000) },
            2 => Fault::Cut { a: Party::Clients, b: Party::Node(node), window: window(rng, 200, 15_000) },
            3 => Fault::Pause { node, window: window(rng, 200, 15_000) },
            4 => Fault::Crash { node, window: window(rng, 100, 5_000) },
            5 => Fault::Step { node, at: from, by_ms: rng.pick(&[-90_000, -45_000, -5_000, 5_000, 45_000, 90_000]) },
            6 => Fault::StoreDown { window: window(rng, 200, 10_000) },
            _ => Fault::StoreStall { window: window(rng, 200, 8_000) },
        });
    }
    faults
}

/// The gateway clients and the operations workers of a run.
fn load(rng: &mut Rng, nodes: usize, setup: &Setup) -> (Vec<Order>, Vec<Job>) {
    let mut orders = Vec::new();
    for k in 0..1 + rng.below(8) {
        let key = format!("\"k{k}\"");
        for _ in 0..1 + rng.below(3) {
            let body = if rng.chance(10) { format!("{{\"other\":{k}}}") } else { format!("{{\"order\":{k}}}") };
            let at = rng.millis(0, 50_000);
            let resend_at = FAULTS_UNTIL + setup.route.lease + rng.millis(1_000, 10_000);
            orders.push(Order { logical: orders.len(), key: key.clone(), body, at, resend_at });
        }
    }
    let mut jobs = Vec::new();
    for k in 0..1 + rng.below(4) {
        for _ in 0..1 + rng.below(3) {
            let lease = Duration::from_secs(rng.pick(&[2, 6, 10]));
            let work = if rng.chance(30) { lease * 2 } else { rng.millis(10, 1_500) };
            let pause = rng.chance(15).then(|| (work / 2, rng.millis(100, 15_000)));
            let dies = rng.chance(10).then(|| work / 3);
            let (op, node) = (jobs.len(), rng.below(nodes as u64) as usize);
            jobs.push(Job { op, key: format!("op{k}"), node, at: rng.millis(0, 50_000), lease, work, pause, dies });
        }
    }
    (orders, jobs)
}
