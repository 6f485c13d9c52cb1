//! Conformance checks for events: intake dedup with payload comparison, the leased job queue,
//! attempts, retries, dead letters, result webhooks, replays and listing.

use std::sync::Arc;
use std::time::Duration;

use idem_core::event::{
    Accept, AttemptRecord, Change, Job, JobKind, JobNext, NewEvent, QueueStats, ReceiptFilter, ReceiptId,
    ReceiptStatus, ResultWebhookState, Transition,
};
use idem_core::{Clock, EventStore};

use crate::Harness;

const LEASE: Duration = Duration::from_secs(150);

fn event(source: &str, id: &str, body: &str) -> NewEvent {
    NewEvent::new(source.into(), id.into(), body.into(), Some("application/json".into()))
}

fn attempt(n: u32, status: u16) -> AttemptRecord {
    AttemptRecord {
        round: 1,
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

/// Accepts `n` events of `source` and lets every delivery fail for good: `n` dead letters.
async fn dead_letters<S: EventStore + ?Sized>(h: &Harness<S>, source: &str, n: usize) -> Vec<ReceiptId> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        h.clock.advance(Duration::from_millis(1));
        let event_id = format!("{source}-dead-{i}-{}", h.clock.now().millis());
        ids.push(accepted(h, event(source, &event_id, "{}")).await);
    }
    finish_all(h, ReceiptStatus::Dead).await;
    ids
}

/// Leases every due delivery and ends it with `status`.
async fn finish_all<S: EventStore + ?Sized>(h: &Harness<S>, status: ReceiptStatus) -> usize {
    let jobs = h.store.lease_jobs(100_000, LEASE, &[]).await.expect("lease");
    for job in &jobs {
        let code = if status == ReceiptStatus::Completed { 200 } else { 500 };
        assert!(h.store.finish_job(job, delivered(attempt(1, code), status, None)).await.expect("finish"));
    }
    jobs.len()
}

async fn status_of<S: EventStore + ?Sized>(h: &Harness<S>, id: &ReceiptId) -> ReceiptStatus {
    h.store.get_receipt(id).await.expect("get").expect("receipt").status
}

/// Every step of a bulk replay of `filter`, `limit` receipts per step; the total replayed.
async fn replay_all<S: EventStore + ?Sized>(h: &Harness<S>, mut filter: ReceiptFilter) -> u64 {
    let mut total = 0;
    loop {
        let step = h.store.replay_matching(&filter).await.expect("replay step");
        total += step.replayed;
        match step.next {
            Some(next) => filter.before = Some(next),
            None => return total,
        }
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
    let retrying = h.store.get_receipt(&id).await.expect("get").expect("receipt");
    assert_eq!((retrying.status, retrying.next_attempt_at), (ReceiptStatus::Retrying, Some(retry_at)));
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
    let processing = h.store.get_receipt(&id).await.expect("get").expect("receipt");
    assert_eq!((processing.status, processing.next_attempt_at), (ReceiptStatus::Processing, None), "under way");
    let result_job = Some(br#"{"type":"receipt.dead"}"#.to_vec());
    let last = Transition {
        attempt: attempt(2, 503),
        job: JobNext::Remove,
        change: Change::Receipt { status: ReceiptStatus::Dead, result_job },
    };
    assert!(h.store.finish_job(&second, last).await.expect("finish"));
    let receipt = h.store.get_receipt(&id).await.expect("get").expect("receipt");
    assert_eq!((receipt.status, receipt.next_attempt_at), (ReceiptStatus::Dead, None));
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

/// Accepts `n` events of `source`, each due a millisecond after the one before.
pub async fn accept_many<S: EventStore + ?Sized>(h: &Harness<S>, source: &str, n: usize) {
    for i in 0..n {
        h.clock.advance(Duration::from_millis(1));
        accepted(h, event(source, &format!("{source}-{i}-{}", h.clock.now().millis()), "{}")).await;
    }
}

/// A lease takes at most what it asks for, and each due job once: 100 due jobs leased 10 at a time
/// take ten leases of 10. (On PostgreSQL the first lease once took 55 of them, when the database
/// ran the lease's pick again for each row it updated: #42.)
pub async fn a_lease_takes_at_most_its_limit<S: EventStore + ?Sized>(h: &Harness<S>) {
    accept_many(h, "partner", 100).await;
    let mut leased = std::collections::HashSet::new();
    for round in 1..=10 {
        let jobs = h.store.lease_jobs(10, LEASE, &[]).await.expect("lease");
        assert_eq!(jobs.len(), 10, "lease {round} asked for 10 jobs and took {}", jobs.len());
        for job in jobs {
            assert!(leased.insert(job.id), "job {} leased twice", job.id);
        }
    }
    assert!(h.store.lease_jobs(10, LEASE, &[]).await.expect("lease").is_empty(), "each of the 100 leased once");
}

/// A released job is due again at once, for the attempt it was leased for, as if its lease had
/// run out; its old token then holds nothing, and a job not released stays its holder's.
pub async fn a_released_job_is_leased_again_at_once<S: EventStore + ?Sized>(h: &Harness<S>) {
    accept_many(h, "partner", 2).await;
    let jobs = h.store.lease_jobs(10, LEASE, &[]).await.expect("lease");
    let [kept, released] = &jobs[..] else { panic!("two jobs due: {jobs:?}") };
    assert_eq!(h.store.release_jobs(std::slice::from_ref(released)).await.expect("release"), 1);
    assert_eq!(status_of(h, &released.receipt_id).await, ReceiptStatus::Processing, "as when a lease runs out");
    let again = lease_one(h).await;
    assert_eq!((&again.receipt_id, again.attempt), (&released.receipt_id, 1), "the same attempt, still to come");
    assert_eq!(
        h.store.release_jobs(std::slice::from_ref(released)).await.expect("release"),
        0,
        "the old token holds nothing any more"
    );
    let done = || delivered(attempt(1, 200), ReceiptStatus::Completed, None);
    assert!(!h.store.finish_job(released, done()).await.expect("finish"), "nor can it finish the job");
    assert!(h.store.finish_job(&again, done()).await.expect("finish"), "the new lease can");
    assert!(h.store.finish_job(kept, done()).await.expect("finish"), "the job not released is still its holder's");
    let twice = [kept.clone(), again];
    assert_eq!(h.store.release_jobs(&twice).await.expect("release"), 0, "a finished job has no lease to release");
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
    assert_eq!(job.round, 1);
    h.store.finish_job(&job, delivered(attempt(1, 500), ReceiptStatus::Dead, None)).await.expect("finish");
    assert_eq!(h.store.replay_receipt(&id).await.expect("replay"), Some(ReceiptStatus::Dead));
    let receipt = h.store.get_receipt(&id).await.expect("get").expect("receipt");
    assert_eq!((receipt.status, receipt.round), (ReceiptStatus::Accepted, 2));
    let rounds: Vec<(u32, u32)> = receipt.attempts.iter().map(|a| (a.round, a.n)).collect();
    assert_eq!(rounds, [(1, 1)], "the first round's attempts are kept");
    let again = lease_one(h).await;
    assert_eq!((again.attempt, again.round, &again.receipt_id), (1, 2, &id));
    let second = AttemptRecord { round: 2, ..attempt(1, 200) };
    h.store.finish_job(&again, delivered(second, ReceiptStatus::Completed, None)).await.expect("finish");
    let receipt = h.store.get_receipt(&id).await.expect("get").expect("receipt");
    let rounds: Vec<(u32, u32, Option<u16>)> = receipt.attempts.iter().map(|a| (a.round, a.n, a.status_code)).collect();
    assert_eq!(rounds, [(1, 1, Some(500)), (2, 1, Some(200))], "every round's attempts, in order");
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

/// One receipt in each status, among many completed ones: each status's filter lists and counts
/// exactly its own (PostgreSQL finds each status a different way: `event.rs`'s `filter_sql`).
pub async fn each_status_filter_finds_exactly_its_receipts<S: EventStore + ?Sized>(h: &Harness<S>) {
    accept_many(h, "partner", 30).await;
    finish_all(h, ReceiptStatus::Completed).await;
    let dead = dead_letters(h, "partner", 2).await;
    assert_eq!(h.store.discard_receipt(&dead[0]).await.expect("discard"), Some(ReceiptStatus::Dead));
    let retrying = accepted(h, event("partner", "retrying", "{}")).await;
    let job = lease_one(h).await;
    let later = Some(h.clock.now().plus(Duration::from_secs(60)));
    assert!(
        h.store.finish_job(&job, delivered(attempt(1, 500), ReceiptStatus::Retrying, later)).await.expect("finish")
    );
    let processing = accepted(h, event("partner", "processing", "{}")).await;
    assert_eq!(lease_one(h).await.receipt_id, processing);
    let waiting = accepted(h, event("partner", "waiting", "{}")).await;
    let expected = [
        (ReceiptStatus::Accepted, vec![waiting]),
        (ReceiptStatus::Processing, vec![processing]),
        (ReceiptStatus::Retrying, vec![retrying]),
        (ReceiptStatus::Dead, vec![dead[1].clone()]),
        (ReceiptStatus::Discarded, vec![dead[0].clone()]),
    ];
    for (status, ids) in expected {
        let filter = ReceiptFilter { status: Some(status), limit: 100, ..Default::default() };
        let listed: Vec<ReceiptId> =
            h.store.list_receipts(&filter).await.expect("list").into_iter().map(|r| r.id).collect();
        assert_eq!(listed, ids, "{status:?}");
        assert_eq!(h.store.count_matching(&filter).await.expect("count"), 1, "{status:?}");
    }
    let completed = ReceiptFilter { status: Some(ReceiptStatus::Completed), limit: 100, ..Default::default() };
    assert_eq!(h.store.list_receipts(&completed).await.expect("list").len(), 30);
    assert_eq!(h.store.count_matching(&completed).await.expect("count"), 30);
    let replayed = ReceiptFilter { status: Some(ReceiptStatus::Dead), limit: 100, ..Default::default() };
    assert_eq!(h.store.replay_matching(&replayed).await.expect("replay").replayed, 1);
    assert_eq!(h.store.count_matching(&replayed).await.expect("count"), 0, "replayed: no longer dead");
    let accepted = ReceiptFilter { status: Some(ReceiptStatus::Accepted), limit: 100, ..Default::default() };
    assert_eq!(h.store.count_matching(&accepted).await.expect("count"), 2, "and waiting for delivery");
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

pub async fn a_receipt_holds_its_event<S: EventStore + ?Sized>(h: &Harness<S>) {
    let id = accepted(h, event("partner", "evt-1", r#"{"amount": 5}"#)).await;
    let receipt = h.store.get_receipt(&id).await.expect("get").expect("receipt");
    assert_eq!(receipt.body.as_deref(), Some(&br#"{"amount": 5}"#[..]), "the body exactly as sent");
    assert_eq!(receipt.content_type.as_deref(), Some("application/json"));
}

pub async fn a_resend_with_its_keys_reordered_is_a_duplicate<S: EventStore + ?Sized>(h: &Harness<S>) {
    let id = accepted(h, event("partner", "evt-1", r#"{"a": 1, "b": {"y": 2, "x": [1, 2]}}"#)).await;
    assert_eq!(
        h.store.accept_event(event("partner", "evt-1", r#"{"b":{"x":[1,2],"y":2},"a":1}"#)).await.expect("accept"),
        Accept::Duplicate { receipt_id: id.clone(), status: ReceiptStatus::Accepted }
    );
    assert_eq!(
        h.store.accept_event(event("partner", "evt-1", r#"{"b":{"x":[2,1],"y":2},"a":1}"#)).await.expect("accept"),
        Accept::Mismatch { receipt_id: id }
    );
    // A receipt stored before intake compared canonical JSON holds the hash of the raw bytes.
    let raw = r#"{"z": 1, "a": 2}"#;
    let mut legacy = event("partner", "evt-2", raw);
    legacy.payload_hash = legacy.raw_hash;
    let old = accepted(h, legacy).await;
    assert_eq!(
        h.store.accept_event(event("partner", "evt-2", raw)).await.expect("accept"),
        Accept::Duplicate { receipt_id: old, status: ReceiptStatus::Accepted },
        "the same bytes still match an older receipt"
    );
}

pub async fn a_dead_letter_is_discarded_and_can_still_be_replayed<S: EventStore + ?Sized>(h: &Harness<S>) {
    let live = accepted(h, event("partner", "live", "{}")).await;
    assert_eq!(h.store.discard_receipt(&live).await.expect("discard"), Some(ReceiptStatus::Accepted));
    assert_eq!(status_of(h, &live).await, ReceiptStatus::Accepted, "only dead letters are discarded");
    finish_all(h, ReceiptStatus::Completed).await;
    let dead = dead_letters(h, "partner", 1).await.remove(0);
    assert_eq!(h.store.discard_receipt(&dead).await.expect("discard"), Some(ReceiptStatus::Dead));
    assert_eq!(status_of(h, &dead).await, ReceiptStatus::Discarded);
    assert_eq!(
        h.store.discard_receipt(&dead).await.expect("discard"),
        Some(ReceiptStatus::Discarded),
        "twice: harmless"
    );
    let dead_filter = ReceiptFilter { status: Some(ReceiptStatus::Dead), ..Default::default() };
    assert_eq!(h.store.count_matching(&dead_filter).await.expect("count"), 0, "out of the dead letters");
    assert_eq!(h.store.discard_receipt(&ReceiptId::generate(crate::START)).await.expect("discard"), None);
    assert_eq!(h.store.replay_receipt(&dead).await.expect("replay"), Some(ReceiptStatus::Discarded));
    assert_eq!(status_of(h, &dead).await, ReceiptStatus::Accepted);
    assert_eq!(lease_one(h).await.receipt_id, dead);
}

pub async fn bulk_replay_replays_every_match_step_by_step_and_only_once<S: EventStore + ?Sized>(h: &Harness<S>) {
    let early = dead_letters(h, "a", 4).await;
    h.clock.advance(Duration::from_secs(60));
    let middle = crate::START.plus(Duration::from_secs(30));
    let late = dead_letters(h, "a", 3).await;
    let other = dead_letters(h, "b", 2).await;
    accepted(h, event("a", "fine", "{}")).await;
    finish_all(h, ReceiptStatus::Completed).await;
    let dead_in_a = ReceiptFilter { source: Some("a".into()), status: Some(ReceiptStatus::Dead), ..Default::default() };
    let count = |f: ReceiptFilter| {
        let store = Arc::clone(&h.store);
        async move { store.count_matching(&f).await.expect("count") }
    };
    assert_eq!(count(dead_in_a.clone()).await, 7, "the dry run's count");
    assert_eq!(count(dead_in_a.clone().created_before(middle)).await, 4);
    assert_eq!(count(dead_in_a.clone().created_after(middle)).await, 3);
    let event_id = h.store.get_receipt(&early[1]).await.expect("get").expect("receipt").event_id;
    let by_event = ReceiptFilter { event_id: Some(event_id), ..dead_in_a.clone() };
    assert_eq!(count(by_event).await, 1, "by event id");
    assert_eq!(count(ReceiptFilter { status: Some(ReceiptStatus::Completed), ..Default::default() }).await, 1);

    let first = h.store.replay_matching(&ReceiptFilter { limit: 3, ..dead_in_a.clone() }).await.expect("step");
    assert_eq!((first.replayed, first.next.as_ref()), (3, Some(&late[0])), "newest first, three per step");
    let rest = replay_all(h, ReceiptFilter { limit: 3, before: first.next, ..dead_in_a.clone() }).await;
    assert_eq!(rest, 4);
    for id in early.iter().chain(&late) {
        assert_eq!(status_of(h, id).await, ReceiptStatus::Accepted, "{id}");
    }
    for id in &other {
        assert_eq!(status_of(h, id).await, ReceiptStatus::Dead, "another source is left alone");
    }
    assert_eq!(replay_all(h, ReceiptFilter { limit: 3, ..dead_in_a }).await, 0, "repeating it finds nothing");
    let jobs = h.store.lease_jobs(1000, LEASE, &[]).await.expect("lease");
    assert_eq!(jobs.len(), 7, "one delivery per replayed receipt");
    assert!(jobs.iter().all(|j| j.attempt == 1));
}

pub async fn concurrent_bulk_replays_replay_each_receipt_once<S: EventStore + ?Sized>(h: &Harness<S>) {
    dead_letters(h, "partner", 60).await;
    let dead = ReceiptFilter { status: Some(ReceiptStatus::Dead), limit: 7, ..Default::default() };
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (store, mut filter) = (Arc::clone(&h.store), dead.clone());
            tokio::spawn(async move {
                let mut total = 0;
                loop {
                    let step = store.replay_matching(&filter).await.expect("step");
                    total += step.replayed;
                    match step.next {
                        Some(next) => filter.before = Some(next),
                        None => return total,
                    }
                }
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("task");
    }
    assert_eq!(total, 60, "each dead letter replayed by exactly one of four replays");
    assert_eq!(h.store.lease_jobs(1000, LEASE, &[]).await.expect("lease").len(), 60, "one job each");
}

pub async fn retention_deletes_old_handled_receipts_and_keeps_dead_letters<S: EventStore + ?Sized>(h: &Harness<S>) {
    let old_dead = dead_letters(h, "partner", 2).await;
    assert_eq!(h.store.discard_receipt(&old_dead[1]).await.expect("discard"), Some(ReceiptStatus::Dead));
    let old_done = accepted(h, event("partner", "done", "{}")).await;
    finish_all(h, ReceiptStatus::Completed).await;
    let reporting = accepted(h, event("reports", "reporting", "{}")).await;
    let job = lease_one(h).await;
    let t = Transition {
        attempt: attempt(1, 200),
        job: JobNext::Remove,
        change: Change::Receipt { status: ReceiptStatus::Completed, result_job: Some(b"{}".to_vec()) },
    };
    assert!(h.store.finish_job(&job, t).await.expect("finish"));
    h.clock.advance(Duration::from_secs(3600));
    let cutoff = h.clock.now();
    h.clock.advance(Duration::from_secs(1));
    let new_done = accepted(h, event("partner", "new", "{}")).await;
    let job = h.store.lease_jobs(10, LEASE, &["reports".to_owned()]).await.expect("lease").remove(0);
    assert!(h.store.finish_job(&job, delivered(attempt(1, 200), ReceiptStatus::Completed, None)).await.expect("ok"));
    assert_eq!(h.store.delete_ended_receipts(cutoff, 1).await.expect("delete"), 1, "at most the limit");
    assert_eq!(h.store.delete_ended_receipts(cutoff, 100).await.expect("delete"), 1);
    assert_eq!(h.store.delete_ended_receipts(cutoff, 100).await.expect("delete"), 0);
    for gone in [&old_done, &old_dead[1]] {
        assert!(h.store.get_receipt(gone).await.expect("get").is_none(), "{gone} deleted");
    }
    assert_eq!(status_of(h, &old_dead[0]).await, ReceiptStatus::Dead, "dead letters stay until handled");
    assert_eq!(status_of(h, &new_done).await, ReceiptStatus::Completed, "newer than the cutoff");
    assert_eq!(status_of(h, &reporting).await, ReceiptStatus::Completed, "its result webhook is still queued");
    assert_eq!(
        h.store.accept_event(event("partner", "done", "{}")).await.map(|a| matches!(a, Accept::Accepted { .. })).ok(),
        Some(true),
        "once deleted, the event id is new again"
    );
}
