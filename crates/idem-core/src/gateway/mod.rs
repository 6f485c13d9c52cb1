//! The pure logic of the `Idempotency-Key` gateway: parsing the key, fingerprinting requests,
//! matching routes, naming a request's key in the store, and deciding what to keep.

pub mod fingerprint;
pub mod idempotency_key;
pub mod response;
pub mod route;

pub use fingerprint::{Fingerprint, fingerprint};
pub use idempotency_key::{IdempotencyKey, parse_idempotency_key};
pub use response::StoredResponse;
pub use route::{InFlightPolicy, KeyPolicy, PathPattern};

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::{ClaimId, Timestamp};

/// Where a request's key lives in the store: one id per (route, caller scope, key). The scope
/// values (an `Authorization` header, say) are hashed, never stored.
pub fn request_id(route: &str, scope: &[&[u8]], key: &IdempotencyKey) -> ClaimId {
    let mut scope_hash = Sha256::new();
    for value in scope {
        scope_hash.update((value.len() as u64).to_be_bytes());
        scope_hash.update(value);
    }
    let mut id = Sha256::new();
    id.update(route.as_bytes());
    id.update([0]);
    id.update(scope_hash.finalize());
    id.update([0]);
    id.update(key.as_str().as_bytes());
    ClaimId(id.finalize().into())
}

/// A lease token: proof of holding a key. Only its holder may complete or release the key, so a
/// request whose lease ran out cannot overwrite what its successor stored.
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

/// What `begin_request` found.
#[derive(Debug, Clone)]
pub enum Begin {
    /// The key was free (new, expired, or its lease ran out): this request holds it now.
    Started { token: LeaseToken, lease_expired: bool },
    /// Another request holds the key.
    InFlight { same_fingerprint: bool, lease_until: Timestamp },
    /// The key completed earlier; its response is stored.
    Completed { same_fingerprint: bool, response: StoredResponse, expires_at: Timestamp },
}

/// The state of a key, as `peek_request` reads it.
#[derive(Debug, Clone)]
pub enum RequestState {
    InFlight { fingerprint: Fingerprint, lease_until: Timestamp },
    Completed { fingerprint: Fingerprint, response: StoredResponse, expires_at: Timestamp },
}

/// A request to begin, as the store needs it.
#[derive(Debug, Clone)]
pub struct NewRequest {
    pub id: ClaimId,
    pub fingerprint: Fingerprint,
    pub lease: Duration,
}

/// What happens to a key once the upstream answered with `status`: a response worth replaying is
/// kept; a transient failure (5xx unless the route stores them, 408, 425, 429) releases the key so
/// that a retry executes again.
pub fn keeps_response(status: u16, store_5xx: bool) -> bool {
    match status {
        408 | 425 | 429 => false,
        500..=599 => store_5xx,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_failures_release_the_key() {
        for status in [200, 201, 204, 301, 400, 404, 409, 422] {
            assert!(keeps_response(status, false), "{status} is kept");
        }
        for status in [408, 425, 429, 500, 502, 503, 504] {
            assert!(!keeps_response(status, false), "{status} is released");
        }
        assert!(keeps_response(500, true), "store_5xx keeps server errors");
        assert!(!keeps_response(429, true), "but never 429");
    }

    #[test]
    fn scope_separates_callers_and_routes() {
        let key = parse_idempotency_key("abc").expect("valid");
        let alice = request_id("/orders", &[b"Bearer alice"], &key);
        assert_ne!(alice, request_id("/orders", &[b"Bearer bob"], &key));
        assert_ne!(alice, request_id("/refunds", &[b"Bearer alice"], &key));
        assert_eq!(alice, request_id("/orders", &[b"Bearer alice"], &key));
        // Value boundaries count: ["ab", "c"] is not ["a", "bc"].
        assert_ne!(request_id("/o", &[b"ab", b"c"], &key), request_id("/o", &[b"a", b"bc"], &key));
    }
}
