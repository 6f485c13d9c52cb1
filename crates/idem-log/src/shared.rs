//! What the writer, the compactor and readers share — the index, the segments, the clock, the
//! space accounting — and the read path: a reader finds a record's place in the index and reads
//! it; when compaction retired the segment under it, it looks in the index again (the record has
//! moved, or gone), a bounded number of times.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU32;

use idem_core::request::{Begin, Decision, Found as KeyFound, NewRequest, decide_begin};
use idem_core::{ClaimId, ClaimOutcome, ClaimRecord, Clock, Namespace, NewClaim, Parts, StoreError, Timestamp};
use serde_json::value::RawValue;
use std::sync::Arc;

use crate::Space;
use crate::counts::Counts;
use crate::index::{self, ClaimEntry, Index, Slot, claim_tag, prefix_tag};
use crate::record::{ClaimRec, NEVER, Record, RequestRec};
use crate::segment::{self, Read};

/// What the writer, the compactor and readers share.
pub(crate) struct Shared {
    pub(crate) index: Index,
    pub(crate) segments: segment::Segments,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) space: Mutex<BTreeMap<u32, Space>>,
    /// The segment being appended to; older ones are sealed.
    pub(crate) head: AtomicU32,
    /// Live claims per namespace.
    pub(crate) counts: Mutex<Counts>,
    /// Retired segments whose files could not be deleted yet (the compactor tries again).
    pub(crate) doomed: Mutex<Vec<u32>>,
    /// [`LogOptions::preallocate`].
    pub(crate) preallocate: u64,
    /// The last fencing number handed to a begin (see [`Shared::next_fence`]).
    pub(crate) last_fence: std::sync::atomic::AtomicU64,
}

/// What looking a claim up found.
pub(crate) struct ClaimLookup {
    pub(crate) hit: Option<(Slot, ClaimEntry, ClaimRec)>,
    /// The tag's place in the main map belongs to another key (a new claim goes to the overflow).
    pub(crate) main_taken: bool,
}

impl Shared {
    /// A fencing number for a begin at `now` (milliseconds): greater than every one handed out
    /// since start-up and every one the log holds, and never below the clock in microseconds, so
    /// that it keeps growing across restarts too (where a key's records may have been swept).
    pub(crate) fn next_fence(&self, now: i64) -> u64 {
        use std::sync::atomic::Ordering;
        let floor = u64::try_from(now).unwrap_or(0).saturating_mul(1000);
        let mut last = self.last_fence.load(Ordering::Relaxed);
        loop {
            let next = floor.max(last + 1);
            match self.last_fence.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    /// The claim record an entry points at; `None` if its segment was retired meanwhile (the
    /// caller looks in the index again: the entry has moved or gone).
    pub(crate) fn read_claim(&self, entry: ClaimEntry) -> Result<Option<ClaimRec>, StoreError> {
        match self.segments.read(entry.loc())? {
            Read::Found(Record::Claim(rec), _) => Ok(Some(rec)),
            Read::Found(..) => Err(StoreError::Internal("a claim entry points at another kind of record".into())),
            Read::Gone => Ok(None),
        }
    }

    /// The index's entry for a claim, live or not, with its record.
    pub(crate) fn find_claim(&self, ns: &str, id: &ClaimId) -> Result<ClaimLookup, StoreError> {
        for _ in 0..RETRIES {
            if let Some(found) = self.try_find_claim(ns, id)? {
                return Ok(found);
            }
        }
        Err(gone_again())
    }

    /// `None`: an entry's segment was retired while reading it.
    pub(crate) fn try_find_claim(&self, ns: &str, id: &ClaimId) -> Result<Option<ClaimLookup>, StoreError> {
        let mut main_taken = false;
        if let Some(entry) = self.index.claim_by_tag(claim_tag(ns, id)) {
            let Some(rec) = self.read_claim(entry)? else { return Ok(None) };
            if rec.ns == ns && rec.id == *id {
                return Ok(Some(ClaimLookup { hit: Some((Slot::Main, entry, rec)), main_taken: true }));
            }
            main_taken = true;
        }
        let hit = match self.index.claim_in_overflow(ns, id) {
            Some(entry) => match self.read_claim(entry)? {
                Some(rec) => Some((Slot::Overflow, entry, rec)),
                None => return Ok(None),
            },
            None => None,
        };
        Ok(Some(ClaimLookup { hit, main_taken }))
    }

    /// A live claim's record. An expired entry is not even read.
    pub(crate) fn live_claim(&self, ns: &str, id: &ClaimId, now: i64) -> Result<Option<ClaimRec>, StoreError> {
        'again: for _ in 0..RETRIES {
            if let Some(entry) = self.index.claim_by_tag(claim_tag(ns, id)).filter(|e| e.is_live(now)) {
                let Some(rec) = self.read_claim(entry)? else { continue 'again };
                if rec.ns == ns && rec.id == *id {
                    return Ok(Some(rec));
                }
            }
            return match self.index.claim_in_overflow(ns, id).filter(|e| e.is_live(now)) {
                Some(entry) => match self.read_claim(entry)? {
                    Some(rec) => Ok(Some(rec)),
                    None => continue 'again,
                },
                None => Ok(None),
            };
        }
        Err(gone_again())
    }

    pub(crate) fn prefix_exists(&self, ns: &str, prefix: &Parts, now: i64) -> Result<bool, StoreError> {
        if self.live_claim(ns, &prefix.id(), now)?.is_some() {
            return Ok(true);
        }
        let encoded = prefix.encode();
        let under = |rec: &ClaimRec| rec.ns == ns && rec.parts.starts_with(&encoded);
        let tag = prefix_tag(ns, &encoded);
        // The first few live members nearly always settle it; all of them only if tags collided.
        for want in [16, usize::MAX] {
            let members = match self.index.prefix(tag, now, want) {
                index::PrefixAnswer::Yes => return Ok(true),
                index::PrefixAnswer::Candidates(members) => members,
            };
            for entry in &members {
                // A member whose segment was retired meanwhile was expired (live ones move first).
                if self.read_claim(*entry)?.is_some_and(|rec| under(&rec)) {
                    return Ok(true);
                }
            }
            if members.len() < want {
                break;
            }
        }
        for entry in self.index.live_overflow(now) {
            if self.read_claim(entry)?.is_some_and(|rec| under(&rec)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Live claims under `prefix` (at least one part), in the order of their encoded parts, after
    /// `after`, at most `limit`. The index lists every claim under its first part: those are read
    /// and kept when they are of this namespace and under the whole prefix; with the claim whose
    /// parts are the prefix itself and the (tiny) overflow. A page reads every claim under the
    /// prefix's first part.
    pub(crate) fn list(
        &self,
        ns: &str,
        prefix: &Parts,
        after: Option<&[u8]>,
        limit: usize,
        now: i64,
    ) -> Result<Vec<ClaimRec>, StoreError> {
        let encoded = prefix.encode();
        let first = match encoded.iter().position(|b| *b == 0) {
            Some(end) => &encoded[..=end],
            None => return Ok(Vec::new()),
        };
        let mut found: Vec<ClaimRec> = Vec::new();
        if let Some(exact) = self.live_claim(ns, &prefix.id(), now)? {
            found.push(exact);
        }
        let members = self.index.under_first_part(prefix_tag(ns, first), now);
        for entry in members.into_iter().chain(self.index.live_overflow(now)) {
            // A member whose segment was retired meanwhile was expired (live ones move first).
            if let Some(rec) = self.read_claim(entry)? {
                found.push(rec);
            }
        }
        found.retain(|rec| {
            rec.ns == ns && rec.parts.starts_with(&encoded) && after.is_none_or(|after| rec.parts.as_slice() > after)
        });
        found.sort_by(|a, b| a.parts.cmp(&b.parts));
        found.dedup_by(|a, b| a.id == b.id);
        found.truncate(limit);
        Ok(found)
    }

    /// Every item's live claim, or `None` as soon as one has none.
    pub(crate) fn all_claimed(
        &self,
        ns: &Namespace,
        items: &[NewClaim],
        ids: &[ClaimId],
    ) -> Result<Option<Vec<ClaimOutcome>>, StoreError> {
        let now = self.clock.now().millis();
        let mut out = Vec::with_capacity(items.len());
        for (item, id) in items.iter().zip(ids) {
            match self.live_claim(ns.as_str(), id, now)? {
                Some(rec) => {
                    let claimed = idem_core::ClientToken::same(rec.client.map(idem_core::ClientToken), item.client);
                    out.push(ClaimOutcome { claimed, record: claim_record(ns, &rec)? });
                }
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// A leased key's live entry and record, as of `now`.
    pub(crate) fn live_request(
        &self,
        id: &ClaimId,
        now: i64,
    ) -> Result<Option<(index::RequestEntry, RequestRec)>, StoreError> {
        for _ in 0..RETRIES {
            let Some(entry) = self.index.request(id).filter(|e| e.until > now) else { return Ok(None) };
            match self.segments.read(entry.loc)? {
                Read::Found(Record::Request(rec), _) => return Ok(Some((entry, rec))),
                Read::Found(..) => {
                    return Err(StoreError::Internal(format!("request {id}: its entry points at another record")));
                }
                Read::Gone => continue,
            }
        }
        Err(gone_again())
    }

    /// What a begin finds when the key is held or completed; `None` when it is free.
    pub(crate) fn held_or_completed(&self, request: &NewRequest) -> Result<Option<Begin>, StoreError> {
        let now = self.clock.now().millis();
        let found = self.live_request(&request.id, now)?.map(|(entry, rec)| found(&entry, rec));
        Ok(match decide_begin(found, &request.fingerprint, request.client, Timestamp(now)) {
            Decision::Answer(answer) => Some(answer),
            Decision::Take { .. } => None,
        })
    }
}

/// A leased key's record as a begin sees it.
pub(crate) fn found(entry: &index::RequestEntry, rec: RequestRec) -> KeyFound {
    let until = Timestamp(entry.until);
    if entry.completed {
        KeyFound::Completed { fingerprint: rec.fingerprint, until, result: rec.body }
    } else {
        KeyFound::Held {
            fingerprint: rec.fingerprint,
            until,
            token: idem_core::request::LeaseToken(rec.token),
            client: rec.client.map(idem_core::ClientToken),
            fence: rec.fence,
        }
    }
}

/// How often a reader looks again when the segment it was reading from was retired under it.
const RETRIES: usize = 8;

fn gone_again() -> StoreError {
    StoreError::Unavailable("the log was compacting under this read; try again".into())
}

/// A stored claim as the domain has it.
pub(crate) fn claim_record(ns: &Namespace, rec: &ClaimRec) -> Result<ClaimRecord, StoreError> {
    let parts =
        Parts::decode(&rec.parts).map_err(|e| StoreError::Internal(format!("claim {}: bad parts: {e}", rec.id)))?;
    let data = rec
        .data
        .clone()
        .map(RawValue::from_string)
        .transpose()
        .map_err(|e| StoreError::Internal(format!("claim {}: bad data: {e}", rec.id)))?;
    Ok(ClaimRecord {
        namespace: ns.clone(),
        id: rec.id,
        parts,
        data,
        created_at: Timestamp(rec.created_at),
        expires_at: (rec.expires_at != NEVER).then_some(Timestamp(rec.expires_at)),
    })
}

/// A failed write or sync: the store cannot write right now (disk full, read-only, I/O error);
/// nothing was changed, and the caller may retry.
pub(crate) fn io_error(e: &std::io::Error) -> StoreError {
    StoreError::Unavailable(format!("log write failed: {e}"))
}
