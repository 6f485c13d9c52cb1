//! The operations API's pure logic (docs/reference/api.md#operations): a piece of work made to
//! happen once, as a leased key in a [`RequestStore`](crate::RequestStore).
//!
//! - An operation's public `id` is its key's claim id (a client computes it locally); its key in
//!   the store is derived from the namespace and that id, so operations never meet claims or
//!   gateway keys.
//! - `request` is fingerprinted as canonical JSON; a begin without one matches any, and so does a
//!   record begun without one.
//! - While held, the store keeps the result's TTL (it counts from completion); once completed, it
//!   keeps the result with when it completed and which token completed it (a digest), so that a
//!   second `complete` by the same token answers the same result.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::gateway::Fingerprint;
use crate::request::LeaseToken;
use crate::{ClaimId, Namespace, Timestamp};

/// The fingerprint of a begin that gave no `request`: it matches any.
pub const ANY_REQUEST: Fingerprint = [0; 32];

/// Where an operation lives in the store.
pub fn store_id(ns: &Namespace, id: &ClaimId) -> ClaimId {
    let mut hash = Sha256::new();
    hash.update(b"operation");
    hash.update([0]);
    hash.update(ns.as_str().as_bytes());
    hash.update([0]);
    hash.update(id.0);
    ClaimId(hash.finalize().into())
}

/// The fingerprint of a begin's `request` (its JSON text): SHA-256 of its canonical form, so key
/// order and whitespace do not matter. `None`: [`ANY_REQUEST`].
pub fn request_fingerprint(request: Option<&str>) -> Fingerprint {
    let Some(text) = request else { return ANY_REQUEST };
    let canonical = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_vec(&v).ok())
        .unwrap_or_else(|| text.as_bytes().to_vec());
    let mut hash: Fingerprint = Sha256::digest(&canonical).into();
    if hash == ANY_REQUEST {
        hash[0] = 1; // a real request never reads as "any"
    }
    hash
}

/// Whether two fingerprints name the same request (either one "any" matches everything).
pub fn same_request(a: &Fingerprint, b: &Fingerprint) -> bool {
    *a == ANY_REQUEST || *b == ANY_REQUEST || a == b
}

/// The token as clients see it: 32 lowercase hex digits.
pub fn token_text(token: &LeaseToken) -> String {
    crate::key::hex(&token.0)
}

pub fn parse_token(text: &str) -> Option<LeaseToken> {
    if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut token = [0u8; 16];
    for (i, byte) in token.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(LeaseToken(token))
}

/// What the store keeps with a held operation: the TTL its result will get.
pub fn encode_held(ttl: Duration) -> Vec<u8> {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).to_be_bytes().to_vec()
}

pub fn decode_held(bytes: &[u8]) -> Option<Duration> {
    Some(Duration::from_millis(u64::from_be_bytes(bytes.try_into().ok()?)))
}

/// A completed operation as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub completed_at: Timestamp,
    /// Which token completed it (a digest: the token itself is never kept).
    pub completed_by: [u8; 16],
    /// The result's JSON text; `None` when the work completed without one.
    pub result: Option<String>,
}

const VERSION: u8 = 1;

/// Stored bytes that do not read as an [`Outcome`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a stored operation result is malformed")]
pub struct Malformed;

impl Outcome {
    pub fn new(completed_at: Timestamp, token: &LeaseToken, result: Option<String>) -> Self {
        Self { completed_at, completed_by: token_digest(token), result }
    }

    pub fn completed_by(&self, token: &LeaseToken) -> bool {
        self.completed_by == token_digest(token)
    }

    /// `1 | completed_at i64 | token digest [16] | has result u8 | result JSON`.
    pub fn encode(&self) -> Vec<u8> {
        let result = self.result.as_deref().unwrap_or("");
        let mut out = Vec::with_capacity(26 + result.len());
        out.push(VERSION);
        out.extend_from_slice(&self.completed_at.millis().to_be_bytes());
        out.extend_from_slice(&self.completed_by);
        out.push(u8::from(self.result.is_some()));
        out.extend_from_slice(result.as_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, Malformed> {
        if bytes.len() < 26 || bytes[0] != VERSION {
            return Err(Malformed);
        }
        let completed_at = Timestamp(i64::from_be_bytes(bytes[1..9].try_into().map_err(|_| Malformed)?));
        let completed_by: [u8; 16] = bytes[9..25].try_into().map_err(|_| Malformed)?;
        let text = std::str::from_utf8(&bytes[26..]).map_err(|_| Malformed)?;
        let result = (bytes[25] == 1).then(|| text.to_owned());
        Ok(Self { completed_at, completed_by, result })
    }
}

fn token_digest(token: &LeaseToken) -> [u8; 16] {
    let digest = Sha256::digest(token.0);
    let mut out = [0; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn operations_live_apart_per_namespace_and_from_claims() {
        let id = crate::Parts::single("order-1".into()).expect("valid").id();
        let a = store_id(&Namespace::new("orders").expect("valid"), &id);
        assert_ne!(a, id, "not the claim's id");
        assert_ne!(a, store_id(&Namespace::new("refunds").expect("valid"), &id));
        assert_eq!(a, store_id(&Namespace::new("orders").expect("valid"), &id));
    }

    #[test]
    fn requests_compare_as_canonical_json_and_absence_matches_any() {
        let a = request_fingerprint(Some(r#"{"amount": 5, "currency": "EUR"}"#));
        assert_eq!(a, request_fingerprint(Some(r#"{"currency":"EUR","amount":5}"#)));
        let b = request_fingerprint(Some(r#"{"amount": 6, "currency": "EUR"}"#));
        assert!(!same_request(&a, &b));
        assert!(same_request(&a, &ANY_REQUEST) && same_request(&ANY_REQUEST, &b));
        assert_ne!(request_fingerprint(Some("null")), ANY_REQUEST, "an explicit null is a request");
    }

    #[test]
    fn tokens_round_trip_as_hex() {
        let token = LeaseToken::generate();
        assert_eq!(parse_token(&token_text(&token)), Some(token));
        for bad in ["", "xyz", &"0".repeat(31), &"g".repeat(32)] {
            assert_eq!(parse_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn held_ttl_round_trips() {
        assert_eq!(decode_held(&encode_held(Duration::from_secs(86_400))), Some(Duration::from_secs(86_400)));
        assert_eq!(decode_held(b""), None);
    }

    proptest! {
        #[test]
        fn outcomes_round_trip(at in any::<i64>(), result in proptest::option::of("[ -~]{0,40}")) {
            let token = LeaseToken::generate();
            let outcome = Outcome::new(Timestamp(at), &token, result);
            let back = Outcome::decode(&outcome.encode()).expect("decodes");
            prop_assert!(back.completed_by(&token));
            prop_assert_eq!(back, outcome);
        }
    }

    #[test]
    fn malformed_outcomes_are_errors() {
        let encoded = Outcome::new(Timestamp(1), &LeaseToken::generate(), Some("{}".into())).encode();
        for cut in 0..26 {
            assert!(Outcome::decode(&encoded[..cut]).is_err());
        }
    }
}
