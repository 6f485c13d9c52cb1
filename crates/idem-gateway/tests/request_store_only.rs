//! What the storage boundary buys someone embedding the tower layer: a store that implements only
//! [`RequestStore`] — here a small in-memory one, as a user might write over their own cache —
//! passes the request-store conformance suite and runs the layer. No claims, receipts or job
//! queues to implement: seven methods, and the one rule of a begin is the core's (`decide_begin`).
//!
//! Being all in memory, the store also runs on tokio's paused clock, so the tests of a handler
//! slower than `upstream_timeout` (504, the handler kept running, its lease extended, its answer
//! replayed; the bound on background calls; shutdown) run in virtual time: exact and instant.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem_conformance::{Harness, START};
use idem_core::gateway::{Fingerprint, KeyPolicy, PathPattern};
use idem_core::request::{
    Begin, Decision, Forget, Found, LeaseToken, NewRequest, RequestState, decide_begin, kept_until,
};
use idem_core::{ClaimId, ClientToken, Clock, ManualClock, RequestStore, StoreError, SystemClock, Timestamp};
use idem_gateway::{Engine, EngineConfig, IdempotencyLayer, RoutePolicy, Routes};
use tower::ServiceExt;

enum Entry {
    Held {
        fingerprint: Fingerprint,
        token: LeaseToken,
        until: Timestamp,
        held: Vec<u8>,
        client: Option<ClientToken>,
        fence: u64,
    },
    Done {
        fingerprint: Fingerprint,
        result: Vec<u8>,
        until: Timestamp,
    },
}

impl Entry {
    /// Until when it is kept: a result until its TTL ends, a lease that ran out while its holder
    /// may still complete it.
    fn kept_until(&self) -> i64 {
        match self {
            Entry::Held { until, .. } => kept_until(false, until.millis()),
            Entry::Done { until, .. } => until.millis(),
        }
    }
}

/// One mutex over a map: every operation is atomic because it holds the lock throughout.
struct MemoryStore {
    clock: Arc<dyn Clock>,
    keys: Mutex<HashMap<ClaimId, Entry>>,
    /// Calls of `extend_request` and `release_request`, for the tests that count them.
    extends: AtomicUsize,
    releases: AtomicUsize,
    /// Makes `extend_request` hang, as over a store that stopped answering.
    stall_extends: std::sync::atomic::AtomicBool,
    /// The last fencing number handed out: one counter, so a later take's is always greater.
    fences: std::sync::atomic::AtomicU64,
}

impl MemoryStore {
    fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            keys: Mutex::default(),
            extends: AtomicUsize::new(0),
            releases: AtomicUsize::new(0),
            stall_extends: std::sync::atomic::AtomicBool::new(false),
            fences: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<ClaimId, Entry>> {
        self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The entry of `id` if it is held by `token` and its lease has not run out.
    /// Is the key's last lease `token`'s (live, or ran out with no begin taking the key since)?
    fn held_by(keys: &HashMap<ClaimId, Entry>, id: &ClaimId, token: LeaseToken, now: Timestamp) -> bool {
        matches!(keys.get(id), Some(e @ Entry::Held { token: t, .. }) if *t == token && e.kept_until() > now.millis())
    }
}

#[async_trait]
impl RequestStore for MemoryStore {
    /// The core's one rule decides ([`decide_begin`]); the store only says what it found.
    async fn begin_request(&self, request: NewRequest) -> Result<Begin, StoreError> {
        let now = self.clock.now();
        let mut keys = self.keys();
        let found = keys.get(&request.id).map(|entry| match entry {
            Entry::Held { fingerprint, token, until, client, fence, .. } => {
                Found::Held { fingerprint: *fingerprint, until: *until, token: *token, client: *client, fence: *fence }
            }
            Entry::Done { fingerprint, result, until } => {
                Found::Completed { fingerprint: *fingerprint, until: *until, result: result.clone() }
            }
        });
        let lease_expired = match decide_begin(found, &request.fingerprint, request.client, now) {
            Decision::Answer(answer) => return Ok(answer),
            Decision::Take { lease_expired } => lease_expired,
        };
        let token = LeaseToken::generate();
        let until = now.plus(request.lease);
        let fence = self.fences.fetch_add(1, Ordering::SeqCst) + 1;
        let entry = Entry::Held {
            fingerprint: request.fingerprint,
            token,
            until,
            held: request.held,
            client: request.client,
            fence,
        };
        keys.insert(request.id, entry);
        Ok(Begin::Started { token, lease_until: until, lease_expired, fence })
    }

    async fn complete_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        result: &[u8],
        ttl: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        let now = self.clock.now();
        let mut keys = self.keys();
        if !Self::held_by(&keys, id, token, now) {
            return Ok(None);
        }
        let Some(Entry::Held { fingerprint, .. }) = keys.remove(id) else { return Ok(None) };
        keys.insert(*id, Entry::Done { fingerprint, result: result.to_vec(), until: now.plus(ttl) });
        Ok(Some(now.plus(ttl)))
    }

    async fn release_request(&self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        let now = self.clock.now();
        let mut keys = self.keys();
        let held = Self::held_by(&keys, id, token, now);
        if held {
            keys.remove(id);
        }
        Ok(held)
    }

    async fn extend_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        self.extends.fetch_add(1, Ordering::SeqCst);
        if self.stall_extends.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let now = self.clock.now();
        let mut keys = self.keys();
        if !Self::held_by(&keys, id, token, now) {
            return Ok(None);
        }
        match keys.get_mut(id) {
            Some(Entry::Held { until, .. }) => {
                *until = now.plus(lease).max(*until);
                Ok(Some(*until))
            }
            _ => Ok(None),
        }
    }

    async fn peek_request(&self, id: &ClaimId) -> Result<Option<RequestState>, StoreError> {
        let now = self.clock.now();
        Ok(match self.keys().get(id) {
            Some(Entry::Held { fingerprint, until, held, .. }) if *until > now => {
                Some(RequestState::Held { fingerprint: *fingerprint, lease_until: *until, held: held.clone() })
            }
            Some(Entry::Done { fingerprint, result, until }) if *until > now => {
                Some(RequestState::Completed { fingerprint: *fingerprint, result: result.clone(), expires_at: *until })
            }
            _ => None,
        })
    }

    async fn forget_request(&self, id: &ClaimId) -> Result<Forget, StoreError> {
        let now = self.clock.now();
        let mut keys = self.keys();
        Ok(match keys.get(id) {
            Some(Entry::Done { until, .. }) if *until > now => {
                keys.remove(id);
                Forget::Forgotten
            }
            Some(Entry::Held { until, .. }) if *until > now => Forget::Held,
            _ => Forget::Absent,
        })
    }

    async fn sweep_requests(&self, limit: usize) -> Result<usize, StoreError> {
        let now = self.clock.now();
        let mut keys = self.keys();
        let gone: Vec<ClaimId> =
            keys.iter().filter(|(_, e)| e.kept_until() <= now.millis()).map(|(id, _)| *id).take(limit).collect();
        gone.iter().for_each(|id| drop(keys.remove(id)));
        Ok(gone.len())
    }
}

async fn memory() -> Harness<MemoryStore> {
    let clock = Arc::new(ManualClock::new(START));
    Harness { store: Arc::new(MemoryStore::new(clock.clone())), clock, guard: Box::new(()) }
}

idem_conformance::request_suite!(memory);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_runs_on_a_store_that_has_only_request_keys() {
    let store: Arc<dyn RequestStore> = Arc::new(MemoryStore::new(Arc::new(SystemClock)));
    let engine = Arc::new(Engine::new(store, Arc::new(SystemClock), EngineConfig::default()));
    let mut orders = RoutePolicy::new(PathPattern::parse("/orders").expect("valid"));
    orders.key = KeyPolicy::Required;
    orders.scope = Vec::new(); // one caller
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let router = Router::new()
        .route(
            "/orders",
            post(move || async move {
                (StatusCode::CREATED, format!("order {}", counted.fetch_add(1, Ordering::SeqCst) + 1))
            }),
        )
        .layer(IdempotencyLayer::new(engine, Routes::new([orders])));
    let order = || Request::post("/orders").header("idempotency-key", "k-1").body(Body::from("{}")).expect("request");
    let first = router.clone().oneshot(order()).await.expect("first");
    assert_eq!(first.status(), StatusCode::CREATED);
    let again = router.oneshot(order()).await.expect("again");
    assert_eq!(
        (again.status(), again.headers().get("idempotent-replayed").map(|v| v.as_bytes())),
        (StatusCode::CREATED, Some(&b"true"[..]))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once");
}

/// The store's time as tokio's clock tells it: paused, leases run out in virtual time too.
#[derive(Debug)]
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        START.plus(self.0.elapsed())
    }
}

struct Slow {
    router: Router,
    store: Arc<MemoryStore>,
    engine: Arc<Engine>,
    /// Handler calls begun.
    calls: Arc<AtomicUsize>,
}

/// `/orders` with `upstream_timeout = 1s`, `lease = 3s`, on the in-memory store in virtual time;
/// the handler takes `x-delay-ms` and answers `order N`.
fn slow_orders(config: EngineConfig) -> Slow {
    slow_orders_with_lease(config, Duration::from_secs(3))
}

fn slow_orders_with_lease(config: EngineConfig, lease: Duration) -> Slow {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock(tokio::time::Instant::now()));
    let store = Arc::new(MemoryStore::new(Arc::clone(&clock)));
    let engine = Arc::new(Engine::new(store.clone(), clock, config));
    let mut orders = RoutePolicy::new(PathPattern::parse("/orders").expect("valid")).with_lease(lease);
    orders.upstream_timeout = Duration::from_secs(1);
    orders.key = KeyPolicy::Required;
    orders.scope = Vec::new(); // one caller
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let handler = move |headers: axum::http::HeaderMap| async move {
        let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
        let delay = headers.get("x-delay-ms").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        (StatusCode::CREATED, format!("order {n}"))
    };
    let router = Router::new()
        .route("/orders", post(handler))
        .layer(IdempotencyLayer::new(Arc::clone(&engine), Routes::new([orders])));
    Slow { router, store, engine, calls }
}

impl Slow {
    /// (status, Retry-After, Idempotent-Replayed, body) of a POST with `key` taking `delay_ms`.
    async fn post(&self, key: &str, delay_ms: u64) -> (u16, Option<String>, bool, String) {
        use http_body_util::BodyExt;
        let request = Request::post("/orders")
            .header("idempotency-key", key)
            .header("x-delay-ms", delay_ms.to_string())
            .body(Body::from("{}"))
            .expect("request");
        let response = self.router.clone().oneshot(request).await.expect("infallible");
        let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let (status, retry_after, replayed) =
            (response.status().as_u16(), header("retry-after"), header("idempotent-replayed").is_some());
        let body = response.into_body().collect().await.expect("body").to_bytes();
        (status, retry_after, replayed, String::from_utf8_lossy(&body).into_owned())
    }
}

/// The case: a handler taking 4 s behind `upstream_timeout = 1s`, `lease = 3s`. Its client
/// gets 504 after exactly 1 s; the same key is 409 then, and still 409 past the 3 s the lease
/// would have run out (it is extended at 1.5, 2.5 and 3.5 s); once the handler answers, a retry
/// is its 201 replayed. The handler ran once. A request answered in time costs no extension.
#[tokio::test(start_paused = true)]
async fn a_slow_handler_keeps_its_key_past_the_lease_and_its_answer_is_replayed() {
    use tokio::time::{Instant, sleep_until};
    let app = slow_orders(EngineConfig::default());
    assert_eq!(app.post("fast", 900).await.0, 201);
    assert_eq!(app.store.extends.load(Ordering::SeqCst), 0, "answered within upstream_timeout: no extension");

    let start = Instant::now();
    let (status, retry_after, _, body) = app.post("slow", 4000).await;
    assert_eq!((status, retry_after.as_deref()), (504, Some("1")), "{body}");
    assert_eq!(start.elapsed(), Duration::from_secs(1), "the client waited upstream_timeout, no longer");
    assert!(body.contains("keeps the request running"), "{body}");
    assert_eq!(app.engine.background_calls(), 1);
    assert_eq!(app.post("slow", 4000).await.0, 409, "the key is held");
    sleep_until(start + Duration::from_millis(3500)).await;
    assert_eq!(app.post("slow", 4000).await.0, 409, "still held past the first lease: it was extended");
    assert_eq!(app.calls.load(Ordering::SeqCst), 2, "the slow handler was not called again");

    sleep_until(start + Duration::from_millis(4100)).await;
    let (status, _, replayed, body) = app.post("slow", 4000).await;
    assert_eq!((status, replayed, body.as_str()), (201, true, "order 2"), "the handler's own answer, replayed");
    assert_eq!(app.calls.load(Ordering::SeqCst), 2);
    assert_eq!(app.store.extends.load(Ordering::SeqCst), 3, "extended at 1.5, 2.5 and 3.5 s");
    assert_eq!(app.store.releases.load(Ordering::SeqCst), 0);
    assert_eq!(app.engine.background_calls(), 0);
}

/// Past `max_background_calls` the slow call is dropped at its 504, and its key is not released
/// early: 409 until the lease ends (Retry-After says when), then a retry executes again.
#[tokio::test(start_paused = true)]
async fn over_the_bound_the_key_stays_held_until_its_lease_ends() {
    use tokio::time::{Instant, sleep_until};
    let app = slow_orders(EngineConfig { max_background_calls: 0, ..EngineConfig::default() });
    let start = Instant::now();
    let (status, retry_after, _, body) = app.post("k", 4000).await;
    assert_eq!((status, retry_after.as_deref()), (504, Some("2")), "Retry-After: when the lease ends; {body}");
    assert!(body.contains("max_background_calls"), "{body}");
    assert_eq!(app.engine.background_calls(), 0);
    sleep_until(start + Duration::from_millis(2900)).await;
    assert_eq!(app.post("k", 0).await.0, 409, "held to the end of its lease");
    assert_eq!(app.store.releases.load(Ordering::SeqCst), 0, "never released early");
    sleep_until(start + Duration::from_millis(3100)).await;
    let (status, _, replayed, body) = app.post("k", 0).await;
    assert_eq!((status, replayed, body.as_str()), (201, false, "order 2"), "the lease ended: executed again");
}

/// Shutdown: a background call that answers within the grace period settles its key (replayed
/// afterwards); one still running after it is abandoned, its key held (never released) until its
/// lease ends. No call moves to the background once draining began.
#[tokio::test(start_paused = true)]
async fn drain_waits_for_background_calls_then_abandons_them_holding_their_keys() {
    use tokio::time::{Instant, sleep_until};
    let app = slow_orders(EngineConfig::default());
    let start = Instant::now();
    assert_eq!(app.post("quick", 2500).await.0, 504);
    assert_eq!(app.post("long", 60_000).await.0, 504);
    assert_eq!(app.engine.background_calls(), 2);
    assert_eq!(app.engine.drain(Duration::from_secs(5)).await, 1, "the 60 s call outlived the grace period");
    assert_eq!(start.elapsed(), Duration::from_secs(7), "two 504s (1 s each), then the 5 s grace");
    assert!(app.post("quick", 2500).await.2, "settled during the drain: replayed");
    assert_eq!(app.post("long", 60_000).await.0, 409, "abandoned, not released: held");
    assert_eq!(app.store.releases.load(Ordering::SeqCst), 0);
    assert_eq!(app.engine.background_calls(), 0, "abandoned calls are gone");
    let (status, retry_after, _, _) = app.post("late", 4000).await;
    assert_eq!((status, retry_after.as_deref()), (504, Some("2")), "draining: dropped, held until its lease ends");
    sleep_until(start + Duration::from_secs(11)).await;
    assert_eq!(app.post("long", 0).await.0, 201, "its lease ended without a heartbeat: free again");
}

/// A lease shorter than twice `upstream_timeout` is extended while the client still waits (at half
/// the lease); a store that stops answering then does not hold up the client's 504.
#[tokio::test(start_paused = true)]
async fn a_stalled_extension_does_not_delay_the_504() {
    let app = slow_orders_with_lease(EngineConfig::default(), Duration::from_millis(1500));
    app.store.stall_extends.store(true, Ordering::SeqCst);
    let start = tokio::time::Instant::now();
    let (status, retry_after, _, _) = app.post("k", 4000).await;
    assert_eq!((status, retry_after.as_deref()), (504, Some("1")));
    assert_eq!(start.elapsed(), Duration::from_secs(1), "upstream_timeout, not the store, decides the wait");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(app.store.extends.load(Ordering::SeqCst), 2, "at 0.75 s, and again at once in the background");
}
