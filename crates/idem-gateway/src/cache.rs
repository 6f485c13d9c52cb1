//! The replay cache: recently completed responses kept in memory so that a replay costs no store
//! round trip. Bounded by bytes (oldest entries go first) and holding only completed responses —
//! never in-flight state, which only the store may answer for. Entries carry their own expiry, so
//! an expired response is never replayed from here either.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use idem_core::gateway::{Fingerprint, StoredResponse};
use idem_core::{ClaimId, Timestamp};

#[derive(Debug)]
pub struct Cached {
    pub fingerprint: Fingerprint,
    pub response: Arc<StoredResponse>,
    pub expires_at: Timestamp,
}

pub struct ReplayCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<ClaimId, Arc<Cached>>,
    order: VecDeque<ClaimId>,
    bytes: usize,
}

/// What an entry costs beyond its response's bytes: the map and queue slots (at their average
/// load), the `Cached` and `StoredResponse` allocations and the allocator's rounding. Counting only
/// the response bytes let a 64 MiB cache of small responses hold about 230 MiB of heap
/// (`idem-bench gateway`, whose upstream answers 13 bytes with 3 headers: about 1 KiB each).
const ENTRY_OVERHEAD: usize = 512;
/// What each stored header costs beyond its name and value bytes: its two allocations and its
/// slot in the headers' vector.
const HEADER_OVERHEAD: usize = 112;

/// The memory an entry holds, as the capacity counts it.
fn cost(response: &StoredResponse) -> usize {
    response.weight() + ENTRY_OVERHEAD + response.headers.len() * HEADER_OVERHEAD
}

impl ReplayCache {
    pub fn new(capacity_bytes: usize) -> Self {
        Self { capacity: capacity_bytes, inner: Mutex::new(Inner::default()) }
    }

    pub fn get(&self, id: &ClaimId, now: Timestamp) -> Option<Arc<Cached>> {
        let inner = self.inner.lock().ok()?;
        inner.entries.get(id).filter(|c| c.expires_at > now).cloned()
    }

    pub fn insert(&self, id: ClaimId, cached: Cached) {
        let weight = cost(&cached.response);
        if weight > self.capacity {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else { return };
        if let Some(old) = inner.entries.insert(id, Arc::new(cached)) {
            inner.bytes -= cost(&old.response);
        } else {
            inner.order.push_back(id);
        }
        inner.bytes += weight;
        while inner.bytes > self.capacity {
            let Some(oldest) = inner.order.pop_front() else { break };
            if let Some(gone) = inner.entries.remove(&oldest) {
                inner.bytes -= cost(&gone.response);
            }
        }
    }

    /// Forgets a response (one that was kept for the store and then lost its lease).
    pub fn remove(&self, id: &ClaimId) {
        let Ok(mut inner) = self.inner.lock() else { return };
        if let Some(gone) = inner.entries.remove(id) {
            inner.bytes -= cost(&gone.response);
            inner.order.retain(|kept| kept != id);
        }
    }

    pub fn bytes(&self) -> usize {
        self.inner.lock().map(|i| i.bytes).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: usize, expires_at: i64) -> Cached {
        let response = Arc::new(StoredResponse { status: 200, headers: vec![], body: vec![b'x'; body] });
        Cached { fingerprint: [0; 32], response, expires_at: Timestamp(expires_at) }
    }

    #[test]
    fn bounded_by_bytes_oldest_out_first() {
        let each = cost(&entry(84, 1_000).response);
        let cache = ReplayCache::new(3 * each);
        for i in 0..5u8 {
            cache.insert(ClaimId([i; 32]), entry(84, 1_000));
        }
        assert_eq!(cache.bytes(), 3 * each, "three entries fit");
        assert!(cache.get(&ClaimId([0; 32]), Timestamp(0)).is_none(), "the oldest went first");
        assert!(cache.get(&ClaimId([4; 32]), Timestamp(0)).is_some());
        cache.insert(ClaimId([9; 32]), entry(10 * each, 1_000));
        assert!(cache.get(&ClaimId([9; 32]), Timestamp(0)).is_none(), "too big to cache at all");
    }

    #[test]
    fn never_answers_past_expiry() {
        let cache = ReplayCache::new(1_000_000);
        cache.insert(ClaimId([1; 32]), entry(1, 100));
        assert!(cache.get(&ClaimId([1; 32]), Timestamp(99)).is_some());
        assert!(cache.get(&ClaimId([1; 32]), Timestamp(100)).is_none());
    }

    #[test]
    fn small_entries_are_charged_their_overhead() {
        let mut response = StoredResponse { status: 201, headers: vec![], body: b"{}".to_vec() };
        response.headers.push(("content-type".into(), b"application/json".to_vec()));
        assert!(cost(&response) >= response.weight() + ENTRY_OVERHEAD + HEADER_OVERHEAD);
    }
}
