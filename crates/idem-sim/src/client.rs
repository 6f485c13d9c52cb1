//! The clients of a run: how a request crosses to a node and back ([`exchange`]), clients of the
//! gateway that retry with the same key as real ones do ([`gateway_client`]), and workers of the
//! operations API that begin, work, beat and complete by the rule the four client libraries keep
//! ([`worker`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::BodyExt;
use tower::ServiceExt;

use crate::history::{Attempt, Execution, Holder, WorkerFault};
use crate::node::{self, Node, Setup};
use crate::store::Keys;
use crate::world::{self, Party, Shared};

/// Everything a client needs of the run.
#[derive(Clone)]
pub struct Sim {
    pub world: Shared,
    pub keys: Arc<Mutex<Keys>>,
    pub nodes: Arc<Vec<Node>>,
    pub setup: Setup,
}

/// Which listener of a node a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Gateway,
    Api,
}

/// An answer as a client reads it.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// One HTTP exchange with `node`: the request crosses the world; the node handles it in a task of
/// its own (a client that gives up does not stop it, as a server's connection task is not); the
/// answer crosses back. `None`: no answer within `timeout` (a refused or broken connection, a node
/// dead or paused, a cut link).
pub async fn exchange(
    sim: &Sim,
    node: usize,
    to: Listener,
    request: Request<Bytes>,
    timeout: Duration,
) -> Option<Answer> {
    let (start, arrives) = {
        let mut w = world::lock(&sim.world);
        let (now, latency) = (w.now(), w.rng.millis(1, 10));
        (w.start, w.deliver(Party::Clients, Party::Node(node), now, latency))
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sim2 = sim.clone();
    tokio::spawn(async move {
        world::until(start, arrives).await;
        let Some(life) = world::lock(&sim2.world).life(node, arrives) else { return };
        // A node that dies while it handles the request resets the connection then.
        let dies = world::lock(&sim2.world).death(node, arrives);
        let handled = tokio::select! {
            biased;
            () = async { match dies { Some(at) => world::until(start, at).await, None => std::future::pending().await } } => None,
            handled = handle(&sim2, node, life, to, request) => Some(handled),
        };
        let Some((life, parts, body)) = handled.flatten() else { return };
        let back = {
            let mut w = world::lock(&sim2.world);
            let done = w.now();
            if !w.alive(node, life, done) {
                return;
            }
            let latency = w.rng.millis(1, 10);
            w.deliver(Party::Node(node), Party::Clients, done, latency)
        };
        world::until(start, back).await;
        let _ = tx.send(Answer { status: parts.status.as_u16(), headers: parts.headers, body });
    });
    match tokio::time::timeout(timeout, rx).await {
        Ok(Ok(answer)) => Some(answer),
        _ => None,
    }
}

/// A node's life handles a request, its answer read whole; `None`: the body broke off.
async fn handle(
    sim: &Sim,
    node: usize,
    life: u32,
    to: Listener,
    request: Request<Bytes>,
) -> Option<(u32, http::response::Parts, Bytes)> {
    let life = sim.nodes[node].life(life, &sim.setup, &sim.world, &sim.keys);
    let response = match to {
        Listener::Gateway => node::gateway(&life, &sim.world, node, request).await,
        Listener::Api => {
            let request = request.map(axum::body::Body::from);
            let Ok(response) = life.router.clone().oneshot(request).await;
            response.map(|b| b.map_err(Into::into).boxed_unsync())
        }
    };
    let (parts, body) = response.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    Some((life.life, parts, body))
}

fn retry_after(answer: &Answer) -> Option<Duration> {
    let secs: u64 = answer.headers.get(http::header::RETRY_AFTER)?.to_str().ok()?.parse().ok()?;
    Some(Duration::from_secs(secs.min(3)))
}

fn record(sim: &Sim, attempt: Attempt) {
    let mut w = world::lock(&sim.world);
    let at = attempt.answered.unwrap_or(attempt.sent);
    w.history.say(at, || {
        let body = match attempt.status {
            Some(s) if s >= 400 => String::from_utf8_lossy(&attempt.body).chars().take(160).collect(),
            _ => String::new(),
        };
        format!(
            "client {} {} n{} {}: {:?} {body}",
            attempt.logical, attempt.what, attempt.node, attempt.key, attempt.status
        )
    });
    w.history.attempts.push(attempt);
}

fn now(sim: &Sim) -> Duration {
    world::lock(&sim.world).now()
}

fn pick_node(sim: &Sim) -> usize {
    let n = sim.nodes.len() as u64;
    world::lock(&sim.world).rng.below(n) as usize
}

/// A logical request of a gateway client: one key and body, sent until it has a final answer.
#[derive(Debug, Clone)]
pub struct Order {
    pub logical: usize,
    pub key: String,
    pub body: String,
    pub at: Duration,
    /// When to send it once more after its answer, as a client that lost the answer would (then
    /// it must be replayed).
    pub resend_at: Duration,
}

/// How long a client waits for any one answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(40);
/// How long a client goes on retrying one request.
const RETRY_FOR: Duration = Duration::from_secs(240);

/// Sends `order` until a final answer: retried with the same key on a broken connection, a timeout,
/// `409`, `502` (the upstream unreachable), `503` and `504`, honouring `Retry-After` (at most 3 s);
/// then, at `resend_at`, once more (and until it has a final answer again).
pub async fn gateway_client(sim: Sim, order: Order) {
    let start = world::lock(&sim.world).start;
    world::until(start, order.at).await;
    until_final(&sim, &order, "order").await;
    world::until(start, order.resend_at.max(now(&sim))).await;
    until_final(&sim, &order, "resend").await;
}

async fn until_final(sim: &Sim, order: &Order, what: &'static str) {
    let deadline = now(sim) + RETRY_FOR;
    while now(sim) < deadline {
        let node = pick_node(sim);
        let request = Request::post("/orders")
            .header("idempotency-key", &order.key)
            .header("content-type", "application/json")
            .header("authorization", "Bearer sim")
            .body(Bytes::from(order.body.clone()))
            .expect("a request");
        let sent = now(sim);
        let answer = exchange(sim, node, Listener::Gateway, request, CLIENT_TIMEOUT).await;
        let wait = answer.as_ref().map_or(Some(Duration::from_millis(500)), retryable);
        let attempt = Attempt {
            logical: order.logical,
            key: order.key.clone(),
            what,
            node,
            sent,
            answered: answer.as_ref().map(|_| now(sim)),
            status: answer.as_ref().map(|a| a.status),
            body: answer.as_ref().map(|a| a.body.to_vec()).unwrap_or_default(),
            replayed: answer.as_ref().is_some_and(|a| a.headers.contains_key("idempotent-replayed")),
        };
        record(sim, attempt);
        match wait {
            Some(wait) => tokio::time::sleep(wait).await,
            None => return,
        }
    }
}

/// How long to wait before retrying after this answer; `None`: it is final (a `502` that says the
/// outcome is unknown is: it is the key's answer).
fn retryable(answer: &Answer) -> Option<Duration> {
    let retried = matches!(answer.status, 409 | 503 | 504) || (answer.status == 502 && !outcome_unknown(&answer.body));
    retried.then(|| retry_after(answer).unwrap_or(Duration::from_millis(500)))
}

/// Is this body the gateway's `upstream-outcome-unknown` problem?
pub fn outcome_unknown(body: &[u8]) -> bool {
    const KIND: &[u8] = b"upstream-outcome-unknown";
    body.windows(KIND.len()).any(|w| w == KIND)
}

/// An operation a worker runs once, through one node (a sticky load balancer).
#[derive(Debug, Clone)]
pub struct Job {
    pub op: usize,
    pub key: String,
    pub node: usize,
    pub at: Duration,
    pub lease: Duration,
    pub work: Duration,
    /// The worker stops (a pause) for this long, this far into the work.
    pub pause: Option<(Duration, Duration)>,
    /// The worker dies this far into the work.
    pub dies: Option<Duration>,
}

/// How a hold ended.
enum Held {
    Completed,
    Lost,
    Died,
}

/// Runs `job`: begins (with one client token for every try), works under a heartbeat, completes;
/// begins again after a lost lease; stops once the work is completed (by it or another worker).
pub async fn worker(sim: Sim, job: Job) {
    let start = world::lock(&sim.world).start;
    world::until(start, job.at).await;
    let deadline = now(&sim) + RETRY_FOR;
    // One client token per `run`: its retries share it; a `run` begun again after a lost lease is a
    // new call, as an application's retry of `run` is.
    let mut runs = 0;
    while now(&sim) < deadline {
        let client_token = format!("w{}-{runs}", job.op);
        let leased_at = now(&sim);
        let body = serde_json::json!({
            "key": job.key, "request": {"op": job.key}, "lease_seconds": job.lease.as_secs(), "client_token": client_token,
        });
        let answer = call(&sim, &job, "begin", "/v1/operations/sim/begin", body).await;
        let wait = match answer.as_ref().map(|a| a.status) {
            Some(201) => {
                let begun: serde_json::Value =
                    serde_json::from_slice(&answer.as_ref().expect("answered").body).unwrap_or_default();
                match hold(&sim, &job, &begun, leased_at).await {
                    Held::Completed | Held::Died => return,
                    Held::Lost => {
                        runs += 1;
                        Duration::from_millis(200)
                    }
                }
            }
            Some(200 | 422) => return,
            Some(_) => answer.as_ref().and_then(retry_after).unwrap_or(Duration::from_millis(500)),
            None => Duration::from_millis(500),
        };
        tokio::time::sleep(wait).await;
    }
}

/// One call of a worker to its node's API, recorded; a beat waits at most a third of the lease for
/// its answer, as the clients' beats do.
async fn call(sim: &Sim, job: &Job, what: &'static str, path: &str, body: serde_json::Value) -> Option<Answer> {
    let timeout = if what == "extend" { job.lease / 3 } else { CLIENT_TIMEOUT };
    let request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Bytes::from(body.to_string()))
        .expect("a request");
    let sent = now(sim);
    let answer = exchange(sim, job.node, Listener::Api, request, timeout).await;
    record(
        sim,
        Attempt {
            logical: job.op,
            key: job.key.clone(),
            what,
            node: job.node,
            sent,
            answered: answer.as_ref().map(|_| now(sim)),
            status: answer.as_ref().map(|a| a.status),
            body: answer.as_ref().map(|a| a.body.to_vec()).unwrap_or_default(),
            replayed: false,
        },
    );
    answer
}

/// The work under a lease: its effect recorded (with the lease's fence), a heartbeat by the
/// clients' rule, then `complete`.
async fn hold(sim: &Sim, job: &Job, begun: &serde_json::Value, leased_at: Duration) -> Held {
    let (Some(id), Some(token), Some(fence)) = (begun["id"].as_str(), begun["token"].as_str(), begun["fence"].as_u64())
    else {
        return Held::Lost;
    };
    let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beats = tokio::spawn(heartbeat(
        sim.clone(),
        job.clone(),
        id.to_owned(),
        token.to_owned(),
        leased_at,
        Arc::clone(&lost),
    ));
    let worked = work(sim, job, fence).await;
    beats.abort();
    if !worked {
        return Held::Died;
    }
    let body = serde_json::json!({"token": token, "result": {"done_by": job.op}});
    let path = format!("/v1/operations/sim/{id}/complete");
    for _ in 0..200 {
        match call(sim, job, "complete", &path, body.clone()).await.map(|a| a.status) {
            Some(200) => return Held::Completed,
            Some(409) => return Held::Lost,
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    Held::Lost
}

/// The work: its effect at the start (refused when a newer fence was seen for the key, as a fenced
/// resource does), then its length, with a pause in it or a death. `false`: the worker died.
async fn work(sim: &Sim, job: &Job, fence: u64) -> bool {
    let started = now(sim);
    {
        let mut w = world::lock(&sim.world);
        let newest = w.history.executions.iter().filter(|e| e.key == job.key && !e.fenced_off).map(|e| e.fence).max();
        let fenced_off = newest.is_some_and(|newest| fence < newest);
        let holder = Holder::Worker { op: job.op, node: job.node };
        let answered = Some(started + job.work);
        w.history.say(started, || format!("worker {} works on {} fence {fence}", job.op, job.key));
        w.history.executions.push(Execution {
            key: job.key.clone(),
            fence,
            holder,
            began: started,
            at: started,
            answered,
            fenced_off,
        });
    }
    if let Some(dies) = job.dies.filter(|d| *d < job.work) {
        tokio::time::sleep(dies).await;
        let mut w = world::lock(&sim.world);
        let at = w.now();
        w.history.worker_faults.push(WorkerFault::Died { op: job.op, at });
        return false;
    }
    let mut left = job.work;
    if let Some((into, long)) = job.pause.filter(|(into, _)| *into < job.work) {
        tokio::time::sleep(into).await;
        let from = now(sim);
        PAUSED.with(|p| p.borrow_mut().push((job.op, from, from + long)));
        world::lock(&sim.world).history.worker_faults.push(WorkerFault::Paused {
            op: job.op,
            from,
            until: from + long,
        });
        tokio::time::sleep(long).await;
        left -= into;
    }
    tokio::time::sleep(left).await;
    true
}

thread_local! {
    /// Workers' pauses in this run: (op, from, until). The run is one thread.
    static PAUSED: std::cell::RefCell<Vec<(usize, Duration, Duration)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Forgets the pauses of the run before.
pub fn new_run() {
    PAUSED.with(|p| p.borrow_mut().clear());
}

/// When a paused worker resumes, if it is paused at `t`.
fn paused_until(op: usize, t: Duration) -> Option<Duration> {
    PAUSED.with(|p| {
        p.borrow().iter().find(|(o, from, until)| *o == op && *from <= t && t < *until).map(|(_, _, until)| *until)
    })
}

/// The clients' heartbeat: the lease counted from before the begin was sent (each extension from
/// before it was sent), a beat every third of the lease, a failed beat tried again 250 ms later;
/// `lease-lost` stops it. A paused worker beats nothing until it resumes.
async fn heartbeat(
    sim: Sim,
    job: Job,
    id: String,
    token: String,
    leased_at: Duration,
    lost: Arc<std::sync::atomic::AtomicBool>,
) {
    let start = world::lock(&sim.world).start;
    let every = job.lease / 3;
    let mut next = leased_at + every;
    let path = format!("/v1/operations/sim/{id}/extend");
    loop {
        world::until(start, next).await;
        if let Some(resume) = paused_until(job.op, now(&sim)) {
            world::until(start, resume).await;
        }
        let sent = now(&sim);
        let body = serde_json::json!({"token": token, "lease_seconds": job.lease.as_secs()});
        match call(&sim, &job, "extend", &path, body).await.map(|a| a.status) {
            Some(200) => next = sent + every,
            Some(409) => {
                lost.store(true, std::sync::atomic::Ordering::SeqCst);
                return;
            }
            _ => next = now(&sim) + Duration::from_millis(250),
        }
    }
}
