//! Receipts: the record of one accepted inbound event, its delivery attempts and its result
//! webhook. Lifecycle: `accepted → processing → completed`, or `→ retrying → … → dead` after the
//! source's `max_attempts`; a replay starts a new round from attempt 1.

use crate::event::lifecycle::ResultWebhookState;
use crate::request::LeaseToken;
use crate::{Invalid, Timestamp};

/// `rcpt_` + 12 hex digits of milliseconds + 24 of uniqueness: sorting ids sorts by time, which
/// is what newest-first listing and its cursor rely on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReceiptId(String);

impl ReceiptId {
    pub fn generate(now: Timestamp) -> Self {
        let unique = LeaseToken::generate().0;
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
}

impl std::fmt::Display for ReceiptId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiptStatus {
    Accepted,
    Processing,
    Retrying,
    Completed,
    Dead,
}

impl ReceiptStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Processing => "processing",
            Self::Retrying => "retrying",
            Self::Completed => "completed",
            Self::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Accepted, Self::Processing, Self::Retrying, Self::Completed, Self::Dead]
            .into_iter()
            .find(|s| s.as_str() == text)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Dead)
    }
}

/// An event to accept. The payload hash is what tells a resend from a reuse of the event id.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub source: String,
    pub event_id: String,
    pub payload_hash: [u8; 32],
    pub body: Vec<u8>,
    pub content_type: Option<String>,
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
    /// What to POST: the event (delivery) or the result document (result).
    pub body: Vec<u8>,
    pub content_type: Option<String>,
    pub token: LeaseToken,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    pub n: u32,
    pub started_at: Timestamp,
    pub duration_ms: u64,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    /// The first 1 KiB of the handler's answer.
    pub response: Option<String>,
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
    /// Attempts of the current round, in order.
    pub attempts: Vec<AttemptRecord>,
    pub result: Option<ResultState>,
}

/// The delivery queue at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Jobs due now, leased or not.
    pub due: u64,
    /// When the oldest of them fell due.
    pub oldest_due_at: Option<Timestamp>,
}

#[derive(Debug, Clone, Default)]
pub struct ReceiptFilter {
    pub source: Option<String>,
    pub status: Option<ReceiptStatus>,
    pub limit: usize,
    /// Only receipts older than this one (the previous page's last).
    pub before: Option<ReceiptId>,
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for s in ["accepted", "processing", "retrying", "completed", "dead"] {
            assert_eq!(ReceiptStatus::parse(s).map(ReceiptStatus::as_str), Some(s));
        }
        assert!(ReceiptStatus::Dead.is_terminal() && !ReceiptStatus::Retrying.is_terminal());
    }
}
