//! The engine's state, and the types its steps hand one another.
//!
//! [`Engine`] holds what it was given (the store, the clock, its [`EngineConfig`]) and what it
//! keeps (the replay cache, the waiters, the keys this node runs, and the bounds of its background
//! calls and of the responses it keeps for the store). A request's [`Identity`] and the key it took
//! ([`Taken`]) pass from step to step; [`count`] says how each request ended.
//!
//! This is the bottom of the engine: `crate::engine` takes a request from its key to its answer,
//! and each of its steps ([`crate::held`], [`crate::background`], [`crate::unstored`]) adds to
//! [`Engine`] the part it owns, reading its types here, never from `crate::engine`. This module
//! imports none of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_core::gateway::Fingerprint;
use idem_core::request::LeaseToken;
use idem_core::{ClaimId, Clock, RequestStore};
use idem_metrics::gateway::Outcome;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use crate::cache::ReplayCache;
use crate::holding::{Hold, Holding};
use crate::policy::RoutePolicy;
use crate::waiters::Waiters;

/// The request-body limit when nothing else is configured: 1 MiB, as `limits.max_body_bytes`.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Largest request body buffered on a guarded route (413 above it).
    pub max_body_bytes: usize,
    /// Largest response stored; a larger one is passed through and its key released.
    pub max_stored_response: usize,
    /// Memory for the replay cache of completed responses.
    pub cache_bytes: usize,
    /// Most upstream calls kept running past their `upstream_timeout` at once; past it, a slow
    /// call is dropped and its key held until its lease ends.
    pub max_background_calls: usize,
    /// Memory for responses kept until the store takes them; past it, a response the store
    /// could not take is dropped and its key held until its lease ends.
    pub max_unstored_bytes: usize,
}

impl Default for EngineConfig {
    /// The defaults of `limits.max_body_bytes` and `[gateway] max_stored_response`, `cache_bytes`,
    /// `max_background_calls` and `max_unstored_bytes`.
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_stored_response: 1 << 20,
            cache_bytes: 64 << 20,
            max_background_calls: 1000,
            max_unstored_bytes: 64 << 20,
        }
    }
}

/// The `Idempotency-Key` engine: one per node, shared by its guarded routes ([`crate::engine`]
/// says how it answers a request).
pub struct Engine {
    pub(crate) store: Arc<dyn RequestStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) cache: ReplayCache,
    pub(crate) waiters: Arc<Waiters>,
    pub(crate) config: EngineConfig,
    pub(crate) background: Background,
    pub(crate) unstored: Unstored,
    /// How often an upstream that cannot be reached is told in the log (once per route every 10 s).
    pub(crate) upstream_log: idem_core::throttle::Throttle,
    /// The keys this node is running now ([`crate::holding`]).
    pub(crate) holding: Holding,
}

impl Engine {
    pub fn new(store: Arc<dyn RequestStore>, clock: Arc<dyn Clock>, config: EngineConfig) -> Self {
        let cache = ReplayCache::new(config.cache_bytes);
        let background = Background::new(config.max_background_calls);
        let unstored = Unstored::new(config.max_unstored_bytes);
        let upstream_log = idem_core::throttle::Throttle::new(Duration::from_secs(10));
        let holding = Holding::default();
        Self { store, clock, cache, waiters: Arc::default(), config, background, unstored, upstream_log, holding }
    }
}

pub(crate) fn count(route: &RoutePolicy, outcome: Outcome) {
    idem_metrics::gateway::request(route.path.shared(), outcome);
}

/// A request's identity on its route: where its key lives, and what it must match.
pub(crate) struct Identity {
    pub id: ClaimId,
    pub fingerprint: Fingerprint,
}

/// A key this node took: its lease token, its fencing number, and when its lease began as far as
/// this node can tell (no later than the store counts it from).
pub(crate) struct Taken {
    pub token: LeaseToken,
    pub fence: u64,
    pub leased_at: Instant,
    /// The key is this node's until every clone goes.
    pub hold: Arc<Hold>,
}

/// Where the engine is in its life, as its background calls see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    /// Shutting down: no new background calls.
    Draining,
    /// The grace period is over: running calls stop, leaving their keys held.
    Abandoned,
}

/// The engine's background calls ([`crate::background`]): how many may run, and the phase they
/// watch.
pub(crate) struct Background {
    pub slots: Arc<Semaphore>,
    pub limit: u32,
    pub phase: watch::Sender<Phase>,
}

impl Background {
    pub fn new(limit: usize) -> Self {
        let limit = u32::try_from(limit.min(Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        Self { slots: Arc::new(Semaphore::new(limit as usize)), limit, phase: watch::Sender::new(Phase::Running) }
    }

    /// How many run now.
    pub fn running(&self) -> usize {
        (self.limit as usize).saturating_sub(self.slots.available_permits())
    }
}

/// Tasks keeping responses for the store at most; far more than memory allows of responses (each
/// at least a few hundred bytes).
pub(crate) const MAX_UNSTORED_TASKS: usize = 1 << 20;

/// The responses kept now for the store ([`crate::unstored`]): their bytes against the bound, and
/// the tasks drain waits for.
pub(crate) struct Unstored {
    pub bytes: AtomicUsize,
    pub limit: usize,
    pub tasks: Arc<Semaphore>,
    pub abandon: watch::Sender<bool>,
}

impl Unstored {
    pub fn new(limit: usize) -> Self {
        Self {
            bytes: AtomicUsize::new(0),
            limit,
            tasks: Arc::new(Semaphore::new(MAX_UNSTORED_TASKS)),
            abandon: watch::Sender::new(false),
        }
    }

    /// Takes `bytes` of the bound, if there is room.
    pub fn reserve(&self, bytes: usize) -> bool {
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|n| *n <= self.limit)
            })
            .is_ok()
    }
}
