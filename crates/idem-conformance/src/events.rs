//! Conformance checks for events: intake dedup with payload comparison, the leased job queue,
//! attempts, retries, dead letters, result webhooks, replays and listing.

use std::sync::Arc;
use std::time::Duration;

use idem_core::EventStore;
use idem_core::event::{
    Accept, AttemptRecord, Change, Job, JobKind, JobNext, NewEvent, QueueStats, ReceiptFilter, ReceiptStatus,
    ResultWebhookState, Transition,
};

use crate::Harness;

const LEASE: Duration = Duration::from_secs(150);

fn event(source: &str, id: &str, body: &str) -> NewEvent {
    NewEvent {
        source: source.into(),
        event_id: id.into(),
        payload_hash: payload_hash(body),
        body: body.into(),
        content_type: Some("application/json".into()),
    }
}

/// A stand-in payload hash (the server uses SHA-256): equal bodies, equal hashes.
fn payload_hash(body: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, b) in body.bytes().enumerate() {
        out[i % 32] = out[i % 32].wrapping_mul(31).wrapping_add(b);
    }
    out[31] ^= body.len() as u8;
    out
}

fn attempt(n: u32, status: u16) -> AttemptRecord {
    AttemptRecord {
        n,
        started_at: crate::START,
        duration_ms: 5,
        status_code: Some(status),
        error: None,
        response: Some("ok".into()),
    }
}

/// A delivery attempt that moved the receipt to `status`; the job is removed unless `retry_at`.
fn delivered(attempt: AttemptRecord, status: ReceiptStatus, retry_at: Option<idem_core::Timestamp>) -> Transition {
    let job = retry_at.map_or(JobNext::Remove, JobNext::RetryAt);
    Transition { attempt, job, change: Change::Receipt { status, result_job: None } }
}

async fn accepted<S: EventStore + ?Sized>(h: &Harness<S>, e: NewEvent) -> idem_core::event::ReceiptId {
    match h.store.accept_event(e).await.expect("accept") {
        Accept::Accepted { receipt_id } => receipt_id,
        other => panic!("expected accepted, got {other:?}"),
    }
}

async fn lease_one<S: EventStore + ?Sized>(h: &Harness<S>) -> Job {
    let mut jobs = h.store.lease_jobs(10, LEASE, &[]).await.expect("lease");
    assert_eq!(jobs.len(), 1, "one job due: {jobs:?}");
    jobs.remove(0)
}

pub async fn intake_dedups_by_event_id_and_compares_payloads<S: EventStore + ?Sized>(h: &Harness<S>) {
    let id = accepted(h, event("partner", "evt-1", r#"{"a":1}"#)).await;
    assert_eq!(
        h.store.accept_event(event("partner", "evt-1", r#"{"a":1}"#)).await.expect("accept"),
        Accept::Duplicate { receipt_id: id.clone(), status: ReceiptStatus::Accepted }
    );
    assert_eq!(
        h.store.accept_event(event("partner", "evt-1", r#"{"a":2}"#)).await.expect("accept"),
        Accept::Mismatch { receipt_id: id }
    );
    accepted(h, event("other-source", "evt-1", r#"{"a":1}"#)).await;
    let busy = ["partner".to_owned()];
    let jobs = h.store.lease_jobs(10, LEASE, &busy).await.expect("lease");
    assert_eq!(
        jobs.iter().map(|j| j.source.as_str()).collect::<Vec<_>>(),
        ["other-source"],
        "busy sources are skipped"
    );
    let jobs = h.store.lease_jobs(10, LEASE, &[]).await.expect("lease");
    assert_eq!(jobs.len(), 1, "one job per accepted receipt, none for duplicates");
}

pub async fn a_leased_job_is_delivered_once_and_completes<S: EventStore + ?Sized>(h: &Harness<S>) {
    let id = accepted(h, event("partner", "evt-1", r#"{"a":1}"#)).await;
    let job = lease_one(h).await;
    assert_eq!(
        (job.kind, job.attempt, &job.receipt_id, &job.body[..]),
        (JobKind::Delivery, 1, &id, &br#"{"a":1}"#[..])
    );
    assert!(h.store.lease_jobs(10, LEASE, &[]).await.expect("lease").is_empty(), "a leased job is not leased twice");
    assert_eq!(h.store.get_receipt(&id).await.expect("get").expect("receipt").status, ReceiptStatus::Processing);
    assert!(
        h.store.finish_job(&job, delivered(attempt(1, 200), ReceiptStatus::Completed, None)).await.expect("finish")
    );
    let receipt = h.store.get_receipt(&id).await.expect("get").expect("receipt");
    assert_eq!(receipt.status, ReceiptStatus::Completed);
    assert_eq!(receipt.attempts, vec![attempt(1, 200)]);
    assert!(h.store.lease_jobs(10, LEASE, &[]).await.expect("lease").is_empty());
}

pub async fn failures_retry_when_due_then_go_dead_and_queue_the_result<S: EventStore + ?Sized>(h: &Harness<S>) {
    let id = accepted(h, event("partner", "evt-1", "{}")).await;
    let first = lease_one(h).await;
    let retry_at = crate::START.plus(Duration::from_secs(10));
    let failed = delivered(attempt(1, 500), ReceiptStatus::Retrying, Some(retry_at));
    assert!(h.store.finish_job(&first, failed).await.expect("finish"));
    assert_eq!(h.store.get_receipt(&id).await.expect("get").expect("receipt").status, ReceiptStatus::Retrying);
    assert!(h.store.lease_jobs(10, LEASE, &[]).await.expect("lease").is_empty(), "not due yet");
    assert_eq!(
        h.store.queue_stats().await.expect("stats"),
        QueueStats { due: 0, oldest_due_at: None },
        "nothing due yet"
    );
    h.clock.advance(Duration::from_secs(10));
    assert_eq!(
        h.store.queue_stats().await.expect("stats"),
        QueueStats { due: 1, oldest_due_at: Some(retry_at) },
        "one job due since retry_at"
    );
    let second = lease_one(h).await;
    assert_eq!(second.attempt, 2);
    let result_job = Some(br#"{"type":"receipt.dead"}"#.to_vec());
    let last = Transition {
        attempt: attempt(2, 503),
        job: JobNext::Remove,
        change: Change::Receipt { status: ReceiptStatus::Dead, result_job },
    };
    assert!(h.store.finish_job(&second, last).await.expect("finish"));
    let receipt = h.store.get_receipt(&id).await.expect("get").expect("receipt");
    assert_eq!(receipt.status, ReceiptStatus::Dead);
    assert_eq!(receipt.attempts.iter().map(|a| a.status_code).collect::<Vec<_>>(), [Some(500), Some(503)]);
    assert_eq!(receipt.result.as_ref().map(|r| r.status.as_str()), Some("pending"));
    let result = lease_one(h).await;
    assert_eq!((result.kind, &result.body[..]), (JobKind::Result, &br#"{"type":"receipt.dead"}"#[..]));
    let delivered_result = Transition {
        attempt: attempt(1, 204),
        job: JobNext::Remove,
        change: Change::ResultWebhook(ResultWebhookState::Delivered),
    };
    assert!(h.store.finish_job(&result, delivered_result).await.expect("finish"));
    let receipt = h.store.get_receipt(&id).await.expect("get").expect("receipt");
    assert_eq!(receipt.status, ReceiptStatus::Dead, "the result webhook never changes the receipt");
    assert_eq!(
        receipt.result.map(|r| (r.status, r.attempts, r.last_status_code)),
        Some((ResultWebhookState::Delivered, 1, Some(204)))
    );
}

pub async fn an_expired_lease_is_leased_again_and_the_old_holder_cannot_finish<S: EventStore + ?Sized>(h: &Harness<S>) {
    let id = accepted(h, event("partner", "evt-1", "{}")).await;
    let stale = lease_one(h).await;
    h.clock.advance(LEASE);
    let fresh = lease_one(h).await;
    assert_eq!((fresh.receipt_id.clone(), fresh.attempt), (id.clone(), 1), "the same attempt, delivered again");
    assert!(
        !h.store.finish_job(&stale, delivered(attempt(1, 200), ReceiptStatus::Completed, None)).await.expect("finish"),
        "lease lost"
    );
    assert!(
        h.store.finish_job(&fresh, delivered(attempt(1, 200), ReceiptStatus::Completed, None)).await.expect("finish")
    );
    assert_eq!(h.store.get_receipt(&id).await.expect("get").expect("receipt").status, ReceiptStatus::Completed);
}

pub async fn replay_starts_a_terminal_receipt_again_from_attempt_1<S: EventStore + ?Sized>(h: &Harness<S>) {
    let id = accepted(h, event("partner", "evt-1", "{}")).await;
    assert_eq!(
        h.store.replay_receipt(&id).await.expect("replay"),
        Some(ReceiptStatus::Accepted),
        "not terminal: left alone"
    );
    let job = lease_one(h).await;
    h.store.finish_job(&job, delivered(attempt(1, 500), ReceiptStatus::Dead, None)).await.expect("finish");
    assert_eq!(h.store.replay_receipt(&id).await.expect("replay"), Some(ReceiptStatus::Dead));
    let receipt = h.store.get_receipt(&id).await.expect("get").expect("receipt");
    assert_eq!((receipt.status, receipt.round, receipt.attempts.len()), (ReceiptStatus::Accepted, 2, 0));
    let again = lease_one(h).await;
    assert_eq!((again.attempt, again.receipt_id), (1, id));
    assert_eq!(
        h.store.replay_receipt(&idem_core::event::ReceiptId::generate(crate::START)).await.expect("replay"),
        None
    );
}

pub async fn receipts_list_newest_first_with_filters_and_cursor<S: EventStore + ?Sized>(h: &Harness<S>) {
    let mut ids = Vec::new();
    for i in 0..5 {
        h.clock.advance(Duration::from_millis(1));
        ids.push(accepted(h, event(if i % 2 == 0 { "a" } else { "b" }, &format!("e{i}"), "{}")).await);
    }
    let page = |filter: ReceiptFilter| {
        let store = Arc::clone(&h.store);
        async move { store.list_receipts(&filter).await.expect("list").into_iter().map(|r| r.id).collect::<Vec<_>>() }
    };
    assert_eq!(page(ReceiptFilter { limit: 2, ..Default::default() }).await, [ids[4].clone(), ids[3].clone()]);
    let next = ReceiptFilter { limit: 2, before: Some(ids[3].clone()), ..Default::default() };
    assert_eq!(page(next).await, [ids[2].clone(), ids[1].clone()]);
    let only_a = ReceiptFilter { limit: 10, source: Some("a".into()), ..Default::default() };
    assert_eq!(page(only_a).await, [ids[4].clone(), ids[2].clone(), ids[0].clone()]);
    let none_dead = ReceiptFilter { limit: 10, status: Some(ReceiptStatus::Dead), ..Default::default() };
    assert!(page(none_dead).await.is_empty());
}

pub async fn race_of_100_intakes_of_one_event_accepts_once<S: EventStore + ?Sized>(h: &Harness<S>) {
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let store = Arc::clone(&h.store);
            tokio::spawn(async move { store.accept_event(event("partner", "raced", "{}")).await })
        })
        .collect();
    let mut accepted = 0;
    for task in tasks {
        if matches!(task.await.expect("task").expect("accept"), Accept::Accepted { .. }) {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 1);
    assert_eq!(h.store.lease_jobs(1000, LEASE, &[]).await.expect("lease").len(), 1, "one job queued");
}

pub async fn receipts_are_counted_by_source_and_status<S: EventStore + ?Sized>(h: &Harness<S>) {
    accepted(h, event("a", "e1", "{}")).await;
    accepted(h, event("a", "e2", "{}")).await;
    accepted(h, event("b", "e1", "{}")).await;
    let job = h.store.lease_jobs(1, LEASE, &["b".to_owned()]).await.expect("lease").remove(0);
    h.store.finish_job(&job, delivered(attempt(1, 500), ReceiptStatus::Dead, None)).await.expect("finish");
    let mut counts = h.store.count_receipts().await.expect("count");
    counts.sort_by(|x, y| (&x.0, x.1.as_str()).cmp(&(&y.0, y.1.as_str())));
    assert_eq!(
        counts,
        vec![
            ("a".to_owned(), ReceiptStatus::Accepted, 1),
            ("a".to_owned(), ReceiptStatus::Dead, 1),
            ("b".to_owned(), ReceiptStatus::Accepted, 1),
        ]
    );
}
