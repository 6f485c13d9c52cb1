//! What the storage boundary buys someone embedding the tower layer: a store that implements only
//! [`RequestStore`] — here a small in-memory one, as a user might write over their own cache —
//! passes the request-store conformance suite and runs the layer. No claims, receipts or job
//! queues to implement: seven methods.

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
use idem_core::request::{Begin, Forget, LeaseToken, NewRequest, RequestState};
use idem_core::{ClaimId, Clock, ManualClock, RequestStore, StoreError, SystemClock, Timestamp};
use idem_gateway::{Engine, EngineConfig, IdempotencyLayer, RoutePolicy, Routes};
use tower::ServiceExt;

enum Entry {
    Held { fingerprint: Fingerprint, token: LeaseToken, until: Timestamp, held: Vec<u8> },
    Done { fingerprint: Fingerprint, result: Vec<u8>, until: Timestamp },
}

impl Entry {
    fn until(&self) -> Timestamp {
        match self {
            Entry::Held { until, .. } | Entry::Done { until, .. } => *until,
        }
    }
}

/// One mutex over a map: every operation is atomic because it holds the lock throughout.
struct MemoryStore {
    clock: Arc<dyn Clock>,
    keys: Mutex<HashMap<ClaimId, Entry>>,
}

impl MemoryStore {
    fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock, keys: Mutex::default() }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<ClaimId, Entry>> {
        self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The entry of `id` if it is held by `token` and its lease has not run out.
    fn held_by(keys: &HashMap<ClaimId, Entry>, id: &ClaimId, token: LeaseToken, now: Timestamp) -> bool {
        matches!(keys.get(id), Some(Entry::Held { token: t, until, .. }) if *t == token && *until > now)
    }
}

#[async_trait]
impl RequestStore for MemoryStore {
    async fn begin_request(&self, request: NewRequest) -> Result<Begin, StoreError> {
        let now = self.clock.now();
        let mut keys = self.keys();
        let lease_expired = match keys.get(&request.id) {
            Some(Entry::Held { fingerprint, until, .. }) if *until > now => {
                let same_fingerprint = *fingerprint == request.fingerprint;
                return Ok(Begin::InFlight { same_fingerprint, lease_until: *until });
            }
            Some(Entry::Done { fingerprint, result, until }) if *until > now => {
                let same_fingerprint = *fingerprint == request.fingerprint;
                return Ok(Begin::Completed { same_fingerprint, result: result.clone(), expires_at: *until });
            }
            Some(Entry::Held { .. }) => true,
            _ => false,
        };
        let token = LeaseToken::generate();
        let until = now.plus(request.lease);
        keys.insert(request.id, Entry::Held { fingerprint: request.fingerprint, token, until, held: request.held });
        Ok(Begin::Started { token, lease_until: until, lease_expired })
    }

    async fn complete_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        result: &[u8],
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now();
        let mut keys = self.keys();
        if !Self::held_by(&keys, id, token, now) {
            return Ok(false);
        }
        let Some(Entry::Held { fingerprint, .. }) = keys.remove(id) else { return Ok(false) };
        keys.insert(*id, Entry::Done { fingerprint, result: result.to_vec(), until: now.plus(ttl) });
        Ok(true)
    }

    async fn release_request(&self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError> {
        let mut keys = self.keys();
        let held = matches!(keys.get(id), Some(Entry::Held { token: t, .. }) if *t == token);
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
        let now = self.clock.now();
        let mut keys = self.keys();
        if !Self::held_by(&keys, id, token, now) {
            return Ok(None);
        }
        match keys.get_mut(id) {
            Some(Entry::Held { until, .. }) => {
                *until = now.plus(lease);
                Ok(Some(*until))
            }
            _ => Ok(None),
        }
    }

    async fn peek_request(&self, id: &ClaimId) -> Result<Option<RequestState>, StoreError> {
        let now = self.clock.now();
        Ok(match self.keys().get(id) {
            Some(Entry::Held { fingerprint, until, held, .. }) if *until > now => {
                Some(RequestState::InFlight { fingerprint: *fingerprint, lease_until: *until, held: held.clone() })
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
            Some(Entry::Held { until, .. }) if *until > now => Forget::InFlight,
            _ => Forget::Absent,
        })
    }

    async fn sweep_requests(&self, limit: usize) -> Result<usize, StoreError> {
        let now = self.clock.now();
        let mut keys = self.keys();
        let gone: Vec<ClaimId> = keys.iter().filter(|(_, e)| e.until() <= now).map(|(id, _)| *id).take(limit).collect();
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
