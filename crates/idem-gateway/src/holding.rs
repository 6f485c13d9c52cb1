//! The keys this node is running now: taken by one of its requests and not yet settled (the
//! upstream call running, in the background or not, or its answer kept until the store takes it).
//!
//! A request for such a key never asks the store: it is answered as a key held by someone else is
//! (`409`, a wait, or `422` for another request). The store cannot tell: once this node's lease has
//! run out (the node cut off from the store, or paused, past it) a begin of this node's own retry
//! would take the key over and run the request a second time while the first still runs here — and
//! the first's answer, stored when the store is back (a lease that ran out is still its holder's),
//! would have settled the key with no second run at all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use idem_core::ClaimId;
use idem_core::gateway::Fingerprint;

/// The keys held here, with their requests' fingerprints.
#[derive(Default)]
pub(crate) struct Holding {
    keys: Arc<Mutex<HashMap<ClaimId, Fingerprint>>>,
}

/// One key held here; released from [`Holding`] when the last clone goes (the request settled, or
/// was abandoned and left to its lease).
pub(crate) struct Hold {
    keys: Arc<Mutex<HashMap<ClaimId, Fingerprint>>>,
    id: ClaimId,
}

impl Holding {
    /// Records that this node took `id` for a request with `fingerprint`.
    pub fn hold(&self, id: ClaimId, fingerprint: Fingerprint) -> Arc<Hold> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).insert(id, fingerprint);
        Arc::new(Hold { keys: Arc::clone(&self.keys), id })
    }

    /// The fingerprint of the request running `id` here, if one is.
    pub fn running(&self, id: &ClaimId) -> Option<Fingerprint> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).get(id).copied()
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_held_while_a_hold_on_it_lives() {
        let holding = Holding::default();
        let id = ClaimId([1; 32]);
        let hold = holding.hold(id, [2; 32]);
        let kept = Arc::clone(&hold);
        assert_eq!(holding.running(&id), Some([2; 32]));
        drop(hold);
        assert_eq!(holding.running(&id), Some([2; 32]), "a response kept for the store still holds it");
        drop(kept);
        assert_eq!(holding.running(&id), None);
    }
}
