//! The event lifecycle, decided here and nowhere else: after each attempt, what happens to the
//! job, the receipt and its result webhook. Backends only persist the [`Transition`] this returns.
//!
//! A receipt goes `accepted → processing → completed`, or `processing → retrying → processing …`
//! until the source's `max_attempts`, then `dead`. A 2xx answer completes it; anything else (another
//! status, a timeout, a connection error) schedules the next attempt after the source's backoff,
//! honouring the handler's `Retry-After` within the schedule's bounds. When a receipt ends
//! (`completed` or `dead`) and the source has a result webhook, a result job is queued in the same
//! transaction; the result webhook has attempts of its own (`result_backoff`), and its failure is
//! recorded on the receipt but never changes the receipt's status. A dead receipt can be
//! `discarded` (marked handled by hand: it leaves the dead letters). A replay starts a completed,
//! dead or discarded receipt again from attempt 1.

use std::time::Duration;

use crate::Timestamp;
use crate::event::receipt::{AttemptRecord, Job, JobKind, ReceiptStatus, ResultWebhookState};
use crate::event::retry::next_delay;

/// What a source's config says about delivering its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryPolicy {
    /// Attempts to deliver an event before it goes dead, at least 1.
    pub max_attempts: u32,
    /// Waits before attempts 2, 3, …; the last one repeats.
    pub backoff: Vec<Duration>,
    /// Waits between result-webhook attempts; it gets one attempt more than it has entries.
    pub result_backoff: Vec<Duration>,
    /// Whether outcomes are reported to a result webhook.
    pub result_webhook: bool,
}

impl DeliveryPolicy {
    /// How many attempts a job of `kind` gets in all.
    pub fn max_attempts(&self, kind: JobKind) -> u32 {
        match kind {
            JobKind::Delivery => self.max_attempts,
            JobKind::Result => u32::try_from(self.result_backoff.len()).unwrap_or(u32::MAX).saturating_add(1),
        }
    }

    fn schedule(&self, kind: JobKind) -> &[Duration] {
        match kind {
            JobKind::Delivery => &self.backoff,
            JobKind::Result => &self.result_backoff,
        }
    }
}

/// What becomes of the job after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobNext {
    /// Attempt again at this time, as attempt `job.attempt + 1`.
    RetryAt(Timestamp),
    /// The job is finished (succeeded, or out of attempts): remove it.
    Remove,
}

/// What an attempt changes besides the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A delivery attempt: the receipt's new status, and when the receipt just ended and the
    /// source reports outcomes, the body of the result webhook to queue with it.
    Receipt { status: ReceiptStatus, result_job: Option<Vec<u8>> },
    /// A result-webhook attempt: its new state on the receipt.
    ResultWebhook(ResultWebhookState),
}

/// Everything one attempt changes, to be persisted in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The attempt as it went, recorded on the receipt (delivery) or summarised (result).
    pub attempt: AttemptRecord,
    pub job: JobNext,
    pub change: Change,
}

impl Transition {
    /// When the receipt's next delivery attempt is due, if this transition schedules one (in
    /// milliseconds, as the stores keep it).
    pub fn next_attempt_at(&self) -> Option<i64> {
        match (&self.job, &self.change) {
            (JobNext::RetryAt(at), Change::Receipt { status: ReceiptStatus::Retrying, .. }) => Some(at.millis()),
            _ => None,
        }
    }
}

/// Decides what follows an attempt of `job`. `retry_after` is the handler's `Retry-After`, if it
/// sent one; `now` is when the attempt ended.
pub fn after_attempt(
    job: &Job,
    attempt: AttemptRecord,
    retry_after: Option<Duration>,
    policy: &DeliveryPolicy,
    now: Timestamp,
) -> Transition {
    let succeeded = attempt.status_code.is_some_and(|code| (200..300).contains(&code));
    let retry_at = (!succeeded && job.attempt < policy.max_attempts(job.kind))
        .then(|| now.plus(next_delay(job.attempt, policy.schedule(job.kind), retry_after)));
    let next = retry_at.map_or(JobNext::Remove, JobNext::RetryAt);
    let change = match job.kind {
        JobKind::Delivery => {
            let status = match (succeeded, retry_at) {
                (true, _) => ReceiptStatus::Completed,
                (false, Some(_)) => ReceiptStatus::Retrying,
                (false, None) => ReceiptStatus::Dead,
            };
            let result_job =
                (policy.result_webhook && status.is_terminal()).then(|| result_body(job, status, &attempt));
            Change::Receipt { status, result_job }
        }
        JobKind::Result => Change::ResultWebhook(match (succeeded, retry_at) {
            (true, _) => ResultWebhookState::Delivered,
            (false, Some(_)) => ResultWebhookState::Retrying,
            (false, None) => ResultWebhookState::Failed,
        }),
    };
    Transition { attempt, job: next, change }
}

/// The result webhook's document: `{"type": "receipt.completed" | "receipt.dead", …}`, saying which
/// round ended so (1, then one more per replay), after how many attempts, and how its last went.
fn result_body(job: &Job, status: ReceiptStatus, last: &AttemptRecord) -> Vec<u8> {
    let kind = if status == ReceiptStatus::Completed { "receipt.completed" } else { "receipt.dead" };
    serde_json::json!({
        "type": kind,
        "receipt_id": job.receipt_id.as_str(),
        "source": job.source,
        "event_id": job.event_id,
        "round": job.round,
        "attempts": job.attempt,
        "last_status_code": last.status_code,
        "last_error": last.error,
    })
    .to_string()
    .into_bytes()
}

/// What a replay of a receipt in `status` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Deliver it again from attempt 1: status `accepted`, a new round, the result webhook's state
    /// cleared, one delivery job due now.
    Restart,
    /// It is still being delivered; nothing changes.
    Refused(ReceiptStatus),
}

pub fn replay(status: ReceiptStatus) -> Replay {
    if status.is_terminal() { Replay::Restart } else { Replay::Refused(status) }
}

/// What discarding a receipt in `status` does. Every store writes `discarded` exactly when this
/// says [`Discard::Discard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discard {
    /// A dead letter: it becomes `discarded`.
    Discard,
    /// Already discarded: nothing to write, and the call succeeds (discarding twice is harmless).
    Already,
    /// Only dead letters can be discarded; nothing changes.
    Refused(ReceiptStatus),
}

pub fn discard(status: ReceiptStatus) -> Discard {
    match status {
        ReceiptStatus::Dead => Discard::Discard,
        ReceiptStatus::Discarded => Discard::Already,
        other => Discard::Refused(other),
    }
}

/// Receipts that retention may delete once they are old enough: ended and handled. Dead ones
/// stay until someone replays or discards them.
pub fn retention_may_delete(status: ReceiptStatus) -> bool {
    matches!(status, ReceiptStatus::Completed | ReceiptStatus::Discarded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ReceiptId;
    use crate::request::LeaseToken;

    const NOW: Timestamp = Timestamp(1_000_000);

    fn secs(s: &[u64]) -> Vec<Duration> {
        s.iter().map(|&n| Duration::from_secs(n)).collect()
    }

    fn policy(result_webhook: bool) -> DeliveryPolicy {
        DeliveryPolicy { max_attempts: 3, backoff: secs(&[10, 60]), result_backoff: secs(&[5]), result_webhook }
    }

    fn job(kind: JobKind, attempt: u32) -> Job {
        Job {
            id: 1,
            kind,
            receipt_id: ReceiptId::parse("rcpt_0000000003e8000000000000000000000001").expect("valid"),
            source: "partner".into(),
            event_id: "evt-1".into(),
            attempt,
            round: 2,
            body: b"{}".to_vec(),
            content_type: None,
            token: LeaseToken([0; 16]),
        }
    }

    fn answered(n: u32, code: Option<u16>) -> AttemptRecord {
        let error = code.is_none().then(|| "connection refused (127.0.0.1:9000)".to_owned());
        AttemptRecord { round: 2, n, started_at: NOW, duration_ms: 3, status_code: code, error, response: None }
    }

    fn at(s: u64) -> JobNext {
        JobNext::RetryAt(NOW.plus(Duration::from_secs(s)))
    }

    fn receipt(status: ReceiptStatus) -> Change {
        Change::Receipt { status, result_job: None }
    }

    type Case = (&'static str, JobKind, u32, Option<u16>, Option<u64>, JobNext, Change);

    /// Every way an attempt can end, and what it must lead to.
    #[test]
    fn every_transition() {
        use JobKind::{Delivery, Result};
        use ReceiptStatus::{Completed, Dead, Retrying};
        use ResultWebhookState::{Delivered, Failed, Retrying as ResultRetrying};
        // (what, job kind, attempt, answer's status (None: no answer), Retry-After, next, change)
        let cases: Vec<Case> = vec![
            ("2xx completes", Delivery, 1, Some(200), None, JobNext::Remove, receipt(Completed)),
            ("204 on the last attempt completes", Delivery, 3, Some(204), None, JobNext::Remove, receipt(Completed)),
            ("5xx retries after the first wait", Delivery, 1, Some(500), None, at(10), receipt(Retrying)),
            ("then after the second", Delivery, 2, Some(503), None, at(60), receipt(Retrying)),
            ("a connection error retries", Delivery, 1, None, None, at(10), receipt(Retrying)),
            ("a 3xx is a failure", Delivery, 1, Some(302), None, at(10), receipt(Retrying)),
            ("Retry-After is honoured", Delivery, 1, Some(429), Some(30), at(30), receipt(Retrying)),
            (
                "Retry-After no sooner than the shortest wait",
                Delivery,
                1,
                Some(429),
                Some(1),
                at(10),
                receipt(Retrying),
            ),
            (
                "Retry-After no later than the longest wait",
                Delivery,
                1,
                Some(429),
                Some(9999),
                at(60),
                receipt(Retrying),
            ),
            ("out of attempts: dead", Delivery, 3, Some(500), None, JobNext::Remove, receipt(Dead)),
            ("dead even with Retry-After", Delivery, 3, Some(429), Some(30), JobNext::Remove, receipt(Dead)),
            ("result webhook delivered", Result, 1, Some(200), None, JobNext::Remove, Change::ResultWebhook(Delivered)),
            ("result webhook retries", Result, 1, Some(500), None, at(5), Change::ResultWebhook(ResultRetrying)),
            ("result webhook fails", Result, 2, None, None, JobNext::Remove, Change::ResultWebhook(Failed)),
        ];
        for (name, kind, n, code, retry_after, job_next, change) in cases {
            let t = after_attempt(
                &job(kind, n),
                answered(n, code),
                retry_after.map(Duration::from_secs),
                &policy(false),
                NOW,
            );
            assert_eq!((t.job, t.change), (job_next, change), "{name}");
            assert_eq!(t.attempt, answered(n, code), "{name}: the attempt is recorded as it went");
        }
    }

    #[test]
    fn an_ended_receipt_queues_its_result_webhook() {
        let document = |t: Transition| match t.change {
            Change::Receipt { result_job: Some(body), .. } => {
                serde_json::from_slice::<serde_json::Value>(&body).expect("JSON")
            }
            other => panic!("expected a result job, got {other:?}"),
        };
        let done = after_attempt(&job(JobKind::Delivery, 2), answered(2, Some(201)), None, &policy(true), NOW);
        assert_eq!(
            document(done),
            serde_json::json!({"type": "receipt.completed", "receipt_id": "rcpt_0000000003e8000000000000000000000001",
                "source": "partner", "event_id": "evt-1", "round": 2, "attempts": 2, "last_status_code": 201,
                "last_error": null})
        );
        let dead = after_attempt(&job(JobKind::Delivery, 3), answered(3, None), None, &policy(true), NOW);
        let dead = document(dead);
        assert_eq!((dead["type"].as_str(), dead["last_status_code"].is_null()), (Some("receipt.dead"), true));
        assert_eq!((dead["round"].as_u64(), dead["attempts"].as_u64()), (Some(2), Some(3)));
        assert_eq!(dead["last_error"], "connection refused (127.0.0.1:9000)", "why the last attempt failed");
        let retrying = after_attempt(&job(JobKind::Delivery, 1), answered(1, Some(500)), None, &policy(true), NOW);
        assert_eq!(retrying.change, receipt(ReceiptStatus::Retrying), "no result webhook while retrying");
    }

    #[test]
    fn replay_restarts_only_ended_receipts() {
        use ReceiptStatus::*;
        for status in [Completed, Dead, Discarded] {
            assert_eq!(replay(status), Replay::Restart, "{status:?}");
        }
        for status in [Accepted, Processing, Retrying] {
            assert_eq!(replay(status), Replay::Refused(status), "{status:?}");
        }
    }

    #[test]
    fn only_dead_letters_are_discarded_and_only_handled_receipts_expire() {
        use ReceiptStatus::*;
        assert_eq!(discard(Dead), Discard::Discard);
        assert_eq!(discard(Discarded), Discard::Already, "discarding twice writes nothing and succeeds");
        for status in [Accepted, Processing, Retrying, Completed] {
            assert_eq!(discard(status), Discard::Refused(status), "{status:?}");
        }
        let expiring: Vec<_> = ReceiptStatus::ALL.into_iter().filter(|s| retention_may_delete(*s)).collect();
        assert_eq!(expiring, [Completed, Discarded]);
    }

    #[test]
    fn result_states_round_trip() {
        for s in ["pending", "retrying", "delivered", "failed"] {
            assert_eq!(ResultWebhookState::parse(s).map(ResultWebhookState::as_str), Some(s));
        }
        assert_eq!(policy(true).max_attempts(JobKind::Result), 2);
    }
}
