//! Wake-ups for duplicates that wait (`in_flight = "wait"`, an operation's `wait_seconds`): the
//! request that holds a key wakes every waiter of that key when it completes or releases it, so
//! that on one node nobody polls the store. (Waiters still look again now and then, for a holder
//! on another node.) [`Wait`] is the one waiting loop's state, shared by the gateway and the
//! Operations API: subscribe before each look at the store, then wait for a wake-up, the next
//! look, or the deadline. A waiter is never told a key is free because a timer ran out: after every
//! wait it asks the store again, which answers for the key as it is.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::ClaimId;
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tokio::time::Instant;

/// How long a waiter waits at most before it asks the store again, woken or not: a holder on
/// another node wakes it only through the store's signals, which may be lost (and behind a
/// transaction pooler without `direct_url` never come).
pub const LOOK_AGAIN: Duration = Duration::from_secs(1);

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

/// One begin's waiting for a key's holder, until a deadline.
pub struct Wait {
    waiters: Arc<Waiters>,
    id: ClaimId,
    deadline: Instant,
    _subscription: Option<Subscription>,
}

/// A wake-up registered before a look at the store (so that one in between is not lost).
pub type Armed = Option<Pin<Box<OwnedNotified>>>;

impl Wait {
    /// Waits for up to `wait` in all (zero: never waits).
    pub fn new(waiters: &Arc<Waiters>, id: ClaimId, wait: Duration) -> Self {
        let subscription = (!wait.is_zero()).then(|| Subscription { waiters: Arc::clone(waiters), id });
        Self { waiters: Arc::clone(waiters), id, deadline: Instant::now() + wait, _subscription: subscription }
    }

    /// Registers for the next wake-up; call it before each look at the store.
    pub fn arm(&self) -> Armed {
        self._subscription.as_ref()?;
        let mut woken = Box::pin(self.waiters.subscribe(&self.id).notified_owned());
        woken.as_mut().enable();
        Some(woken)
    }

    /// After the store said the key is held: waits to be woken, or at most `look_again`, or until
    /// the deadline. `false` when there is no time left to wait (the caller answers now).
    pub async fn until_next_look(&self, armed: Armed, look_again: Duration) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let Some(woken) = armed.filter(|_| !left.is_zero()) else { return false };
        let _ = tokio::time::timeout(left.min(look_again), woken).await;
        true
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
