//! Statements that change at most N rows keep to N whatever plan PostgreSQL picks (#42). The
//! conformance checks that bound a lease, a sweep, a retention step or a delete by prefix run here
//! on the plans that broke them: the queue's table analyzed while empty (as autovacuum leaves a
//! drained queue), and a session whose planner may use nothing but nested loops, so that the pick
//! is on the inner side and could be run once per row. On the database IDEM_TEST_DATABASE_URL
//! names, a schema per test; skipped, loudly, without it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_conformance::{Harness, START, claims, events};
use idem_core::request::{Begin, NewRequest};
use idem_core::{EventStore, ManualClock, RequestStore};
use idem_postgres::PgStore;

/// What a planner left with nested loops only does: the outer statement scans its table and runs
/// the pick on the inner side, once per row unless the pick is materialized.
const NESTED_LOOPS_ONLY: &str = "-c enable_hashjoin=off -c enable_hashagg=off -c enable_mergejoin=off \
                                 -c enable_material=off -c enable_sort=off";

/// A schema of the test's own, dropped when the harness goes.
struct Schema {
    url: String,
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                if let Ok((client, connection)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                    tokio::spawn(connection);
                    let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE")).await;
                }
            });
        })
        .join();
    }
}

/// A store on a fresh schema whose sessions run with `settings`, and a connection of its own to
/// that schema (to analyze a table).
async fn postgres(settings: &str) -> Option<(Harness<PgStore>, tokio_postgres::Client)> {
    let Ok(url) = std::env::var("IDEM_TEST_DATABASE_URL") else {
        idem_conformance::skipped("IDEM_TEST_DATABASE_URL is not set: a PostgreSQL plan test did not run");
        return None;
    };
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!("idem_plans_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}")).await.expect("schema");
    admin.batch_execute(&format!("SET search_path = {name}")).await.expect("search_path");
    let mut config: tokio_postgres::Config = url.parse().expect("valid URL");
    config.options(format!("-c search_path={name} {settings}"));
    let clock = Arc::new(ManualClock::new(START));
    let options = idem_postgres::PgOptions { pool_size: 4, ..Default::default() };
    let store = PgStore::with_config(config, &options, idem_postgres::TimeSource::Given(clock.clone()))
        .await
        .expect("open PgStore");
    let harness = Harness { store: Arc::new(store), clock, guard: Box::new(Schema { url, name }) };
    Some((harness, admin))
}

/// A first attempt that the handler answered 200: the receipt completed, its job removed.
fn delivered() -> idem_core::event::Transition {
    let attempt = idem_core::event::AttemptRecord {
        round: 1,
        n: 1,
        started_at: START,
        duration_ms: 1,
        status_code: Some(200),
        error: None,
        response: None,
    };
    let change =
        idem_core::event::Change::Receipt { status: idem_core::event::ReceiptStatus::Completed, result_job: None };
    idem_core::event::Transition { attempt, job: idem_core::event::JobNext::Remove, change }
}

/// The queue as autovacuum leaves it once it drains: 100 jobs delivered and deleted, then the
/// empty table analyzed (its pages counted, none of its rows live), so that the planner reckons
/// with one row whatever is queued since.
async fn drained_and_analyzed(h: &Harness<PgStore>, admin: &tokio_postgres::Client) {
    events::accept_many(h, "partner", 100).await;
    let jobs = h.store.lease_jobs(1000, Duration::from_secs(150), &[]).await.expect("lease");
    assert_eq!(jobs.len(), 100, "every job leased");
    for job in &jobs {
        assert!(h.store.finish_job(job, delivered()).await.expect("finish"));
    }
    admin.batch_execute("ANALYZE jobs").await.expect("analyze");
    let row = admin.query_one("SELECT relpages, reltuples FROM pg_class WHERE oid = 'jobs'::regclass", &[]).await;
    let (pages, rows): (i32, f32) = row.map(|r| (r.get(0), r.get(1))).expect("statistics");
    assert!(pages > 0 && rows == 0.0, "analyzed while empty: {pages} pages, {rows} rows");
}

/// The case: after a drained queue was analyzed, a lease of 10 took every due job.
#[tokio::test]
async fn a_lease_takes_at_most_its_limit_after_the_queue_was_analyzed_empty() {
    let Some((h, admin)) = postgres("").await else { return };
    drained_and_analyzed(&h, &admin).await;
    events::a_lease_takes_at_most_its_limit(&h).await;
}

#[tokio::test]
async fn a_lease_takes_at_most_its_limit_with_nested_loops_only() {
    let Some((h, _)) = postgres(NESTED_LOOPS_ONLY).await else { return };
    events::a_lease_takes_at_most_its_limit(&h).await;
}

#[tokio::test]
async fn retention_deletes_at_most_its_limit_with_nested_loops_only() {
    let Some((h, _)) = postgres(NESTED_LOOPS_ONLY).await else { return };
    events::retention_deletes_old_handled_receipts_and_keeps_dead_letters(&h).await;
}

#[tokio::test]
async fn the_claims_sweep_deletes_at_most_its_limit_with_nested_loops_only() {
    let Some((h, _)) = postgres(NESTED_LOOPS_ONLY).await else { return };
    claims::sweeper_deletes_only_expired_in_bounded_batches(&h).await;
}

#[tokio::test]
async fn a_delete_by_prefix_deletes_at_most_its_limit_with_nested_loops_only() {
    let Some((h, _)) = postgres(NESTED_LOOPS_ONLY).await else { return };
    claims::delete_prefix_removes_only_that_prefix(&h).await;
}

/// Five completed keys past their TTL, swept two at a time.
#[tokio::test]
async fn the_requests_sweep_deletes_at_most_its_limit_with_nested_loops_only() {
    let Some((h, _)) = postgres(NESTED_LOOPS_ONLY).await else { return };
    let ttl = Duration::from_secs(10);
    for key in ["a", "b", "c", "d", "e"] {
        let request = NewRequest {
            id: idem_conformance::id(&["gateway", key]),
            fingerprint: [1; 32],
            lease: Duration::from_secs(60),
            keep: ttl,
            held: Vec::new(),
            client: None,
        };
        let Begin::Started { token, .. } = h.store.begin_request(request.clone()).await.expect("begin") else {
            panic!("{key} was free")
        };
        assert!(h.store.complete_request(&request.id, token, b"done", ttl).await.expect("complete").is_some());
    }
    h.clock.advance(Duration::from_secs(60) + ttl); // the sweep looks at a row once its lease and TTL have passed
    assert_eq!(h.store.sweep_requests(2).await.expect("sweep"), 2, "a sweep is bounded by its limit");
    assert_eq!(h.store.sweep_requests(2).await.expect("sweep"), 2);
    assert_eq!(h.store.sweep_requests(2).await.expect("sweep"), 1);
}

/// A result kept longer than its begin planned (a TTL past `keep`) and a lease extended past its
/// plan: the sweep finds each at the planned time, keeps it, and deletes it once its time is up.
#[tokio::test]
async fn the_requests_sweep_keeps_a_row_whose_time_moved_past_its_plan() {
    let Some((h, _)) = postgres(NESTED_LOOPS_ONLY).await else { return };
    let (lease, keep) = (Duration::from_secs(60), Duration::from_secs(10));
    let request = |key: &str| NewRequest {
        id: idem_conformance::id(&["gateway", key]),
        fingerprint: [1; 32],
        lease,
        keep,
        held: Vec::new(),
        client: None,
    };
    let begin = |r: NewRequest| {
        let store = h.store.clone();
        async move {
            match store.begin_request(r).await.expect("begin") {
                Begin::Started { token, .. } => token,
                other => panic!("free, got {other:?}"),
            }
        }
    };
    let kept = request("kept longer");
    let token = begin(kept.clone()).await;
    let ttl = Duration::from_secs(3600);
    assert!(h.store.complete_request(&kept.id, token, b"done", ttl).await.expect("complete").is_some());
    let extended = request("extended");
    let token = begin(extended.clone()).await;
    assert!(h.store.extend_request(&extended.id, token, Duration::from_secs(600)).await.expect("extend").is_some());
    h.clock.advance(lease + keep);
    assert_eq!(h.store.sweep_requests(10).await.expect("sweep"), 0, "both are found, and kept");
    assert!(h.store.peek_request(&kept.id).await.expect("peek").is_some(), "its result is still there");
    h.clock.advance(ttl);
    assert_eq!(h.store.sweep_requests(10).await.expect("sweep"), 1, "the result, once its TTL has passed");
    h.clock.advance(idem_core::request::ENDED_LEASE_KEPT);
    assert_eq!(h.store.sweep_requests(10).await.expect("sweep"), 1, "the lease, once it ended and was kept");
    assert_eq!(h.store.sweep_requests(10).await.expect("sweep"), 0);
}

/// The updates idem makes change no indexed column, and their tables leave room on each page
/// (schema.rs, migration 5), so that PostgreSQL can write them as HOT updates, with no new index
/// entry: a gateway key's or operation's completion, extension and release; a receipt's status
/// changes and its result webhook's state; a job's lease. Read from the catalog: no index names
/// one of those columns, as a key, an `INCLUDE`, an expression or a predicate. (Whether a given
/// update then is HOT also depends on what else the cluster runs: an open transaction anywhere
/// keeps old row versions from being pruned, and their page full. `bench/pgcost.sh` counts 95–100 %
/// alone; counted while other tests ran on the same cluster, 112 of 200 receipt updates were.)
#[tokio::test]
async fn the_columns_idem_updates_are_in_no_index() {
    let Some((_h, admin)) = postgres("").await else { return };
    let updated: [(&str, &[&str]); 3] = [
        ("requests", &["state", "token", "until", "response"]),
        (
            "receipts",
            &[
                "status",
                "updated_at",
                "next_attempt_at",
                "result_status",
                "result_attempts",
                "result_status_code",
                "result_error",
                "last_round",
                "last_n",
                "last_started_at",
                "last_duration_ms",
                "last_status_code",
                "last_error",
                "last_response",
            ],
        ),
        ("jobs", &["lease_until", "token", "leased_at"]),
    ];
    let indexes = "SELECT c.relname::text, pg_get_indexdef(i.indexrelid) FROM pg_index i
                   JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = current_schema()::regnamespace";
    let rows = admin.query(indexes, &[]).await.expect("indexes");
    for (table, columns) in updated {
        let definitions: Vec<String> =
            rows.iter().filter(|r| r.get::<_, String>(0) == table).map(|r| r.get::<_, String>(1)).collect();
        assert!(!definitions.is_empty(), "{table} has its indexes");
        for definition in &definitions {
            let words: Vec<&str> = definition.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
            for column in columns {
                assert!(
                    !words.contains(column),
                    "{table}: an update sets {column}, which an index names: {definition}"
                );
            }
        }
        let options = "SELECT coalesce(reloptions::text, '') FROM pg_class WHERE oid = $1::text::regclass";
        let options: String = admin.query_one(options, &[&table]).await.expect("options").get(0);
        assert!(options.contains("fillfactor=80"), "{table} leaves room on each page: {options}");
    }
}

/// A receipt that a node of an older version (before schema version 6) leased: it wrote
/// `processing` into the receipt and left the job's `leased_at` empty. It reads, lists and counts as
/// `processing`, not as `accepted`, and a node of this version finishes its job.
#[tokio::test]
async fn a_receipt_an_older_node_leased_reads_as_processing() {
    use idem_core::event::{ReceiptFilter, ReceiptStatus};
    let Some((h, admin)) = postgres("").await else { return };
    events::accept_many(&h, "partner", 1).await;
    let job = h.store.lease_jobs(1, Duration::from_secs(30), &[]).await.expect("lease").pop().expect("one job");
    admin
        .batch_execute(&format!(
            "UPDATE receipts SET status = 'processing' WHERE id = '{}'; UPDATE jobs SET leased_at = NULL",
            job.receipt_id.as_str()
        ))
        .await
        .expect("as an older node leaves it");
    let receipt = h.store.get_receipt(&job.receipt_id).await.expect("get").expect("receipt");
    assert_eq!(receipt.status, ReceiptStatus::Processing);
    for (status, n) in [(ReceiptStatus::Processing, 1), (ReceiptStatus::Accepted, 0)] {
        let filter = ReceiptFilter { status: Some(status), limit: 10, ..Default::default() };
        assert_eq!(h.store.list_receipts(&filter).await.expect("list").len(), n, "{status:?}");
        assert_eq!(h.store.count_matching(&filter).await.expect("count"), n as u64, "{status:?}");
    }
    assert!(h.store.finish_job(&job, delivered()).await.expect("finish"));
    let receipt = h.store.get_receipt(&job.receipt_id).await.expect("get").expect("receipt");
    assert_eq!((receipt.status, receipt.attempts.len()), (ReceiptStatus::Completed, 1));
}
