//! What every `/v1` handler shares: the stores, the clock it keeps time by, the parsed config, the
//! accepted tokens, the delivery worker's wake-up, and the operations API's waiters.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use idem_core::{Clock, Namespace, Stores};
use idem_gateway::waiters::Waiters;
use tokio::sync::Notify;

use super::auth::Tokens;
use crate::config::Config;

/// Cloned for every request (each extractor and middleware takes its own), so it is one `Arc`:
/// a clone is one reference count, not one per field.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub stores: Stores,
    /// The store's clock: event intake checks signature timestamps against it.
    pub clock: Arc<dyn Clock>,
    pub config: Arc<Config>,
    pub tokens: Arc<Tokens>,
    /// `limits.max_body_bytes`: the one request-body limit.
    pub max_body_bytes: usize,
    /// Wakes the delivery worker when new work is queued.
    pub delivery_wake: Arc<Notify>,
    /// Begins waiting on operations held by someone else, woken when they complete or release.
    pub waiters: Arc<Waiters>,
    /// The dashboard overview's counts, shared by every tab that shows them.
    pub overview_counts: super::tally::OverviewCounts,
    /// Unconfigured namespaces already logged (each is logged once). Read on every request in
    /// such a namespace, written once per namespace.
    unconfigured: Arc<RwLock<HashSet<String>>>,
}

impl AppState {
    pub fn new(
        config: Config,
        stores: Stores,
        clock: Arc<dyn Clock>,
        delivery_wake: Arc<Notify>,
        waiters: Arc<Waiters>,
    ) -> Self {
        let tokens = Arc::new(Tokens::new(&config.auth));
        let max_body_bytes = config.limits.max_body_bytes;
        let unconfigured = Arc::default();
        Self(Arc::new(Shared {
            stores,
            clock,
            config: Arc::new(config),
            tokens,
            max_body_bytes,
            delivery_wake,
            waiters,
            overview_counts: super::tally::OverviewCounts::default(),
            unconfigured,
        }))
    }
}

impl Shared {
    /// Whether `ns` may be used: a configured namespace always; another one unless
    /// `[namespaces] strict` is set, and then its first use is logged, once.
    pub fn admits(&self, ns: &Namespace) -> bool {
        if self.config.namespaces.contains_key(ns.as_str()) {
            return true;
        }
        if self.config.namespaces.strict {
            return false;
        }
        let seen = self.unconfigured.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Bounded: past this many, the log would say nothing new.
        if seen.contains(ns.as_str()) || seen.len() >= 10_000 {
            return true;
        }
        drop(seen);
        let mut seen = self.unconfigured.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if seen.insert(ns.as_str().to_owned()) {
            tracing::info!(
                namespace = ns.as_str(),
                "first use of a namespace with no [namespaces] table: its records get no default TTL"
            );
        }
        true
    }
}
