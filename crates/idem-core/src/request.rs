//! Leased keys with a stored result: the record behind the gateway's `Idempotency-Key`s and the
//! operations API. A key is free, held by one lease token until `lease_until` (with opaque bytes
//! its begin attached), or completed with an opaque result until it expires. The store keeps the
//! lifecycle atomic; what the bytes mean (an HTTP response, a JSON value, a TTL to apply on
//! completion) is the caller's business.

use std::time::Duration;

use crate::gateway::Fingerprint;
use crate::{ClaimId, Timestamp};

/// A lease token: proof of holding a key. Only its holder may complete, release or extend the
/// key, so a request whose lease ran out cannot overwrite what its successor stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub [u8; 16]);

impl LeaseToken {
    /// A token no other begin will ever get: a per-process random seed (from the standard
    /// library's randomly keyed hasher) and a counter.
    pub fn generate() -> Self {
        use std::hash::{BuildHasher, Hasher};
        use std::sync::OnceLock;
        use std::sync::atomic::{AtomicU64, Ordering};
        static SEED: OnceLock<u64> = OnceLock::new();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let seed = *SEED.get_or_init(|| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.finish()
        });
        let mut token = [0; 16];
        token[..8].copy_from_slice(&seed.to_be_bytes());
        token[8..].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
        Self(token)
    }
}

/// A key to begin, as the store needs it.
#[derive(Debug, Clone)]
pub struct NewRequest {
    pub id: ClaimId,
    pub fingerprint: Fingerprint,
    pub lease: Duration,
    /// Kept with the key while it is held, and replaced by the result on completion (the
    /// operations API keeps the result's TTL here; the gateway keeps nothing).
    pub held: Vec<u8>,
}

/// What `begin_request` found.
#[derive(Debug, Clone)]
pub enum Begin {
    /// The key was free (new, expired, or its lease ran out): this caller holds it now.
    Started { token: LeaseToken, lease_expired: bool },
    /// Another caller holds the key.
    InFlight { same_fingerprint: bool, lease_until: Timestamp },
    /// The key completed earlier; its result is stored.
    Completed { same_fingerprint: bool, result: Vec<u8>, expires_at: Timestamp },
}

/// The live state of a key, as `peek_request` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestState {
    InFlight { fingerprint: Fingerprint, lease_until: Timestamp, held: Vec<u8> },
    Completed { fingerprint: Fingerprint, result: Vec<u8>, expires_at: Timestamp },
}

/// What `forget_request` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forget {
    /// A completed result was deleted; the key is free.
    Forgotten,
    /// The key is held by a running lease; nothing was changed.
    InFlight,
    /// Nothing live had that key.
    Absent,
}
