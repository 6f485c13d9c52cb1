//! Events in PostgreSQL: intake dedup by the (source, event id) unique constraint with the receipt
//! and its first job in one transaction; a job queue that several nodes lease from with
//! `FOR UPDATE SKIP LOCKED`; attempts, result jobs and replays as in the embedded store.

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
    "SELECT id, payload_hash, status FROM receipts WHERE source = $1 AND event_id = $2",
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
/// One statement leases the jobs, marks their deliveries' receipts `processing` and reads what
/// each job needs. Receipts are locked newest first, in the order a bulk replay locks them: in any
/// other order a lease and a replay of the same receipts can each hold what the other waits for.
const LEASE: Sql = Sql::cached(
    "WITH picked AS MATERIALIZED (
        SELECT id FROM jobs WHERE due_at <= $3 AND (lease_until IS NULL OR lease_until <= $3)
        AND NOT (source = ANY($5)) ORDER BY due_at LIMIT $4 FOR UPDATE SKIP LOCKED),
    leased AS (
        UPDATE jobs SET lease_until = $1, token = $2 FROM picked WHERE jobs.id = picked.id
        RETURNING jobs.id, jobs.receipt_id, jobs.kind, jobs.attempt, jobs.body),
    locked AS MATERIALIZED (
        SELECT id FROM receipts WHERE id IN (SELECT receipt_id FROM leased WHERE kind = $6)
        ORDER BY id DESC FOR NO KEY UPDATE),
    processing AS (
        UPDATE receipts SET status = $7, updated_at = $3 FROM locked WHERE receipts.id = locked.id)
    SELECT l.id, l.receipt_id, l.kind, l.attempt, l.body, r.source, r.event_id, r.body, r.content_type, r.round
    FROM leased l LEFT JOIN receipts r ON r.id = l.receipt_id",
    &[Type::INT8, Type::BYTEA, Type::INT8, Type::INT8, Type::TEXT_ARRAY, Type::INT2, Type::TEXT],
);

pub async fn lease(
    client: &mut Object,
    limit: usize,
    lease: Duration,
    busy: &[String],
    now: Timestamp,
) -> Result<Vec<Job>, StoreError> {
    let token = LeaseToken::generate();
    let processing = status_column(ReceiptStatus::Processing);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
        [&now.plus(lease).millis(), &&token.0[..], &now.millis(), &(limit as i64), &busy, &DELIVERY, &processing];
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
    let tokens: Vec<&[u8]> = jobs.iter().map(|j| &j.token.0[..]).collect();
    const RELEASE: Sql = Sql::cached(
        "UPDATE jobs SET lease_until = NULL, token = NULL
         FROM unnest($1::bigint[], $2::bytea[]) AS held (id, token)
         WHERE jobs.id = held.id AND jobs.token = held.token",
        &[Type::INT8_ARRAY, Type::BYTEA_ARRAY],
    );
    let released = client.execute(&RELEASE, &[&ids, &tokens]).await.map_err(commit_error)?;
    Ok(released as usize)
}

/// Persists an attempt's transition, if `job`'s lease still holds: the job's own change (due again
/// later, or removed) is made only on the lease's token while it holds, and says whether it did.
pub async fn finish(client: &mut Object, job: &Job, t: &Transition, now: Timestamp) -> Result<bool, StoreError> {
    let (token, now_ms) = (&job.token.0[..], now.millis());
    retrying!(client, |tx| {
        let changed = match &t.job {
            JobNext::RetryAt(at) => tx.execute(&RETRY_AT, &[&job.id, &at.millis(), &token, &now_ms]).await?,
            JobNext::Remove => tx.execute(&REMOVE, &[&job.id, &token, &now_ms]).await?,
        };
        let held = changed == 1;
        if held {
            persist(&tx, job, t, now).await?;
        }
        Ok(held)
    })
}

const RETRY_AT: Sql = Sql::cached(
    "UPDATE jobs SET attempt = attempt + 1, due_at = $2, lease_until = NULL, token = NULL
     WHERE id = $1 AND token = $3 AND lease_until > $4",
    &[Type::INT8, Type::INT8, Type::BYTEA, Type::INT8],
);
const REMOVE: Sql = Sql::cached(
    "DELETE FROM jobs WHERE id = $1 AND token = $2 AND lease_until > $3",
    &[Type::INT8, Type::BYTEA, Type::INT8],
);
const RECEIPT_STATUS: Sql = Sql::cached(
    "UPDATE receipts SET status = $2, updated_at = $3, next_attempt_at = $4 WHERE id = $1",
    &[Type::TEXT, Type::TEXT, Type::INT8, Type::INT8],
);

/// The rest of a transition, once its job's change was made: the receipt's.
async fn persist(tx: &Tx<'_>, job: &Job, t: &Transition, now: Timestamp) -> Result<(), tokio_postgres::Error> {
    let rid = job.receipt_id.as_str();
    match &t.change {
        Change::Receipt { status, result_job } => {
            record_attempt(tx, rid, &t.attempt).await?;
            tx.execute(&RECEIPT_STATUS, &[&rid, &status_column(*status), &now.millis(), &t.next_attempt_at()]).await?;
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

/// An attempt's record, once: only the holder of the job's lease records it, and each lease of a
/// job is a new attempt number or a new round, so the row is new but for a transition recorded
/// twice, which keeps the first. Not `ON CONFLICT`: that writes a speculative insertion and its
/// confirmation (48 bytes of WAL per event); two transactions inserting the same row at once
/// meet the primary key, and the one rolled back finds the row when it runs again.
const ATTEMPT: Sql = Sql::cached(
    "INSERT INTO attempts (receipt_id, round, n, started_at, duration_ms, status_code, error, response)
     SELECT $1, r.round, $2, $3, $4, $5, $6, $7 FROM receipts r WHERE r.id = $1
     AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.receipt_id = $1 AND a.round = r.round AND a.n = $2)",
    &[Type::TEXT, Type::INT4, Type::INT8, Type::INT8, Type::INT4, Type::TEXT, Type::TEXT],
);

async fn record_attempt(tx: &Tx<'_>, rid: &str, a: &AttemptRecord) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        &ATTEMPT,
        &[
            &rid,
            &(a.n as i32),
            &a.started_at.millis(),
            &(a.duration_ms as i64),
            &a.status_code.map(i32::from),
            &a.error,
            &a.response,
        ],
    )
    .await
    .map(drop)
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
const LOCKED_STATUS: Sql = Sql::cached("SELECT status FROM receipts WHERE id = $1 FOR NO KEY UPDATE", &[Type::TEXT]);

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
/// nodes replaying the same filter wait for each other rather than deadlock, and so does a lease
/// of their delivery jobs, which locks in the same order) and their status is read again after the
/// lock, so a receipt another node just replayed is not replayed twice.
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

/// The WHERE clause of `filter` with only the conditions it sets, so that the planner picks the
/// index that fits; its parameters, and their types (all text).
fn filter_sql(filter: &ReceiptFilter) -> (String, Vec<String>, Vec<Type>) {
    let (mut terms, mut values, mut in_flight, mut add_any_source) = (Vec::new(), Vec::new(), false, false);
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
            // In flight: each has its delivery job, and the jobs are few beside the receipts.
            None => {
                add("status =", status_column(status).to_owned());
                in_flight = true;
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
    if in_flight {
        terms.push(format!("id IN (SELECT receipt_id FROM jobs WHERE kind = {DELIVERY})"));
    }
    let clause = if terms.is_empty() { String::new() } else { format!("WHERE {}", terms.join(" AND ")) };
    let types = vec![Type::TEXT; values.len()];
    (clause, values, types)
}

const RECEIPT_COLUMNS: &str = "id, source, event_id, status, created_at, updated_at, round, result_status, result_attempts, result_status_code, result_error, next_attempt_at";

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
    const ATTEMPTS: Sql = Sql::once(
        "SELECT n, started_at, duration_ms, status_code, error, response, round FROM attempts WHERE receipt_id = $1 ORDER BY round, n",
        &[Type::TEXT],
    );
    let text = format!("SELECT {RECEIPT_COLUMNS}, body, content_type FROM receipts WHERE id = $1");
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
    Ok(Some(receipt))
}

pub async fn list(client: &Object, filter: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError> {
    let (clause, values, types) = filter_sql(filter);
    let text = format!("SELECT {RECEIPT_COLUMNS} FROM receipts {clause} ORDER BY id DESC LIMIT {}", filter.limit);
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
    const COUNT: Sql = Sql::once("SELECT source, status, count(*) FROM receipts GROUP BY source, status", &[]);
    let rows = client.query(&COUNT, &[]).await.map_err(store_error)?;
    rows.iter()
        .map(|r| Ok((r.get::<_, String>(0), status_of(&r.get::<_, String>(1))?, r.get::<_, i64>(2) as u64)))
        .collect()
}
