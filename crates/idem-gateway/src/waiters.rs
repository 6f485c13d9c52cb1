//! Wake-ups for duplicates that wait (`in_flight = "wait"`): the request that holds a key wakes
//! every waiter of that key when it completes or releases it, so that on one node nobody polls the
//! store. (Waiters still re-check now and then, for a first request running on another node.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use idem_core::ClaimId;
use tokio::sync::Notify;

#[derive(Default)]
pub struct Waiters {
    keys: Mutex<HashMap<ClaimId, Arc<Notify>>>,
}

impl Waiters {
    /// The notifier of a key; register interest (`Notified::enable`) before checking the store so
    /// that a wake-up in between is not lost.
    pub fn subscribe(&self, id: &ClaimId) -> Arc<Notify> {
        let mut keys = self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Arc::clone(keys.entry(*id).or_default())
    }

    /// Wakes every waiter of a key and forgets the key.
    pub fn wake(&self, id: &ClaimId) {
        let notify = self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(id);
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
    }
}

impl Waiters {
    /// Forgets a key nobody waits on any more (the map holds its only notifier).
    pub fn forget_idle(&self, id: &ClaimId) {
        let mut keys = self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if keys.get(id).is_some_and(|notify| Arc::strong_count(notify) == 1) {
            keys.remove(id);
        }
    }

    /// The number of keys with waiters, for tests.
    pub fn len(&self) -> usize {
        self.keys.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Held by whoever may wait on a key: when it goes, the key is forgotten unless someone else
/// still waits. Without it, a key that is answered from the store (completed earlier, or by
/// another node) and never woken here would stay in the map for good.
pub struct Subscription {
    pub waiters: Arc<Waiters>,
    pub id: ClaimId,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.waiters.forget_idle(&self.id);
    }
}

/// Wakes a key's waiters when dropped: however a held request ends (stored, released, failed,
/// abandoned), its waiters look again.
pub struct WakeOnDrop {
    pub waiters: Arc<Waiters>,
    pub id: ClaimId,
}

impl Drop for WakeOnDrop {
    fn drop(&mut self) {
        self.waiters.wake(&self.id);
    }
}
