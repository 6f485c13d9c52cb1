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

/// A change to one key whatever it holds, made only if [`UpdateWhen`] holds of the key as it is,
/// atomically with every claim, update and delete of the same key: what Redis's plain `SET`,
/// `SETEX`, `EXPIRE`, `PERSIST`, `GETDEL` and its libraries' compare-and-delete scripts do.
/// Claiming, where the first writer wins, stays [`ClaimStore::claim`](crate::ClaimStore::claim).
#[derive(Debug, Clone)]
pub struct ClaimUpdate {
    pub parts: Parts,
    pub when: UpdateWhen,
    pub change: ClaimChange,
}

/// What an update asks of the key as it is (an expired key is absent).
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateWhen {
    /// Whatever it holds, nothing included.
    Always,
    /// The key is live.
    Live,
    /// The key is live and expires (Redis's `XX` for an expiry).
    Expiring,
    /// The key is live and never expires (Redis's `NX` for an expiry).
    Lasting,
    /// The key is live and expires before this instant (Redis's `GT`: the new expiry is later; a
    /// key that never expires is never before).
    ExpiresBefore(Timestamp),
    /// The key is live and expires after this instant, or never (Redis's `LT`).
    ExpiresAfter(Timestamp),
    /// The key is live and expires, after this instant (Redis's `XX LT`).
    ExpiringAfter(Timestamp),
    /// The key is live and its data is exactly this JSON text, as stored (compare-and-set).
    DataIs(Option<String>),
}

/// What an update does when its condition holds.
#[derive(Debug, Clone)]
pub enum ClaimChange {
    /// Sets the data, the expiry, or both; what is [`Keep`] stays as the key has it (nothing, on
    /// a key created). New data makes a new claim: made now, without the client token of the one
    /// it replaces. An expiry not after now deletes the key.
    Put {
        data: Keep<Option<Box<RawValue>>>,
        expires_at: Keep<Option<Timestamp>>,
    },
    Delete,
}

/// A field an update sets, or keeps as it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Keep<T> {
    Keep,
    Set(T),
}

/// What an update answers: whether its condition held (and the change was made), and the key's
/// live record before it, if any.
#[derive(Debug, Clone)]
pub struct UpdateOutcome {
    pub applied: bool,
    pub before: Option<ClaimRecord>,
}

/// A key's live record, as a store holds it, for [`ClaimUpdate::decide`].
#[derive(Debug, Clone, Copy)]
pub struct Live<'a> {
    pub data: Option<&'a str>,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
}

/// What a store writes for an update whose condition held.
#[derive(Debug, Clone)]
pub enum Decided {
    /// The key's new record. Data kept is the record's it replaces (none on a key created), as is
    /// its client token; new data comes without one.
    Write { data: Keep<Option<Box<RawValue>>>, created_at: Timestamp, expires_at: Option<Timestamp> },
    /// The key is removed (nothing to do when it is absent already).
    Delete,
}

impl UpdateWhen {
    /// Whether the condition holds of `live` (`None`: the key is absent or expired).
    pub fn holds(&self, live: Option<Live<'_>>) -> bool {
        let Some(live) = live else { return *self == UpdateWhen::Always };
        match self {
            UpdateWhen::Always | UpdateWhen::Live => true,
            UpdateWhen::Expiring => live.expires_at.is_some(),
            UpdateWhen::Lasting => live.expires_at.is_none(),
            UpdateWhen::ExpiresBefore(at) => live.expires_at.is_some_and(|e| e < *at),
            UpdateWhen::ExpiresAfter(at) => live.expires_at.is_none_or(|e| e > *at),
            UpdateWhen::ExpiringAfter(at) => live.expires_at.is_some_and(|e| e > *at),
            UpdateWhen::DataIs(data) => live.data == data.as_deref(),
        }
    }
}

impl ClaimUpdate {
    /// What to write, decided on the key's live record at `now`; `None` when the condition does
    /// not hold (nothing changes). Every store decides with this, so that they answer alike.
    pub fn decide(&self, live: Option<Live<'_>>, now: Timestamp) -> Option<Decided> {
        if !self.when.holds(live) {
            return None;
        }
        let ClaimChange::Put { data, expires_at } = &self.change else { return Some(Decided::Delete) };
        let expires_at = match expires_at {
            Keep::Set(at) => *at,
            Keep::Keep => live.and_then(|l| l.expires_at),
        };
        if expires_at.is_some_and(|at| at <= now) {
            return Some(Decided::Delete);
        }
        let created_at = match data {
            Keep::Set(_) => now,
            Keep::Keep => live.map_or(now, |l| l.created_at),
        };
        Some(Decided::Write { data: data.clone(), created_at, expires_at })
    }
}
