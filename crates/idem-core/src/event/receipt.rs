//! Receipts: the record of one accepted inbound event, its delivery attempts and its result
//! webhook. Lifecycle: `accepted → processing → completed`, or `→ retrying → … → dead` after the
//! source's `max_attempts`; a dead receipt may be `discarded` (handled by hand); a replay starts an
//! ended receipt again, in a new round from attempt 1.

use sha2::{Digest, Sha256};

use crate::request::LeaseToken;
use crate::{Invalid, Timestamp};

/// `rcpt_` + 12 hex digits of milliseconds + 24 of uniqueness: sorting ids sorts by time, which
/// is what newest-first listing and its cursor rely on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReceiptId(String);

impl ReceiptId {
    pub fn generate(now: Timestamp) -> Self {
        let unique = crate::request::sequence();
        let tail = crate::key::hex(&unique[4..]);
        Self(format!("rcpt_{:012x}{tail}", now.millis().max(0)))
    }

    pub fn parse(text: &str) -> Result<Self, Invalid> {
        let ok =
            text.strip_prefix("rcpt_").is_some_and(|hex| hex.len() == 36 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        if ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(Invalid::new("receipt_id", "must be rcpt_ followed by 36 hex digits"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The lowest id a receipt created at `at` can have: ids sort by creation time, so a range of
    /// creation times is a range of ids (and of the primary key's index).
    pub fn floor(at: Timestamp) -> Self {
        Self(format!("rcpt_{:012x}{}", at.millis().max(0), "0".repeat(24)))
    }
}

impl std::fmt::Display for ReceiptId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a receipt stands; serialized as [`ReceiptStatus::as_str`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiptStatus {
    Accepted,
    Processing,
    Retrying,
    Completed,
    Dead,
    /// Dead, then marked as handled by hand: out of the dead-letter count, still replayable.
    Discarded,
}

impl ReceiptStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Processing => "processing",
            Self::Retrying => "retrying",
            Self::Completed => "completed",
            Self::Dead => "dead",
            Self::Discarded => "discarded",
        }
    }

    pub const ALL: [Self; 6] =
        [Self::Accepted, Self::Processing, Self::Retrying, Self::Completed, Self::Dead, Self::Discarded];

    /// Every status's name, in [`ReceiptStatus::ALL`]'s order.
    pub const NAMES: [&'static str; 6] = {
        let mut names = [""; 6];
        let mut i = 0;
        while i < 6 {
            names[i] = Self::ALL[i].as_str();
            i += 1;
        }
        names
    };

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Delivery has ended: nothing more happens to it unless it is replayed.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Dead | Self::Discarded)
    }
}

/// An event to accept. The payload hash is what tells a resend from a reuse of the event id.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub source: String,
    pub event_id: String,
    /// SHA-256 of the body's canonical JSON (keys sorted, no whitespace), or of its bytes when it
    /// is not JSON; this is what a new receipt stores.
    pub payload_hash: [u8; 32],
    /// SHA-256 of the body's bytes as sent. Receipts stored before intake compared canonical JSON
    /// hold this hash, so a resend of the very same bytes still matches them.
    pub raw_hash: [u8; 32],
    pub body: Vec<u8>,
    pub content_type: Option<String>,
}

impl NewEvent {
    pub fn new(source: String, event_id: String, body: Vec<u8>, content_type: Option<String>) -> Self {
        let raw_hash: [u8; 32] = Sha256::digest(&body).into();
        let payload_hash = match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(value) => Sha256::digest(value.to_string().as_bytes()).into(),
            Err(_) => raw_hash,
        };
        Self { source, event_id, payload_hash, raw_hash, body, content_type }
    }

    /// Is `stored` (a receipt's payload hash) this event's payload?
    pub fn matches(&self, stored: &[u8]) -> bool {
        stored == self.payload_hash || stored == self.raw_hash
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accept {
    /// New: the receipt and its first delivery job were committed together.
    Accepted { receipt_id: ReceiptId },
    /// Seen before with the same payload: nothing new was queued.
    Duplicate { receipt_id: ReceiptId, status: ReceiptStatus },
    /// Seen before with another payload: nothing was stored.
    Mismatch { receipt_id: ReceiptId },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// POST the event to the source's handler.
    Delivery,
    /// POST the receipt's outcome to the source's result webhook.
    Result,
}

/// A leased job: only the holder of `token` may finish it, until the lease runs out.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: i64,
    pub kind: JobKind,
    pub receipt_id: ReceiptId,
    pub source: String,
    pub event_id: String,
    /// The attempt this lease is for, 1-based.
    pub attempt: u32,
    /// The receipt's delivery round: 1, and one more for each replay.
    pub round: u32,
    /// What to POST: the event (delivery) or the result document (result).
    pub body: Vec<u8>,
    pub content_type: Option<String>,
    pub token: LeaseToken,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// The delivery round it belongs to (1, then one more per replay).
    pub round: u32,
    pub n: u32,
    pub started_at: Timestamp,
    pub duration_ms: u64,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    /// The first 1 KiB of the handler's answer.
    pub response: Option<String>,
}

/// The result webhook's state on a receipt; serialized as [`ResultWebhookState::as_str`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultWebhookState {
    /// Queued, not attempted yet.
    Pending,
    /// An attempt failed; another is scheduled.
    Retrying,
    /// The result webhook answered 2xx.
    Delivered,
    /// Every attempt failed; the receipt keeps its own status.
    Failed,
}

impl ResultWebhookState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Retrying => "retrying",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }

    pub const ALL: [Self; 4] = [Self::Pending, Self::Retrying, Self::Delivered, Self::Failed];

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// The result webhook's state on a receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultState {
    pub status: ResultWebhookState,
    pub attempts: u32,
    pub last_status_code: Option<u16>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Receipt {
    pub id: ReceiptId,
    pub source: String,
    pub event_id: String,
    pub status: ReceiptStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// How many times the receipt was delivered from attempt 1 (1 + replays).
    pub round: u32,
    /// Attempts of every round, in order (by round, then attempt).
    pub attempts: Vec<AttemptRecord>,
    /// When the next delivery attempt is due, while the receipt is `retrying`.
    pub next_attempt_at: Option<Timestamp>,
    pub result: Option<ResultState>,
    /// The event as it was received: filled in by `get_receipt`, not by listings.
    pub body: Option<Vec<u8>>,
    pub content_type: Option<String>,
}

/// The delivery queue at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Jobs due now, leased or not.
    pub due: u64,
    /// When the oldest of them fell due.
    pub oldest_due_at: Option<Timestamp>,
}

/// Which receipts a listing, a count or a bulk replay selects. Every field narrows it.
#[derive(Debug, Clone, Default)]
pub struct ReceiptFilter {
    pub source: Option<String>,
    pub status: Option<ReceiptStatus>,
    pub event_id: Option<String>,
    /// At most this many (listing and bulk replay; a count ignores it).
    pub limit: usize,
    /// Only receipts older than this one: the previous page's last, or
    /// [`ReceiptId::floor`] of "created before".
    pub before: Option<ReceiptId>,
    /// Only this receipt and newer ones: [`ReceiptId::floor`] of "created at or after".
    pub from: Option<ReceiptId>,
}

impl ReceiptFilter {
    /// Only receipts created before `at`.
    pub fn created_before(mut self, at: Timestamp) -> Self {
        let bound = ReceiptId::floor(at);
        self.before = Some(match self.before.take() {
            Some(before) if before < bound => before,
            _ => bound,
        });
        self
    }

    /// Only receipts created after `at`.
    pub fn created_after(mut self, at: Timestamp) -> Self {
        let bound = ReceiptId::floor(Timestamp(at.millis().saturating_add(1)));
        self.from = Some(match self.from.take() {
            Some(from) if from > bound => from,
            _ => bound,
        });
        self
    }
}

/// What one step of a bulk replay did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplayBatch {
    /// Receipts this step queued for delivery again.
    pub replayed: u64,
    /// The oldest receipt this step looked at: the next step continues below it. `None`: there
    /// were fewer than the filter's `limit` left, so the replay is done.
    pub next: Option<ReceiptId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_serialize_as_their_names() {
        for status in ReceiptStatus::ALL {
            assert_eq!(serde_json::to_value(status).ok(), Some(serde_json::json!(status.as_str())));
            assert_eq!(ReceiptStatus::parse(status.as_str()), Some(status));
        }
        for state in ResultWebhookState::ALL {
            assert_eq!(serde_json::to_value(state).ok(), Some(serde_json::json!(state.as_str())));
            assert_eq!(ResultWebhookState::parse(state.as_str()), Some(state));
        }
    }

    #[test]
    fn ids_sort_by_time_and_parse_back() {
        let a = ReceiptId::generate(Timestamp(1_000));
        let b = ReceiptId::generate(Timestamp(2_000));
        assert!(a < b);
        assert_ne!(ReceiptId::generate(Timestamp(1_000)), a, "unique within a millisecond");
        assert_eq!(ReceiptId::parse(a.as_str()).expect("valid"), a);
        assert!(ReceiptId::parse("rcpt_xyz").is_err() && ReceiptId::parse("order_1").is_err());
    }

    #[test]
    fn statuses_round_trip() {
        for s in ["accepted", "processing", "retrying", "completed", "dead", "discarded"] {
            assert_eq!(ReceiptStatus::parse(s).map(ReceiptStatus::as_str), Some(s));
        }
        assert!(ReceiptStatus::Dead.is_terminal() && !ReceiptStatus::Retrying.is_terminal());
        assert!(ReceiptStatus::Discarded.is_terminal());
    }

    #[test]
    fn json_payloads_compare_as_canonical_json_and_others_as_bytes() {
        let event = |body: &str| NewEvent::new("s".into(), "e".into(), body.as_bytes().to_vec(), None);
        let a = event(r#"{"b": [1, 2], "a": {"y": 1, "x": "z"}}"#);
        let b = event(r#"{"a":{"x":"z","y":1},"b":[1,2]}"#);
        assert_eq!(a.payload_hash, b.payload_hash, "key order and whitespace do not matter");
        assert!(a.matches(&b.payload_hash));
        assert!(!a.matches(&event(r#"{"a":{"x":"z","y":2},"b":[1,2]}"#).payload_hash), "values do");
        assert!(a.matches(&a.raw_hash), "a receipt stored with the raw hash still matches the same bytes");
        let text = event("not json {");
        assert_eq!(text.payload_hash, text.raw_hash);
        assert!(!text.matches(&event("not json  {").payload_hash));
    }

    #[test]
    fn creation_times_bound_ids() {
        let at = Timestamp(5_000);
        let id = ReceiptId::generate(at);
        assert!(ReceiptId::floor(at) <= id && id < ReceiptId::floor(Timestamp(5_001)));
        assert!(ReceiptId::parse(ReceiptId::floor(at).as_str()).is_ok());
        let f = ReceiptFilter::default().created_before(Timestamp(9_000)).created_after(Timestamp(4_999));
        assert_eq!(f.before, Some(ReceiptId::floor(Timestamp(9_000))));
        assert_eq!(f.from, Some(ReceiptId::floor(at)));
        let narrower = f.created_before(Timestamp(20_000));
        assert_eq!(narrower.before, Some(ReceiptId::floor(Timestamp(9_000))), "bounds only narrow");
    }
}
