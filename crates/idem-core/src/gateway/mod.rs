//! The pure logic of the `Idempotency-Key` gateway: parsing the key, fingerprinting requests,
//! normalising paths, matching routes, naming a request's key in the store, and deciding what to keep.

pub mod fingerprint;
pub mod idempotency_key;
pub mod path;
pub mod response;
pub mod route;

pub use fingerprint::{Fingerprint, fingerprint};
pub use idempotency_key::{IdempotencyKey, parse_idempotency_key};
pub use path::normalize as normalize_path;
pub use response::StoredResponse;
pub use route::{InFlightPolicy, KeyPolicy, PathCase, PathPattern};

use sha2::{Digest, Sha256};

use crate::ClaimId;

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
