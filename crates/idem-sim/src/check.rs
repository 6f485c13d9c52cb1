//! The checker of contract §10 over one run's [`History`]. Each is a violation:
//!
//! - **a key executed twice** outside the documented case. A second execution under a new lease is
//!   the documented case only when the first's holder could not keep its lease: the lease the
//!   takeover ended (as last extended) was, for the whole stretch in which its holder must extend it
//!   — the last half of a first lease, the last two thirds of an extended one — in the hands of a
//!   holder that was dead, paused, or cut off from the store (or a store down or stalled), with no
//!   healthy moment of [`HEALTHY`] in it; or the first call was abandoned at `max_call`; or the
//!   worker died. A lease released after its execution, and one lease executed twice, never are;
//! - **an answer lost**: a gateway key's answers (`2xx`, and the stored `502` that says the outcome
//!   is unknown) differ, but after a documented double; or an answered request not answered again
//!   when sent once more after the faults;
//! - **started after completed**: a key taken again after it was completed;
//! - **fences not growing**: a take whose fence is not above every earlier one of its key;
//! - **a `500`**, and **an answer out of bounds**: an attempt to a node that stayed up, awake and
//!   reachable that was not answered within its bound.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use idem_core::ClaimId;

use crate::client::outcome_unknown;
use crate::clock::EPOCH_MS;
use crate::history::{Attempt, Change, Execution, History, Holder, StoreEvent, WorkerFault};
use crate::world::{Party, World};

/// A holder able to reach the store for this long in the stretch where it must extend its lease
/// will have extended it (a beat is due through that stretch and tried every 250 ms; a store round
/// trip takes at most 60 ms here).
pub const HEALTHY: Duration = Duration::from_secs(1);

/// What bounds an answer, from the run's settings.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub gateway: Duration,
    pub api: Duration,
    pub max_call: Duration,
}

#[derive(Debug, Default)]
pub struct Verdict {
    pub violations: Vec<String>,
    /// The documented doubles, each said.
    pub documented: Vec<String>,
}

/// Judges a run.
pub fn check(world: &World, bounds: Bounds) -> Verdict {
    let mut verdict = Verdict::default();
    let h = &world.history;
    let leases = Leases::of(&h.store);
    verdict.violations.extend(leases.taken_after_completed());
    verdict.violations.extend(leases.fences_not_growing());
    let doubled = doubles(world, &leases, bounds, &mut verdict);
    answers(h, &doubled, &mut verdict);
    timely(world, bounds, &mut verdict);
    verdict
}

/// A lease's story in the store: which life of its node took it, its length, its ends as extended,
/// how it ended.
#[derive(Debug, Clone)]
struct Lease {
    id: ClaimId,
    node: usize,
    life: u32,
    lease: Duration,
    /// Each `until` it had: when it was set, as stored, and in run time (read through the clock of
    /// the node that set it); the take's first.
    untils: Vec<(Duration, i64, Duration)>,
    completed: Option<Duration>,
    released: Option<Duration>,
    /// The lease that took over this one after it ran out: when, and this one's end then (run
    /// time, as the last node that set it meant it).
    taken_over: Option<(Duration, Duration)>,
}

struct Leases {
    by_fence: BTreeMap<u64, Lease>,
    events: Vec<StoreEvent>,
}

impl Leases {
    fn of(events: &[StoreEvent]) -> Self {
        let mut by_fence: BTreeMap<u64, Lease> = BTreeMap::new();
        for e in events {
            match &e.change {
                Change::Taken { fence, until, lease_ms, previous } => {
                    let lease = Lease {
                        id: e.id,
                        node: e.node,
                        life: e.life,
                        lease: Duration::from_millis(*lease_ms),
                        untils: vec![(e.at, *until, run_time(e, *until))],
                        completed: None,
                        released: None,
                        taken_over: None,
                    };
                    by_fence.insert(*fence, lease);
                    if let Some((old, _)) = previous
                        && let Some(old) = by_fence.get_mut(old)
                    {
                        let until = old.untils.last().map_or(Duration::ZERO, |(_, _, until)| *until);
                        old.taken_over = Some((e.at, until));
                    }
                }
                // An extension that moved nothing (it never shortens a lease) leaves the end as the
                // node that set it meant it.
                Change::Extended { fence, until } => {
                    by_fence.entry(*fence).and_modify(|l| {
                        if l.untils.last().is_none_or(|(_, set, _)| set != until) {
                            l.untils.push((e.at, *until, run_time(e, *until)));
                        }
                    });
                }
                Change::Completed { fence } => {
                    by_fence.entry(*fence).and_modify(|l| l.completed = Some(e.at));
                }
                Change::Released { fence } => {
                    by_fence.entry(*fence).and_modify(|l| l.released = Some(e.at));
                }
            }
        }
        Self { by_fence, events: events.to_vec() }
    }

    fn taken_after_completed(&self) -> Vec<String> {
        let mut completed: HashMap<ClaimId, Duration> = HashMap::new();
        let mut out = Vec::new();
        for e in &self.events {
            match &e.change {
                Change::Completed { .. } => {
                    completed.entry(e.id).or_insert(e.at);
                }
                Change::Taken { fence, .. } if completed.contains_key(&e.id) => out.push(format!(
                    "key {} taken again (fence {fence}, at {:?}) after it was completed at {:?}",
                    short(&e.id),
                    e.at,
                    completed[&e.id]
                )),
                _ => {}
            }
        }
        out
    }

    fn fences_not_growing(&self) -> Vec<String> {
        let mut last: HashMap<ClaimId, u64> = HashMap::new();
        let mut out = Vec::new();
        for e in &self.events {
            if let Change::Taken { fence, .. } = e.change
                && let Some(before) = last.insert(e.id, fence)
                && fence <= before
            {
                out.push(format!("key {}: fence {fence} taken after fence {before}", short(&e.id)));
            }
        }
        out
    }
}

fn short(id: &ClaimId) -> String {
    id.to_string()[..8].to_owned()
}

/// The run time a node meant by a time `ms` on its clock, from what its clock read when it sent
/// `e` (its offset from true time then).
fn run_time(e: &StoreEvent, ms: i64) -> Duration {
    let offset = e.stamp - (EPOCH_MS + e.sent.as_millis() as i64);
    Duration::from_millis((ms - EPOCH_MS - offset).max(0) as u64)
}

/// Keys executed twice: each pair judged; answers the keys with a documented double.
fn doubles(world: &World, leases: &Leases, bounds: Bounds, verdict: &mut Verdict) -> Vec<String> {
    let mut by_key: BTreeMap<&str, Vec<&Execution>> = BTreeMap::new();
    for e in world.history.executions.iter().filter(|e| !e.fenced_off) {
        by_key.entry(&e.key).or_default().push(e);
    }
    // A lease taken over after it ran out, its holder unable to keep it: the documented case, for
    // the key's answers too (the old holder's answer, or its "outcome unknown", is not stored over
    // the new one's), whether or not either ran the key.
    let keys = key_names(&world.history);
    let mut documented_keys = Vec::new();
    for (fence, lease) in leases.by_fence.iter().filter(|(_, l)| l.taken_over.is_some()) {
        let ran = world.history.executions.iter().find(|e| e.fence == *fence && !e.fenced_off);
        let holder = ran.map_or(Holder::Node(lease.node), |e| e.holder);
        if takeover(world, lease, bounds, holder, ran).is_ok()
            && let Some(key) = keys.get(&lease.id)
        {
            documented_keys.push(key.clone());
        }
    }
    for (key, runs) in by_key {
        for pair in runs.windows(2) {
            let (first, second) = (pair[0], pair[1]);
            match judge(world, leases, bounds, first, second) {
                Ok(why) => {
                    verdict.documented.push(format!("{key}: fence {} then {}: {why}", first.fence, second.fence));
                    documented_keys.push(key.to_owned());
                }
                Err(why) => verdict.violations.push(format!(
                    "{key} executed twice (fence {} at {:?} by {:?}, fence {} at {:?} by {:?}): {why}",
                    first.fence, first.at, first.holder, second.fence, second.at, second.holder
                )),
            }
        }
    }
    documented_keys
}

/// `Ok(why)`: the second execution is the documented case; `Err(why)` not.
fn judge(
    world: &World,
    leases: &Leases,
    bounds: Bounds,
    first: &Execution,
    second: &Execution,
) -> Result<String, String> {
    if first.fence == second.fence {
        return Err("one lease executed twice".into());
    }
    let lease = leases.by_fence.get(&first.fence).ok_or("the first execution's lease is not in the store")?;
    if let Some(at) = lease.released {
        return Err(format!("the first execution's lease was released at {at:?} after the upstream acted"));
    }
    // A node never takes over a key it is still running itself (short of abandoning the call at
    // max_call): it knows the call goes on.
    if let (Holder::Node(a), Holder::Node(b)) = (first.holder, second.holder)
        && let Some(next) = leases.by_fence.get(&second.fence)
        && a == b
        && next.life == lease.life
        && first.answered.is_none_or(|done| done > next.untils[0].0)
        && next.untils[0].0 < first.began + bounds.max_call
    {
        return Err("the node took over a key it was still running".into());
    }
    takeover(world, lease, bounds, first.holder, Some(first))
}

/// `Ok(why)`: `lease` was taken over as documented: its holder could not keep it. `ran`: what it
/// ran, if anything.
fn takeover(
    world: &World,
    lease: &Lease,
    bounds: Bounds,
    holder: Holder,
    ran: Option<&Execution>,
) -> Result<String, String> {
    let (taken_at, until) = lease.taken_over.ok_or("the second lease did not take over the first one's")?;
    // A gateway call still running at max_call is abandoned: its holder stops extending then.
    let abandoned = ran.and_then(|first| {
        let abandoned_at = first.began + bounds.max_call;
        (matches!(first.holder, Holder::Node(_)) && first.answered.is_none_or(|done| done >= abandoned_at))
            .then_some(abandoned_at)
    });
    let end = until.min(taken_at);
    let extended = lease.untils.len() > 1;
    let stretch = if extended { lease.lease * 2 / 3 } else { lease.lease / 2 };
    let from = until.saturating_sub(stretch);
    let keeper = Keeper { holder, life: lease.life, abandoned };
    match longest_healthy(world, &keeper, from, end) {
        span if span >= HEALTHY => Err(format!(
            "its holder could have extended the lease (healthy for {span:?} of {from:?}..{end:?}, lease {:?}, taken over at {taken_at:?}; the first call began at {:?}, answered at {:?})",
            lease.lease,
            ran.map(|e| e.began),
            ran.and_then(|e| e.answered)
        )),
        _ => Ok(format!("its holder could not keep the lease from {from:?} to {end:?}")),
    }
}

/// Who keeps a lease alive, and when a gateway holder gave its call up (`max_call`).
struct Keeper {
    holder: Holder,
    life: u32,
    abandoned: Option<Duration>,
}

/// Which key each store id is: the gateway's (its route, the clients' `Authorization`, the key) and
/// the operations' (namespace `sim`).
fn key_names(h: &History) -> HashMap<ClaimId, String> {
    let mut names = HashMap::new();
    for a in &h.attempts {
        if let Ok(key) = idem_core::gateway::parse_idempotency_key(&a.key) {
            names.insert(idem_core::gateway::request_id("/orders", &[b"Bearer sim"], &key), a.key.clone());
        }
        if let (Ok(ns), Ok(parts)) = (idem_core::Namespace::new("sim"), idem_core::Parts::single(a.key.clone())) {
            names.insert(idem_core::operation::store_id(&ns, &parts.id()), a.key.clone());
        }
    }
    names
}

fn died(faults: &[WorkerFault], op: usize) -> Option<Duration> {
    faults.iter().find_map(|f| match *f {
        WorkerFault::Died { op: o, at } if o == op => Some(at),
        _ => None,
    })
}

/// The longest stretch within `from..end` in which the lease's holder could extend it.
fn longest_healthy(world: &World, keeper: &Keeper, from: Duration, end: Duration) -> Duration {
    const STEP: Duration = Duration::from_millis(50);
    let (mut longest, mut run) = (Duration::ZERO, Duration::ZERO);
    let mut t = from;
    while t < end {
        if healthy(world, keeper, t) {
            run += STEP;
            longest = longest.max(run);
        } else {
            run = Duration::ZERO;
        }
        t += STEP;
    }
    longest
}

fn healthy(world: &World, keeper: &Keeper, t: Duration) -> bool {
    if keeper.abandoned.is_some_and(|at| t >= at) {
        return false;
    }
    match keeper.holder {
        Holder::Node(node) => world.alive(node, keeper.life, t) && world.store_path_ok(node, t),
        Holder::Worker { op, node } => {
            let paused =
                world.history.worker_faults.iter().any(
                    |f| matches!(*f, WorkerFault::Paused { op: o, from, until } if o == op && from <= t && t < until),
                );
            !paused
                && died(&world.history.worker_faults, op).is_none_or(|at| t < at)
                && world.cut(Party::Clients, Party::Node(node), t).is_none()
                && world.store_path_ok(node, t)
        }
    }
}

/// The answers of each gateway key agree (unless the key ran twice as documented), and a request
/// answered once is answered again when sent once more.
fn answers(h: &History, doubled: &[String], verdict: &mut Verdict) {
    let mut first: HashMap<&str, &Attempt> = HashMap::new();
    let mut answered: HashMap<(usize, &'static str), bool> = HashMap::new();
    for a in h.attempts.iter().filter(|a| a.what == "order" || a.what == "resend") {
        let is_final =
            a.status.is_some_and(|s| (200..300).contains(&s) || (s == 502 && outcome_unknown(&a.body)) || s == 422);
        if is_final {
            answered.insert((a.logical, a.what), true);
        } else {
            answered.entry((a.logical, a.what)).or_insert(false);
        }
        if a.status.is_some_and(|s| s == 500) {
            verdict.violations.push(format!("{}: a 500 from n{} at {:?}", a.key, a.node, a.sent));
        }
        if !is_final || a.status == Some(422) || doubled.iter().any(|k| k == &a.key) {
            continue;
        }
        match first.get(a.key.as_str()) {
            Some(earlier) if earlier.body != a.body || earlier.status != a.status => verdict.violations.push(format!(
                "{}: answered {:?} {} at {:?}, then {:?} {} at {:?}",
                a.key,
                earlier.status,
                String::from_utf8_lossy(&earlier.body),
                earlier.answered,
                a.status,
                String::from_utf8_lossy(&a.body),
                a.answered
            )),
            Some(_) => {}
            None => {
                first.insert(&a.key, a);
            }
        }
    }
    let orders: Vec<_> =
        answered.iter().filter(|((_, what), done)| *what == "order" && **done).map(|((l, _), _)| *l).collect();
    for logical in orders {
        let Some(key) = h.attempts.iter().find(|a| a.logical == logical && a.what == "resend").map(|a| &a.key) else {
            continue;
        };
        // A key whose newest call still runs (an upstream that hangs, short of `max_call`) is
        // rightly answered `409` until then.
        let last_resend =
            h.attempts.iter().filter(|a| a.logical == logical && a.what == "resend").map(|a| a.sent).max();
        let running = h
            .executions
            .iter()
            .rfind(|e| &e.key == key && !e.fenced_off)
            .is_some_and(|e| e.answered.is_none_or(|done| last_resend.is_none_or(|last| done > last)));
        if answered.get(&(logical, "resend")) != Some(&true) && !running {
            verdict.violations.push(format!("request {logical} was answered, and never again when sent once more"));
        }
    }
}

/// Every attempt to a node that stayed up, awake and reachable is answered within its bound.
fn timely(world: &World, bounds: Bounds, verdict: &mut Verdict) {
    for a in &world.history.attempts {
        let bound = if a.what == "order" || a.what == "resend" { bounds.gateway } else { bounds.api };
        if a.what == "extend" {
            continue; // a beat waits a third of the lease at most, by its own choice
        }
        let took = a.answered.map(|at| at - a.sent);
        if took.is_some_and(|took| took <= bound) {
            continue;
        }
        let end = a.sent + bound;
        let mut t = a.sent;
        let mut kept_up = true;
        while t < end && kept_up {
            kept_up = world.life(a.node, t).is_some()
                && world.paused(a.node, t).is_none()
                && world.cut(Party::Clients, Party::Node(a.node), t).is_none();
            t += Duration::from_millis(50);
        }
        if kept_up {
            verdict.violations.push(format!(
                "{} {} to n{} at {:?}: no answer within {bound:?} (took {took:?})",
                a.what, a.key, a.node, a.sent
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    //! The checker is checked: each violation it exists for, planted in a history, is flagged, and
    //! the documented case is not.

    use super::*;
    use crate::history::Attempt;
    use crate::rng::Rng;
    use crate::world::{Fault, Window};

    const S: Duration = Duration::from_secs(1);
    const BOUNDS: Bounds =
        Bounds { gateway: Duration::from_secs(10), api: Duration::from_secs(10), max_call: Duration::from_secs(600) };
    const KEY: &str = "\"k\"";

    fn id() -> ClaimId {
        ClaimId([7; 32])
    }

    fn at_ms(t: Duration) -> i64 {
        EPOCH_MS + t.as_millis() as i64
    }

    fn world(faults: Vec<Fault>) -> World {
        World { start: tokio::time::Instant::now(), rng: Rng::new(0), faults, history: History::default() }
    }

    fn taken(w: &mut World, at: Duration, node: usize, fence: u64, previous: Option<(u64, i64)>) {
        let change = Change::Taken { fence, until: at_ms(at + 6 * S), lease_ms: 6_000, previous };
        w.history.store.push(StoreEvent { at, node, life: 0, sent: at, id: id(), stamp: at_ms(at), change });
    }

    fn executed(w: &mut World, at: Duration, node: usize, fence: u64) {
        let execution = Execution {
            key: KEY.into(),
            fence,
            holder: Holder::Node(node),
            began: at,
            at,
            answered: Some(at + S / 10),
            fenced_off: false,
        };
        w.history.executions.push(execution);
    }

    fn answer(w: &mut World, logical: usize, at: Duration, status: u16, body: &str) {
        let attempt = Attempt {
            logical,
            key: KEY.into(),
            what: "order",
            node: 0,
            sent: at,
            answered: Some(at + S / 10),
            status: Some(status),
            body: body.as_bytes().to_vec(),
            replayed: false,
        };
        w.history.attempts.push(attempt);
    }

    /// A key run by node 0, its lease (6 s from 1 s) taken over by node 1 at 20 s, and run again.
    fn run_twice(faults: Vec<Fault>) -> World {
        let mut w = world(faults);
        taken(&mut w, S, 0, 1, None);
        executed(&mut w, S, 0, 1);
        taken(&mut w, 20 * S, 1, 2, Some((1, at_ms(7 * S))));
        executed(&mut w, 20 * S, 1, 2);
        w
    }

    #[test]
    fn a_key_run_twice_is_flagged_unless_its_holder_could_not_keep_its_lease() {
        let healthy = check(&run_twice(Vec::new()), BOUNDS);
        assert!(healthy.violations.iter().any(|v| v.contains("executed twice")), "{:?}", healthy.violations);
        let crashed = run_twice(vec![Fault::Crash { node: 0, window: Window { from: 2 * S, until: 30 * S } }]);
        let crashed = check(&crashed, BOUNDS);
        assert!(crashed.violations.is_empty(), "{:?}", crashed.violations);
        assert_eq!(crashed.documented.len(), 1, "the documented case, said");
        let cut = vec![Fault::Cut { a: Party::Node(0), b: Party::Store, window: Window { from: 2 * S, until: 9 * S } }];
        assert!(check(&run_twice(cut), BOUNDS).violations.is_empty(), "cut off past the lease");
        let short = vec![Fault::Pause { node: 0, window: Window { from: 2 * S, until: 4 * S } }];
        let short = check(&run_twice(short), BOUNDS);
        assert!(!short.violations.is_empty(), "a pause that ended well before the lease excuses nothing");
    }

    #[test]
    fn one_lease_run_twice_and_a_release_after_acting_are_flagged() {
        let mut w = world(Vec::new());
        taken(&mut w, S, 0, 1, None);
        executed(&mut w, S, 0, 1);
        executed(&mut w, 3 * S, 0, 1);
        assert!(check(&w, BOUNDS).violations.iter().any(|v| v.contains("one lease executed twice")));
        let mut w = world(Vec::new());
        taken(&mut w, S, 0, 1, None);
        executed(&mut w, S, 0, 1);
        w.history.store.push(StoreEvent {
            at: 2 * S,
            node: 0,
            life: 0,
            sent: 2 * S,
            id: id(),
            stamp: at_ms(2 * S),
            change: Change::Released { fence: 1 },
        });
        taken(&mut w, 3 * S, 0, 2, None);
        executed(&mut w, 3 * S, 0, 2);
        assert!(check(&w, BOUNDS).violations.iter().any(|v| v.contains("released")));
    }

    #[test]
    fn a_take_after_completion_and_a_fence_that_does_not_grow_are_flagged() {
        let mut w = world(Vec::new());
        taken(&mut w, S, 0, 5, None);
        w.history.store.push(StoreEvent {
            at: 2 * S,
            node: 0,
            life: 0,
            sent: 2 * S,
            id: id(),
            stamp: at_ms(2 * S),
            change: Change::Completed { fence: 5 },
        });
        taken(&mut w, 3 * S, 0, 4, None);
        let verdict = check(&w, BOUNDS);
        assert!(verdict.violations.iter().any(|v| v.contains("after it was completed")), "{:?}", verdict.violations);
        assert!(
            verdict.violations.iter().any(|v| v.contains("fence 4 taken after fence 5")),
            "{:?}",
            verdict.violations
        );
    }

    #[test]
    fn a_500_a_changed_answer_and_an_answer_out_of_bounds_are_flagged() {
        let mut w = world(Vec::new());
        answer(&mut w, 0, S, 201, "{\"execution\":0}");
        answer(&mut w, 1, 2 * S, 201, "{\"execution\":1}");
        answer(&mut w, 2, 3 * S, 500, "oops");
        let mut slow = w.history.attempts[0].clone();
        (slow.sent, slow.answered, slow.logical) = (10 * S, None, 3);
        w.history.attempts.push(slow);
        let verdict = check(&w, BOUNDS);
        for said in ["a 500", "then Some(201)", "no answer within"] {
            assert!(verdict.violations.iter().any(|v| v.contains(said)), "{said}: {:?}", verdict.violations);
        }
    }
}
