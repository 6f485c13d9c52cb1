//! Claims: what a client asks to record, what the store keeps, and what a claim attempt answers.

use std::time::Duration;

use serde_json::value::RawValue;

use crate::{ClaimId, ClientToken, Namespace, Parts, Timestamp};

/// Largest serialized `data` a claim may carry.
pub const MAX_DATA_BYTES: usize = 64 * 1024;

/// A claim to make. The TTL is already resolved (the request's, else the namespace default).
#[derive(Debug, Clone)]
pub struct NewClaim {
    pub parts: Parts,
    pub data: Option<Box<RawValue>>,
    pub ttl: Option<Duration>,
    /// The caller's token for this request: a retry with the same token is told it won a claim
    /// that its earlier attempt stored ([`ClientToken`]).
    pub client: Option<ClientToken>,
    /// When the claim was made, for a record imported from another store (never after now): its
    /// TTL counts from then. `None`: now.
    pub created_at: Option<Timestamp>,
}

impl NewClaim {
    /// When the claim is made, claimed at `now`, and when it expires.
    pub fn times(&self, now: Timestamp) -> (Timestamp, Option<Timestamp>) {
        let created = self.created_at.map_or(now, |at| at.min(now));
        (created, self.ttl.map(|ttl| created.plus(ttl)))
    }
}

/// A stored claim.
#[derive(Debug, Clone)]
pub struct ClaimRecord {
    pub namespace: Namespace,
    pub id: ClaimId,
    pub parts: Parts,
    pub data: Option<Box<RawValue>>,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
}

impl ClaimRecord {
    /// An expired claim behaves exactly as an absent one.
    pub fn is_live(&self, now: Timestamp) -> bool {
        self.expires_at.is_none_or(|at| at > now)
    }
}

/// The answer to one claim: `claimed` is true for exactly one of any number of concurrent claims
/// of a key (and again for that one's retries, when they carry its client token); the record is
/// the new one, or the existing one unchanged.
#[derive(Debug, Clone)]
pub struct ClaimOutcome {
    pub claimed: bool,
    pub record: ClaimRecord,
}
