//! Leased keys with a stored result: the record behind the gateway's `Idempotency-Key`s and the
//! operations API. A key is free, held by one lease token until `lease_until` (with opaque bytes
//! its begin attached), or completed with an opaque result until it expires. The store keeps the
//! lifecycle atomic; what the bytes mean (an HTTP response, a JSON value, a TTL to apply on
//! completion) is the caller's business.
//!
//! A lease token is good while its lease is the key's last: a lease that ran out frees the key for
//! the next begin, but until a begin has taken it, its holder may still complete, extend or
//! release it (a fencing token's rule, as Chubby's sequencers: a holder's write is good while no
//! newer holder exists, whether or not its time ran out). So an answer that comes back late, from
//! an upstream slower than the lease or over a path cut off for longer, is still kept when no one
//! ran the key again. Stores keep a lease that ran out for [`ENDED_LEASE_KEPT`] before sweeping it.

use std::time::Duration;

use crate::gateway::Fingerprint;
use crate::{ClaimId, ClientToken, Timestamp};

/// A lease token: proof of holding a key. Only its holder may complete, release or extend the
/// key, so a request whose lease ran out cannot overwrite what its successor stored, and a client
/// of the operations API cannot work out another's token from its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub [u8; 16]);

impl LeaseToken {
    /// 128 bits from a cryptographically secure generator seeded by the OS (`rand`'s thread-local
    /// ChaCha): unguessable, and no other begin on any node will get the same.
    pub fn generate() -> Self {
        use rand::RngCore;
        let mut token = [0; 16];
        rand::rng().fill_bytes(&mut token);
        Self(token)
    }
}

/// How long a store keeps the record of a lease that ran out (no begin having taken the key
/// since) before its sweeper deletes it: as long as its holder may still complete or release it.
/// An hour is far past any upstream call (`max_call` defaults to ten minutes) and any outage a
/// node rides out holding an unstored answer.
pub const ENDED_LEASE_KEPT: Duration = Duration::from_secs(3600);

/// Until when (milliseconds) a store keeps a key's record: a result until its TTL ends, a lease
/// [`ENDED_LEASE_KEPT`] past its end.
pub fn kept_until(completed: bool, until: i64) -> i64 {
    match completed {
        true => until,
        false => until.saturating_add(ENDED_LEASE_KEPT.as_millis() as i64),
    }
}

/// 16 bytes no other call in any process will get, in the order of the calls within this one: a
/// per-process random seed (from the standard library's randomly keyed hasher) and a counter. For
/// identifiers that must be unique and sort by creation (receipt ids), not for secrets.
pub fn sequence() -> [u8; 16] {
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
    let mut unique = [0; 16];
    unique[..8].copy_from_slice(&seed.to_be_bytes());
    unique[8..].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    unique
}

/// A key to begin, as the store needs it.
#[derive(Debug, Clone)]
pub struct NewRequest {
    pub id: ClaimId,
    pub fingerprint: Fingerprint,
    pub lease: Duration,
    /// How long the result is meant to be kept once completed (the gateway route's or the
    /// operation's TTL). Only a hint for the store's sweep (PostgreSQL plans when to look at the
    /// row again from it, so that completing it changes no indexed column): the TTL given at
    /// completion decides how long the key is kept.
    pub keep: Duration,
    /// Kept with the key while it is held, and replaced by the result on completion (the
    /// operations API keeps the result's TTL here; the gateway keeps nothing).
    pub held: Vec<u8>,
    /// The caller's token for this begin: a retry with the same token (and request) that finds
    /// the key held by this begin's lease gets that lease back instead of `Held`.
    pub client: Option<ClientToken>,
}

/// What `begin_request` found.
#[derive(Debug, Clone)]
pub enum Begin {
    /// The key was free (new, expired, or its lease ran out): this caller holds it now, until
    /// `lease_until` (as stored: what any later begin or read of the key will report).
    ///
    /// `fence` is the lease's fencing number: it grows with each takeover of a key (a later
    /// holder of the same key always has a greater one), so that whatever the holder acts on can
    /// refuse a call from an older holder that was paused or cut off past its lease.
    Started { token: LeaseToken, lease_until: Timestamp, lease_expired: bool, fence: u64 },
    /// Another caller holds the key.
    Held { same_fingerprint: bool, lease_until: Timestamp },
    /// The key completed earlier; its result is stored.
    Completed { same_fingerprint: bool, result: Vec<u8>, expires_at: Timestamp },
}

/// The live state of a key, as `peek_request` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestState {
    Held { fingerprint: Fingerprint, lease_until: Timestamp, held: Vec<u8> },
    Completed { fingerprint: Fingerprint, result: Vec<u8>, expires_at: Timestamp },
}

/// A key's record as a begin finds it in the store (live or not: [`decide_begin`] judges that).
#[derive(Debug, Clone)]
pub enum Found {
    Held { fingerprint: Fingerprint, until: Timestamp, token: LeaseToken, client: Option<ClientToken>, fence: u64 },
    Completed { fingerprint: Fingerprint, until: Timestamp, result: Vec<u8> },
}

/// What a begin does with the key it found.
#[derive(Debug, Clone)]
pub enum Decision {
    /// Someone holds the key, or it completed: this is the answer; nothing changes.
    Answer(Begin),
    /// The key is free: the caller takes it (with a new token and lease). `lease_expired`: it was
    /// held by a lease that ran out (its holder died, or gave up without releasing).
    Take { lease_expired: bool },
}

/// The one rule every store follows for a begin: a record still live at `now` answers it (in
/// flight, or completed with its result), saying whether the request's fingerprint is the same;
/// anything else (no record, a result past its TTL, a lease that ran out) leaves the key free.
/// A live lease taken by this very request (the same client token and fingerprint: a retry whose
/// first answer was lost) is given back to it as `Started`, with its token, end and fence.
pub fn decide_begin(
    found: Option<Found>,
    fingerprint: &Fingerprint,
    client: Option<ClientToken>,
    now: Timestamp,
) -> Decision {
    match found {
        Some(Found::Held { fingerprint: held, until, token, client: holder, fence })
            if until > now && held == *fingerprint && ClientToken::same(holder, client) =>
        {
            Decision::Answer(Begin::Started { token, lease_until: until, lease_expired: false, fence })
        }
        Some(Found::Held { fingerprint: held, until, .. }) if until > now => {
            Decision::Answer(Begin::Held { same_fingerprint: held == *fingerprint, lease_until: until })
        }
        Some(Found::Completed { fingerprint: held, until, result }) if until > now => {
            Decision::Answer(Begin::Completed { same_fingerprint: held == *fingerprint, result, expires_at: until })
        }
        Some(Found::Held { .. }) => Decision::Take { lease_expired: true },
        Some(Found::Completed { .. }) | None => Decision::Take { lease_expired: false },
    }
}

/// What `forget_request` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forget {
    /// A completed result was deleted; the key is free.
    Forgotten,
    /// The key is held by a running lease; nothing was changed.
    Held,
    /// Nothing live had that key.
    Absent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_share_nothing_a_holder_could_use_to_guess_another() {
        let tokens: Vec<[u8; 16]> = (0..2_000).map(|_| LeaseToken::generate().0).collect();
        let distinct: std::collections::HashSet<_> = tokens.iter().collect();
        assert_eq!(distinct.len(), tokens.len());
        // The earlier scheme (a per-process seed and a counter) kept 8 bytes fixed and 6 more
        // nearly so; random bytes take about 256 values each over 2,000 tokens.
        for i in 0..16 {
            let values: std::collections::HashSet<u8> = tokens.iter().map(|t| t[i]).collect();
            assert!(values.len() > 200, "byte {i} takes only {} values", values.len());
        }
    }

    #[test]
    fn a_begin_is_answered_by_a_live_record_and_takes_any_other() {
        let (same, other, now) = ([1; 32], [2; 32], Timestamp(1_000));
        let token = LeaseToken([9; 16]);
        let held =
            |until| Some(Found::Held { fingerprint: same, until: Timestamp(until), token, client: None, fence: 1 });
        let done = |until| Some(Found::Completed { fingerprint: same, until: Timestamp(until), result: b"r".to_vec() });
        let answer = |found, fp: &Fingerprint| match decide_begin(found, fp, None, now) {
            Decision::Answer(Begin::Held { same_fingerprint, lease_until }) => {
                format!("in flight {same_fingerprint} {}", lease_until.0)
            }
            Decision::Answer(Begin::Completed { same_fingerprint, result, expires_at }) => {
                format!("completed {same_fingerprint} {} {}", String::from_utf8_lossy(&result), expires_at.0)
            }
            Decision::Answer(Begin::Started { .. }) => "started".into(),
            Decision::Take { lease_expired } => format!("take {lease_expired}"),
        };
        let table: [(Option<Found>, &Fingerprint, &str); 8] = [
            (None, &same, "take false"),
            (held(1_001), &same, "in flight true 1001"),
            (held(1_001), &other, "in flight false 1001"),
            (held(1_000), &same, "take true"),
            (held(999), &other, "take true"),
            (done(2_000), &same, "completed true r 2000"),
            (done(2_000), &other, "completed false r 2000"),
            (done(1_000), &same, "take false"),
        ];
        for (found, fp, want) in table {
            let label = format!("{found:?}");
            assert_eq!(answer(found, fp), want, "{label}");
        }
    }

    #[test]
    fn a_retry_with_the_holders_client_token_gets_its_lease_back() {
        let (same, other, now) = ([1; 32], [2; 32], Timestamp(1_000));
        let mine = ClientToken::parse("mine").ok();
        let theirs = ClientToken::parse("theirs").ok();
        let token = LeaseToken([9; 16]);
        let held = |until, fingerprint| {
            Some(Found::Held { fingerprint, until: Timestamp(until), token, client: mine, fence: 7 })
        };
        let answer = |found, fp: &Fingerprint, client| match decide_begin(found, fp, client, now) {
            Decision::Answer(Begin::Started { token: t, lease_until, lease_expired, fence }) => {
                assert_eq!(t, token);
                format!("started {} {lease_expired} {fence}", lease_until.0)
            }
            Decision::Answer(Begin::Held { same_fingerprint, .. }) => format!("in flight {same_fingerprint}"),
            Decision::Answer(Begin::Completed { .. }) => "completed".into(),
            Decision::Take { lease_expired } => format!("take {lease_expired}"),
        };
        let table = [
            (held(1_001, same), &same, mine, "started 1001 false 7"),
            (held(1_001, same), &same, theirs, "in flight true"),
            (held(1_001, same), &same, None, "in flight true"),
            (held(1_001, same), &other, mine, "in flight false"),
            (held(1_000, same), &same, mine, "take true"),
        ];
        for (found, fp, client, want) in table {
            assert_eq!(answer(found, fp, client), want, "{client:?}");
        }
    }

    #[test]
    fn sequences_are_unique_and_in_call_order() {
        let (a, b) = (sequence(), sequence());
        assert_eq!(a[..8], b[..8], "one process, one seed");
        assert!(a < b);
    }
}
