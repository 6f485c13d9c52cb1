//! Events in PostgreSQL: intake dedup by the (source, event id) unique constraint with the receipt
//! and its first job in one transaction; a job queue that several nodes lease from with
//! `FOR UPDATE SKIP LOCKED`; attempts, result jobs and replays as in the embedded store.
//!
//! Written for few writes per event (schema.rs, migrations 5 and 6): a lease changes only its
//! jobs (a receipt is `processing` while its delivery job has been leased: `status!`), and an
//! attempt is kept in its receipt's row until the next one (the update that sets the status).

use std::time::Duration;

use idem_core::event::{
    Accept, AttemptRecord, Change, Discard, Job, JobKind, JobNext, NewEvent, Receipt, ReceiptFilter, ReceiptId,
    ReceiptStatus, Replay, ReplayBatch, ResultState, ResultWebhookState, Transition,
};
use idem_core::request::LeaseToken;
use idem_core::{StoreError, Timestamp};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::pool::Object;
use crate::sql::{Run, Sql, Tx};
use crate::{commit_error, retrying, run_again, store_error};

const DELIVERY: i16 = 0;
const RESULT: i16 = 1;

fn internal(what: &str) -> StoreError {
    StoreError::Internal(format!("event store: {what}"))
}

/// The `receipts.status` column holds the lifecycle's own names for its states (one mapping, in
/// core: `ReceiptStatus::as_str`).
fn status_column(status: ReceiptStatus) -> &'static str {
    status.as_str()
}

/// The `receipts.parked` column, which PostgreSQL generates from the status: the status while a
/// receipt waits for an operator (a dead letter, or one discarded), else null. Only it is indexed
/// (schema.rs, migration 5): the status's other changes, two per event, leave every index as it was.
fn parked(status: ReceiptStatus) -> Option<&'static str> {
    matches!(status, ReceiptStatus::Dead | ReceiptStatus::Discarded).then(|| status_column(status))
}

fn status_of(text: &str) -> Result<ReceiptStatus, StoreError> {
    ReceiptStatus::parse(text).ok_or_else(|| internal("unknown receipt status"))
}

/// A receipt's status as readers see it, from the receipt `r`: the stored one, but `processing` for
/// a receipt waiting for delivery (`accepted`, `retrying`) whose delivery job has been leased,
/// since a lease writes only the job (`leased_at`; a retry clears it). Found by the jobs' key,
/// which starts with the receipt. The names are `ReceiptStatus::as_str`'s (a test checks).
/// (A macro, so that statements can be `concat!`ed from it.)
macro_rules! status {
    () => {
        "CASE WHEN r.status IN ('accepted', 'retrying') AND EXISTS (SELECT 1 FROM jobs j
            WHERE j.receipt_id = r.id AND j.kind = 0 AND j.leased_at IS NOT NULL) THEN 'processing' ELSE r.status END"
    };
}

/// When a receipt's status last changed: a lease's start for one `processing` by [`status!`].
macro_rules! updated_at {
    () => {
        "greatest(r.updated_at, (SELECT max(j.leased_at) FROM jobs j
            WHERE j.receipt_id = r.id AND j.kind = 0 AND r.status IN ('accepted', 'retrying')))"
    };
}

/// The `receipts.result_status` column likewise (`ResultWebhookState::as_str`).
fn result_column(state: ResultWebhookState) -> &'static str {
    state.as_str()
}

fn result_of(text: &str) -> Result<ResultWebhookState, StoreError> {
    ResultWebhookState::parse(text).ok_or_else(|| internal("unknown result webhook state"))
}

fn receipt_id(text: &str) -> Result<ReceiptId, StoreError> {
    ReceiptId::parse(text).map_err(|_| internal("bad receipt id"))
}

const ENQUEUE: Sql = Sql::cached(
    "INSERT INTO jobs (receipt_id, source, kind, attempt, due_at, body) SELECT id, source, $2, 1, $3, $4 FROM receipts WHERE id = $1",
    &[Type::TEXT, Type::INT2, Type::INT8, Type::BYTEA],
);

async fn enqueue(
    tx: &Tx<'_>,
    id: &str,
    kind: i16,
    due: Timestamp,
    body: Option<&[u8]>,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(&ENQUEUE, &[&id, &kind, &due.millis(), &body]).await.map(drop)
}

/// A new event's receipt and its first delivery job, in one statement; a duplicate inserts neither.
const INTAKE: Sql = Sql::cached(
    "WITH receipt AS (
        INSERT INTO receipts (id, source, event_id, payload_hash, body, content_type, status, round, created_at, updated_at)
        VALUES ($1, $2, $3, $4, $5, $6, $8, 1, $7, $7)
        ON CONFLICT (source, event_id) DO NOTHING RETURNING id, source),
    job AS (
        INSERT INTO jobs (receipt_id, source, kind, attempt, due_at) SELECT id, source, $9, 1, $7 FROM receipt)
    SELECT id FROM receipt",
    &[Type::TEXT, Type::TEXT, Type::TEXT, Type::BYTEA, Type::BYTEA, Type::TEXT, Type::INT8, Type::TEXT, Type::INT2],
);
const BY_EVENT_ID: Sql = Sql::cached(
    concat!("SELECT id, payload_hash, ", status!(), " FROM receipts r WHERE source = $1 AND event_id = $2"),
    &[Type::TEXT, Type::TEXT],
);

pub async fn accept(client: &mut Object, e: &NewEvent, now: Timestamp) -> Result<Accept, StoreError> {
    retrying!(client, |tx| {
        let id = ReceiptId::generate(now);
        let inserted = tx
            .query_opt(
                &INTAKE,
                &[
                    &id.as_str(),
                    &e.source,
                    &e.event_id,
                    &&e.payload_hash[..],
                    &e.body,
                    &e.content_type,
                    &now.millis(),
                    &status_column(ReceiptStatus::Accepted),
                    &DELIVERY,
                ],
            )
            .await?;
        if inserted.is_some() {
            Ok(Accept::Accepted { receipt_id: id })
        } else {
            let row = tx.query_one(&BY_EVENT_ID, &[&e.source, &e.event_id]).await?;
            let (rid, hash, status): (String, Vec<u8>, String) = (row.get(0), row.get(1), row.get(2));
            receipt_id(&rid).and_then(|receipt_id| {
                Ok(if e.matches(&hash) {
                    Accept::Duplicate { receipt_id, status: status_of(&status)? }
                } else {
                    Accept::Mismatch { receipt_id }
                })
            })
        }
    })
}

/// Leases up to `$4` due jobs. Every statement here and in the sweeps that changes at most N rows
/// picks them first in a `MATERIALIZED` CTE, which PostgreSQL runs once. Written as `WHERE id IN
/// (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)`, the subquery may be run again for each row the
/// outer statement looks at (the inner side of a nested loop: the plan chosen once the table was
/// analyzed while empty, as autovacuum does to a drained queue), and each run passes over the rows
/// this statement already changed and locks the next ones: a lease of 10 took 55 of 100 due jobs
/// (tests/plans.rs), and a worker left 2,870 of a burst of 3,000 leased and unattempted (#42).
///
/// One statement leases the jobs and reads what each needs. It writes only the jobs: their
/// deliveries' receipts read as `processing` from then on (`status!`), without a write of their
/// own (a row lock and a new row version each, about 160 bytes of WAL per event).
const LEASE: Sql = Sql::cached(
    "WITH picked AS MATERIALIZED (
        SELECT receipt_id, id FROM jobs WHERE due_at <= $3 AND (lease_until IS NULL OR lease_until <= $3)
        AND NOT (source = ANY($5)) ORDER BY due_at LIMIT $4 FOR NO KEY UPDATE SKIP LOCKED),
    leased AS (
        UPDATE jobs SET lease_until = $1, token = $2, leased_at = $3 FROM picked
        WHERE jobs.receipt_id = picked.receipt_id AND jobs.id = picked.id
        RETURNING jobs.id, jobs.receipt_id, jobs.kind, jobs.attempt, jobs.body)
    SELECT l.id, l.receipt_id, l.kind, l.attempt, l.body, r.source, r.event_id, r.body, r.content_type, r.round
    FROM leased l LEFT JOIN receipts r ON r.id = l.receipt_id",
    &[Type::INT8, Type::BYTEA, Type::INT8, Type::INT8, Type::TEXT_ARRAY],
);

pub async fn lease(
    client: &mut Object,
    limit: usize,
    lease: Duration,
    busy: &[String],
    now: Timestamp,
) -> Result<Vec<Job>, StoreError> {
    let token = LeaseToken::generate();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&now.plus(lease).millis(), &&token.0[..], &now.millis(), &(limit as i64), &busy];
    let mut tries = 0;
    loop {
        match client.query(&LEASE, &params).await {
            Ok(leased) => return leased.iter().map(|row| leased_job(row, token)).collect(),
            Err(e) if tries < 3 && run_again(&e) => tries += 1,
            // One statement, committing on its own: broken under it, the jobs may be leased (they
            // are due again when the lease ends).
            Err(e) => return Err(commit_error(e)),
        }
    }
}

/// The job a leased row stands for (its receipt's columns from the sixth on).
fn leased_job(row: &Row, token: LeaseToken) -> Result<Job, StoreError> {
    let rid: String = row.get(1);
    let kind = if row.get::<_, i16>(2) == RESULT { JobKind::Result } else { JobKind::Delivery };
    let source: Option<String> = row.get(5);
    let source = source.ok_or_else(|| internal("a leased job without its receipt"))?;
    let (body, content_type) = match kind {
        JobKind::Delivery => (row.get::<_, Option<Vec<u8>>>(7).unwrap_or_default(), row.get::<_, Option<String>>(8)),
        JobKind::Result => (row.get::<_, Option<Vec<u8>>>(4).unwrap_or_default(), Some("application/json".to_owned())),
    };
    Ok(Job {
        id: row.get(0),
        kind,
        receipt_id: receipt_id(&rid)?,
        source,
        event_id: row.get(6),
        attempt: row.get::<_, i32>(3) as u32,
        round: row.get::<_, i32>(9) as u32,
        body,
        content_type,
        token,
    })
}

/// Ends the leases `jobs` still hold (their tokens): each is due again at once, as when a lease runs
/// out. One statement for them all.
pub async fn release(client: &Object, jobs: &[Job]) -> Result<usize, StoreError> {
    let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
    let receipts: Vec<&str> = jobs.iter().map(|j| j.receipt_id.as_str()).collect();
    let tokens: Vec<&[u8]> = jobs.iter().map(|j| &j.token.0[..]).collect();
    const RELEASE: Sql = Sql::cached(
        "UPDATE jobs SET lease_until = NULL, token = NULL
         FROM unnest($1::bigint[], $2::text[], $3::bytea[]) AS held (id, receipt_id, token)
         WHERE jobs.receipt_id = held.receipt_id AND jobs.id = held.id AND jobs.token = held.token",
        &[Type::INT8_ARRAY, Type::TEXT_ARRAY, Type::BYTEA_ARRAY],
    );
    let released = client.execute(&RELEASE, &[&ids, &receipts, &tokens]).await.map_err(commit_error)?;
    Ok(released as usize)
}

/// Persists an attempt's transition, if `job`'s lease still holds: the job's own change (due again
/// later, or removed) is made only on the lease's token while it holds, and says whether it did.
pub async fn finish(client: &mut Object, job: &Job, t: &Transition, now: Timestamp) -> Result<bool, StoreError> {
    let (token, now_ms, rid) = (&job.token.0[..], now.millis(), job.receipt_id.as_str());
    retrying!(client, |tx| {
        let changed = match &t.job {
            JobNext::RetryAt(at) => tx.execute(&RETRY_AT, &[&job.id, &at.millis(), &token, &now_ms, &rid]).await?,
            JobNext::Remove => tx.execute(&REMOVE, &[&job.id, &token, &now_ms, &rid]).await?,
        };
        let held = changed == 1;
        if held {
            persist(&tx, job, t, now).await?;
        }
        Ok(held)
    })
}

/// Due again later: the receipt reads as `retrying` again until the next lease (`status!`).
const RETRY_AT: Sql = Sql::cached(
    "UPDATE jobs SET attempt = attempt + 1, due_at = $2, lease_until = NULL, token = NULL, leased_at = NULL
     WHERE receipt_id = $5 AND id = $1 AND token = $3 AND lease_until > $4",
    &[Type::INT8, Type::INT8, Type::BYTEA, Type::INT8, Type::TEXT],
);
const REMOVE: Sql = Sql::cached(
    "DELETE FROM jobs WHERE receipt_id = $4 AND id = $1 AND token = $2 AND lease_until > $3",
    &[Type::INT8, Type::BYTEA, Type::INT8, Type::TEXT],
);

/// An attempt's transition of its receipt, one statement: the new status, and the attempt kept in
/// the receipt's own row (`last_*`), which the same update writes (HOT: no indexed column changes;
/// as a row of `attempts` it was a row and an index entry, about 280 bytes of WAL per event). The
/// attempt kept before it, if any, moves to `attempts` (the insert reads the row as it was before
/// the statement); each lease of a job is a new attempt number or a new round, and only the
/// lease's holder gets here, so that row is new: `NOT EXISTS` rather than `ON CONFLICT`, which
/// writes a speculative insertion and its confirmation.
const RECEIPT_ATTEMPT: Sql = Sql::cached(
    "WITH kept AS (
        INSERT INTO attempts (receipt_id, round, n, started_at, duration_ms, status_code, error, response)
        SELECT id, last_round, last_n, last_started_at, last_duration_ms, last_status_code, last_error, last_response
        FROM receipts r WHERE id = $1 AND last_n IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.receipt_id = $1 AND a.round = r.last_round AND a.n = r.last_n))
    UPDATE receipts SET status = $2, updated_at = $3, next_attempt_at = $4, last_round = round, last_n = $5,
        last_started_at = $6, last_duration_ms = $7, last_status_code = $8, last_error = $9, last_response = $10
    WHERE id = $1",
    &[
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::INT4,
        Type::INT8,
        Type::INT8,
        Type::INT4,
        Type::TEXT,
        Type::TEXT,
    ],
);

/// The rest of a transition, once its job's change was made: the receipt's.
async fn persist(tx: &Tx<'_>, job: &Job, t: &Transition, now: Timestamp) -> Result<(), tokio_postgres::Error> {
    let rid = job.receipt_id.as_str();
    match &t.change {
        Change::Receipt { status, result_job } => {
            let a = &t.attempt;
            let params: [&(dyn ToSql + Sync); 10] = [
                &rid,
                &status_column(*status),
                &now.millis(),
                &t.next_attempt_at(),
                &(a.n as i32),
                &a.started_at.millis(),
                &(a.duration_ms as i64),
                &a.status_code.map(i32::from),
                &a.error,
                &a.response,
            ];
            tx.execute(&RECEIPT_ATTEMPT, &params).await?;
            if let Some(body) = result_job {
                enqueue(tx, rid, RESULT, now, Some(body)).await?;
                set_result(tx, rid, ResultWebhookState::Pending, 0, None, None).await?;
            }
        }
        Change::ResultWebhook(state) => {
            let a = &t.attempt;
            set_result(tx, rid, *state, a.n, a.status_code, a.error.as_deref()).await?;
        }
    }
    Ok(())
}

const RESULT_STATE: Sql = Sql::cached(
    "UPDATE receipts SET result_status = $2, result_attempts = $3, result_status_code = $4, result_error = $5
     WHERE id = $1",
    &[Type::TEXT, Type::TEXT, Type::INT4, Type::INT4, Type::TEXT],
);

async fn set_result(
    tx: &Tx<'_>,
    rid: &str,
    state: ResultWebhookState,
    attempts: u32,
    status_code: Option<u16>,
    error: Option<&str>,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(&RESULT_STATE, &[&rid, &result_column(state), &(attempts as i32), &status_code.map(i32::from), &error])
        .await
        .map(drop)
}

/// A receipt's status, its row locked for a change.
const LOCKED_STATUS: Sql =
    Sql::cached(concat!("SELECT ", status!(), " FROM receipts r WHERE id = $1 FOR NO KEY UPDATE OF r"), &[Type::TEXT]);

pub async fn replay(client: &mut Object, id: &ReceiptId, now: Timestamp) -> Result<Option<ReceiptStatus>, StoreError> {
    retrying!(client, |tx| {
        let row = tx.query_opt(&LOCKED_STATUS, &[&id.as_str()]).await?;
        match row.map(|r| status_of(&r.get::<_, String>(0))).transpose() {
            Err(e) => Err(e),
            Ok(None) => Ok(None),
            Ok(Some(status)) => {
                if idem_core::event::replay(status) == Replay::Restart {
                    restart(&tx, id.as_str(), now).await?;
                }
                Ok(Some(status))
            }
        }
    })
}

/// A new round from attempt 1: status `accepted`, the result webhook's state cleared, one delivery
/// job due now.
async fn restart(tx: &Tx<'_>, id: &str, now: Timestamp) -> Result<(), tokio_postgres::Error> {
    const RESTART: Sql = Sql::cached(
        "UPDATE receipts SET status = $3, round = round + 1, updated_at = $2, result_status = NULL WHERE id = $1",
        &[Type::TEXT, Type::INT8, Type::TEXT],
    );
    tx.execute(&RESTART, &[&id, &now.millis(), &status_column(ReceiptStatus::Accepted)]).await?;
    enqueue(tx, id, DELIVERY, now, None).await
}

/// One step of a bulk replay in one transaction. The matching rows are locked newest first (so two
/// nodes replaying the same filter wait for each other rather than deadlock; a lease locks no
/// receipt) and their status is read again after the lock, so a receipt another node just
/// replayed is not replayed twice.
pub async fn replay_matching(
    client: &mut Object,
    filter: &ReceiptFilter,
    now: Timestamp,
) -> Result<ReplayBatch, StoreError> {
    let Some(status) = filter.status.filter(|s| idem_core::event::replay(*s) == Replay::Restart) else {
        return Err(internal("a bulk replay needs an ended status"));
    };
    const RESTART_ALL: Sql = Sql::cached(
        "UPDATE receipts SET status = $3, round = round + 1, updated_at = $2, result_status = NULL
         WHERE id = ANY($1) AND status = $4 RETURNING id",
        &[Type::TEXT_ARRAY, Type::INT8, Type::TEXT, Type::TEXT],
    );
    const ENQUEUE_ALL: Sql = Sql::cached(
        "INSERT INTO jobs (receipt_id, source, kind, attempt, due_at, body)
         SELECT id, source, $2, 1, $3, NULL FROM receipts WHERE id = ANY($1)",
        &[Type::TEXT_ARRAY, Type::INT2, Type::INT8],
    );
    let (clause, values, types) = filter_sql(filter);
    let text =
        format!("SELECT id, status FROM receipts {clause} ORDER BY id DESC LIMIT {} FOR NO KEY UPDATE", filter.limit);
    let (select, params) = (Sql::once(&text, &types), as_params(&values));
    let (ids, replayed): (Vec<String>, u64) = retrying!(client, |tx| {
        let rows = tx.query(&select, &params).await?;
        let matching: Vec<String> =
            rows.iter().filter(|r| r.get::<_, String>(1) == status_column(status)).map(|r| r.get(0)).collect();
        // Set-based, so a step of 500 is three round trips, not a thousand.
        let (accepted, ended) = (status_column(ReceiptStatus::Accepted), status_column(status));
        let restarted = tx.query(&RESTART_ALL, &[&matching, &now.millis(), &accepted, &ended]).await?;
        let restarted: Vec<String> = restarted.iter().map(|r| r.get(0)).collect();
        if !restarted.is_empty() {
            tx.execute(&ENQUEUE_ALL, &[&restarted, &DELIVERY, &now.millis()]).await?;
        }
        Ok::<_, StoreError>((rows.iter().map(|r| r.get(0)).collect(), restarted.len() as u64))
    })?;
    let next = if ids.len() < filter.limit { None } else { ids.last().map(|id| receipt_id(id)).transpose()? };
    Ok(ReplayBatch { replayed, next })
}

const DISCARD: Sql = Sql::cached(
    "UPDATE receipts SET status = $2, updated_at = $3 WHERE id = $1",
    &[Type::TEXT, Type::TEXT, Type::INT8],
);

/// Marks a dead receipt as handled; answers the status it had.
pub async fn discard(client: &mut Object, id: &ReceiptId, now: Timestamp) -> Result<Option<ReceiptStatus>, StoreError> {
    retrying!(client, |tx| {
        let row = tx.query_opt(&LOCKED_STATUS, &[&id.as_str()]).await?;
        match row.map(|r| status_of(&r.get::<_, String>(0))).transpose() {
            Err(e) => Err(e),
            Ok(None) => Ok(None),
            Ok(Some(status)) => {
                if idem_core::event::discard(status) == Discard::Discard {
                    tx.execute(&DISCARD, &[&id.as_str(), &status_column(ReceiptStatus::Discarded), &now.millis()])
                        .await?;
                }
                Ok(Some(status))
            }
        }
    })
}

/// Retention: deletes handled receipts last updated before `before`, with their attempts. Only
/// receipts created before it qualify (a range of the primary key, oldest first); one whose result webhook is
/// still queued is kept for now; rows another node is deleting are skipped.
pub async fn delete_ended(client: &mut Object, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
    let statuses: Vec<&str> = ReceiptStatus::ALL
        .into_iter()
        .filter(|s| idem_core::event::retention_may_delete(*s))
        .map(status_column)
        .collect();
    let floor = ReceiptId::floor(before);
    let done = [result_column(ResultWebhookState::Delivered), result_column(ResultWebhookState::Failed)];
    // At most `limit` picked, once ([`LEASE`] says why it is a `MATERIALIZED` CTE).
    const DELETE_ENDED: Sql = Sql::once(
        "WITH picked AS MATERIALIZED (
             SELECT id FROM receipts WHERE status = ANY($1) AND id < $2 AND updated_at < $3
             AND (result_status IS NULL OR result_status = ANY($5))
             ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED),
         gone AS (DELETE FROM receipts USING picked WHERE receipts.id = picked.id RETURNING receipts.id),
         attempts_gone AS (DELETE FROM attempts WHERE receipt_id IN (SELECT id FROM gone))
         SELECT count(*) FROM gone",
        &[Type::TEXT_ARRAY, Type::TEXT, Type::INT8, Type::INT8, Type::TEXT_ARRAY],
    );
    let row = client
        .query_one(&DELETE_ENDED, &[&statuses, &floor.as_str(), &before.millis(), &(limit as i64), &&done[..]])
        .await
        .map_err(commit_error)?;
    Ok(row.get::<_, i64>(0) as usize)
}

fn as_params(values: &[String]) -> Vec<&(dyn ToSql + Sync)> {
    values.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

/// Every source that has receipts, one probe of the (source, event id) key each (a loose index
/// scan), so that a search by event id alone needs no index of its own (schema.rs, migration 5).
const SOURCES: &str = "WITH RECURSIVE s (source) AS (
        SELECT min(source) FROM receipts
        UNION ALL SELECT (SELECT min(source) FROM receipts WHERE receipts.source > s.source) FROM s WHERE s.source IS NOT NULL)
    SELECT source FROM s WHERE source IS NOT NULL";

/// Receipts in flight, by their delivery job.
enum InFlight {
    /// Not leased since the receipt was accepted or its last attempt failed.
    Waiting,
    /// Leased: `processing`.
    Leased,
}

/// The WHERE clause of `filter` with only the conditions it sets, so that the planner picks the
/// index that fits; its parameters, and their types (all text).
fn filter_sql(filter: &ReceiptFilter) -> (String, Vec<String>, Vec<Type>) {
    let (mut terms, mut values, mut in_flight, mut add_any_source) = (Vec::new(), Vec::new(), None, false);
    let mut add = |term: &str, value: String| {
        values.push(value);
        terms.push(format!("{term} ${}", values.len()));
    };
    if let Some(source) = &filter.source {
        add("source =", source.clone());
    }
    if let Some(status) = filter.status {
        match parked(status) {
            // The dead letters: a range of their own index.
            Some(parked) => add("parked =", parked.to_owned()),
            // Completed: most receipts are, so the newest are found at once walking the primary key.
            None if status == ReceiptStatus::Completed => add("status =", status_column(status).to_owned()),
            // In flight: each has its delivery job, and the jobs are few beside the receipts; one
            // is `processing` once the job has been leased (`status!`).
            None if status == ReceiptStatus::Processing => in_flight = Some(InFlight::Leased),
            None => {
                add("status =", status_column(status).to_owned());
                in_flight = Some(InFlight::Waiting);
            }
        }
    }
    if let Some(event_id) = &filter.event_id {
        add("event_id =", event_id.clone());
        if filter.source.is_none() {
            // Each source's range of the (source, event id) key: the sources are few.
            add_any_source = true;
        }
    }
    if let Some(before) = &filter.before {
        add("id <", before.as_str().to_owned());
    }
    if let Some(from) = &filter.from {
        add("id >=", from.as_str().to_owned());
    }
    if add_any_source {
        terms.push(format!("source IN ({SOURCES})"));
    }
    let jobs =
        |leased: &str| format!("id IN (SELECT receipt_id FROM jobs WHERE kind = {DELIVERY} AND leased_at IS {leased})");
    match in_flight {
        None => {}
        Some(InFlight::Waiting) => terms.push(jobs("NULL")),
        // `processing` stored is what nodes before schema version 6 wrote at a lease.
        Some(InFlight::Leased) => terms.push(format!(
            "(status = '{}' OR (status IN ('{}', '{}') AND {}))",
            status_column(ReceiptStatus::Processing),
            status_column(ReceiptStatus::Accepted),
            status_column(ReceiptStatus::Retrying),
            jobs("NOT NULL")
        )),
    }
    let clause = if terms.is_empty() { String::new() } else { format!("WHERE {}", terms.join(" AND ")) };
    let types = vec![Type::TEXT; values.len()];
    (clause, values, types)
}

/// A receipt's columns as [`to_receipt`] reads them, from `receipts r`.
const RECEIPT_COLUMNS: &str = concat!(
    "r.id, r.source, r.event_id, ",
    status!(),
    ", r.created_at, ",
    updated_at!(),
    ", r.round, r.result_status, r.result_attempts, r.result_status_code, r.result_error, r.next_attempt_at"
);

fn to_receipt(r: &Row) -> Result<Receipt, StoreError> {
    let status = status_of(&r.get::<_, String>(3))?;
    Ok(Receipt {
        id: receipt_id(&r.get::<_, String>(0))?,
        source: r.get(1),
        event_id: r.get(2),
        status,
        next_attempt_at: r.get::<_, Option<i64>>(11).filter(|_| status == ReceiptStatus::Retrying).map(Timestamp),
        created_at: Timestamp(r.get(4)),
        updated_at: Timestamp(r.get(5)),
        round: r.get::<_, i32>(6) as u32,
        attempts: Vec::new(),
        body: None,
        content_type: None,
        result: r.get::<_, Option<String>>(7).map(|s| result_of(&s)).transpose()?.map(|status| ResultState {
            status,
            attempts: r.get::<_, i32>(8) as u32,
            last_status_code: r.get::<_, Option<i32>>(9).and_then(|c| u16::try_from(c).ok()),
            last_error: r.get(10),
        }),
    })
}

pub async fn get(client: &Object, id: &ReceiptId) -> Result<Option<Receipt>, StoreError> {
    // The attempts before the latest, and the latest, kept in the receipt's row (RECEIPT_ATTEMPT).
    const ATTEMPTS: Sql = Sql::once(
        "SELECT n, started_at, duration_ms, status_code, error, response, round FROM attempts WHERE receipt_id = $1
         UNION ALL SELECT last_n, last_started_at, last_duration_ms, last_status_code, last_error, last_response, last_round
         FROM receipts WHERE id = $1 AND last_n IS NOT NULL
         ORDER BY 7, 1",
        &[Type::TEXT],
    );
    let text = format!("SELECT {RECEIPT_COLUMNS}, r.body, r.content_type FROM receipts r WHERE r.id = $1");
    let row = client.query_opt(&Sql::once(&text, &[Type::TEXT]), &[&id.as_str()]).await.map_err(store_error)?;
    let Some(row) = row else { return Ok(None) };
    let mut receipt = to_receipt(&row)?;
    (receipt.body, receipt.content_type) = (Some(row.get(12)), row.get(13));
    let rows = client.query(&ATTEMPTS, &[&id.as_str()]).await.map_err(store_error)?;
    receipt.attempts = rows
        .iter()
        .map(|r| AttemptRecord {
            round: r.get::<_, i32>(6) as u32,
            n: r.get::<_, i32>(0) as u32,
            started_at: Timestamp(r.get(1)),
            duration_ms: r.get::<_, i64>(2) as u64,
            status_code: r.get::<_, Option<i32>>(3).and_then(|c| u16::try_from(c).ok()),
            error: r.get(4),
            response: r.get(5),
        })
        .collect();
    // Written by one statement that moves the kept attempt as it replaces it, an attempt is in one
    // place or the other; should both ever hold it, it is listed once.
    receipt.attempts.dedup_by_key(|a| (a.round, a.n));
    Ok(Some(receipt))
}

pub async fn list(client: &Object, filter: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError> {
    let (clause, values, types) = filter_sql(filter);
    let text = format!("SELECT {RECEIPT_COLUMNS} FROM receipts r {clause} ORDER BY id DESC LIMIT {}", filter.limit);
    let rows = client.query(&Sql::once(&text, &types), &as_params(&values)).await.map_err(store_error)?;
    rows.iter().map(to_receipt).collect()
}

pub async fn count_matching(client: &Object, filter: &ReceiptFilter) -> Result<u64, StoreError> {
    let (clause, values, types) = filter_sql(filter);
    let text = format!("SELECT count(*) FROM receipts {clause}");
    let row = client.query_one(&Sql::once(&text, &types), &as_params(&values)).await.map_err(store_error)?;
    Ok(row.get::<_, i64>(0) as u64)
}

pub async fn count_receipts(client: &Object) -> Result<Vec<(String, ReceiptStatus, u64)>, StoreError> {
    const COUNT: Sql =
        Sql::once(concat!("SELECT source, ", status!(), ", count(*) FROM receipts r GROUP BY 1, 2"), &[]);
    let rows = client.query(&COUNT, &[]).await.map_err(store_error)?;
    rows.iter()
        .map(|r| Ok((r.get::<_, String>(0), status_of(&r.get::<_, String>(1))?, r.get::<_, i64>(2) as u64)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statuses `status!` and `updated_at!` name in SQL are core's names for them.
    #[test]
    fn the_derived_status_names_cores_statuses() {
        for status in [ReceiptStatus::Accepted, ReceiptStatus::Retrying, ReceiptStatus::Processing] {
            let quoted = format!("'{}'", status_column(status));
            assert!(status!().contains(&quoted), "{quoted} in status!");
        }
        for status in [ReceiptStatus::Accepted, ReceiptStatus::Retrying] {
            assert!(updated_at!().contains(&format!("'{}'", status_column(status))));
        }
    }
}
