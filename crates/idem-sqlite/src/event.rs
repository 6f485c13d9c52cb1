//! Events in SQLite: intake (receipt + first job in the writer's one transaction), the job queue
//! leased by workers, attempts, replays; and the readers' receipt queries.

use std::time::Duration;

use idem_core::event::{
    Accept, AttemptRecord, Change, Discard, Job, JobKind, JobNext, NewEvent, QueueStats, Receipt, ReceiptFilter,
    ReceiptId, ReceiptStatus, Replay, ReplayBatch, ResultState, ResultWebhookState, Transition,
};
use idem_core::request::LeaseToken;
use idem_core::{StoreError, Timestamp};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use crate::row::store_error;

/// A leased job row: id, receipt id, kind, attempt, result body.
type LeasedRow = (i64, String, i64, u32, Option<Vec<u8>>);

const DELIVERY: i64 = 0;
const RESULT: i64 = 1;

fn internal(what: &str) -> StoreError {
    StoreError::Internal(format!("event store: {what}"))
}

/// The `receipts.status` column holds the lifecycle's own names for its states (one mapping, in
/// core: `ReceiptStatus::as_str`).
fn status_column(status: ReceiptStatus) -> &'static str {
    status.as_str()
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

fn receipt_id(text: String) -> Result<ReceiptId, StoreError> {
    ReceiptId::parse(&text).map_err(|_| internal("bad receipt id"))
}

pub fn accept(conn: &Connection, event: &NewEvent, now: Timestamp) -> Result<Accept, StoreError> {
    let existing: Option<(String, Vec<u8>, String)> = conn
        .prepare_cached("SELECT id, payload_hash, status FROM receipts WHERE source = ?1 AND event_id = ?2")
        .and_then(|mut s| {
            s.query_row(params![event.source, event.event_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional()
        })
        .map_err(store_error)?;
    if let Some((id, hash, status)) = existing {
        let receipt_id = receipt_id(id)?;
        return Ok(if event.matches(&hash) {
            Accept::Duplicate { receipt_id, status: status_of(&status)? }
        } else {
            Accept::Mismatch { receipt_id }
        });
    }
    let id = ReceiptId::generate(now);
    conn.prepare_cached(
        "INSERT INTO receipts (id, source, event_id, payload_hash, body, content_type, status, round, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?8, 1, ?7, ?7)",
    )
    .and_then(|mut s| {
        s.execute(params![
            id.as_str(),
            event.source,
            event.event_id,
            &event.payload_hash[..],
            event.body,
            event.content_type,
            now.millis(),
            status_column(ReceiptStatus::Accepted)
        ])
    })
    .map_err(store_error)?;
    enqueue(conn, &id, DELIVERY, now, None)?;
    Ok(Accept::Accepted { receipt_id: id })
}

fn enqueue(
    conn: &Connection,
    id: &ReceiptId,
    kind: i64,
    due: Timestamp,
    body: Option<&[u8]>,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO jobs (receipt_id, source, kind, attempt, due_at, body)
         SELECT id, source, ?2, 1, ?3, ?4 FROM receipts WHERE id = ?1",
    )
    .and_then(|mut s| s.execute(params![id.as_str(), kind, due.millis(), body]))
    .map(drop)
    .map_err(store_error)
}

pub fn lease(
    conn: &Connection,
    limit: usize,
    lease: Duration,
    busy: &[String],
    now: Timestamp,
) -> Result<Vec<Job>, StoreError> {
    let busy = serde_json::to_string(busy).map_err(|e| internal(&e.to_string()))?;
    let token = LeaseToken::generate();
    let mut stmt = conn
        .prepare_cached(
            "UPDATE jobs SET lease_until = ?1, token = ?2
             WHERE id IN (SELECT id FROM jobs WHERE due_at <= ?3 AND (lease_until IS NULL OR lease_until <= ?3)
                          AND source NOT IN (SELECT value FROM json_each(?5))
                          ORDER BY due_at LIMIT ?4)
             RETURNING id, receipt_id, kind, attempt, body",
        )
        .map_err(store_error)?;
    let leased: Vec<LeasedRow> = stmt
        .query_map(params![now.plus(lease).millis(), &token.0[..], now.millis(), limit as i64, busy], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .and_then(|rows| rows.collect())
        .map_err(store_error)?;
    let mut receipt = conn
        .prepare_cached("SELECT source, event_id, body, content_type, round FROM receipts WHERE id = ?1")
        .map_err(store_error)?;
    let mut processing =
        conn.prepare_cached("UPDATE receipts SET status = ?3, updated_at = ?2 WHERE id = ?1").map_err(store_error)?;
    let mut jobs = Vec::with_capacity(leased.len());
    for (id, rid, kind, attempt, job_body) in leased {
        let (source, event_id, event_body, content_type, round): (String, String, Vec<u8>, Option<String>, u32) =
            receipt
                .query_row([&rid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
                .map_err(store_error)?;
        let kind = if kind == RESULT { JobKind::Result } else { JobKind::Delivery };
        let (body, content_type) = match kind {
            JobKind::Delivery => {
                processing
                    .execute(params![rid, now.millis(), status_column(ReceiptStatus::Processing)])
                    .map_err(store_error)?;
                (event_body, content_type)
            }
            JobKind::Result => (job_body.unwrap_or_default(), Some("application/json".to_owned())),
        };
        let receipt_id = receipt_id(rid)?;
        jobs.push(Job { id, kind, receipt_id, source, event_id, attempt, round, body, content_type, token });
    }
    Ok(jobs)
}

/// Ends the leases `jobs` still hold (their tokens): each is due again at once, as when a lease runs
/// out.
pub fn release(conn: &Connection, jobs: &[(i64, LeaseToken)]) -> Result<usize, StoreError> {
    let mut statement = conn
        .prepare_cached("UPDATE jobs SET lease_until = NULL, token = NULL WHERE id = ?1 AND token = ?2")
        .map_err(store_error)?;
    let mut released = 0;
    for (id, token) in jobs {
        released += statement.execute(params![id, &token.0[..]]).map_err(store_error)?;
    }
    Ok(released)
}

/// Persists an attempt's transition, if `job`'s lease still holds.
pub fn finish(conn: &Connection, job: &Job, t: &Transition, now: Timestamp) -> Result<bool, StoreError> {
    if !holds_lease(conn, job, now)? {
        return Ok(false);
    }
    move_job(conn, job.id, &t.job)?;
    let rid = job.receipt_id.as_str();
    match &t.change {
        Change::Receipt { status, result_job } => {
            record_attempt(conn, rid, &t.attempt)?;
            set_status(conn, rid, *status, now, t.next_attempt_at())?;
            if let Some(body) = result_job {
                enqueue(conn, &job.receipt_id, RESULT, now, Some(body))?;
                set_result(conn, rid, ResultWebhookState::Pending, 0, None, None)?;
            }
        }
        Change::ResultWebhook(state) => {
            set_result(conn, rid, *state, t.attempt.n, t.attempt.status_code, t.attempt.error.as_deref())?
        }
    }
    Ok(true)
}

fn holds_lease(conn: &Connection, job: &Job, now: Timestamp) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM jobs WHERE id = ?1 AND token = ?2 AND lease_until > ?3")
        .and_then(|mut s| s.exists(params![job.id, &job.token.0[..], now.millis()]))
        .map_err(store_error)
}

fn move_job(conn: &Connection, id: i64, next: &JobNext) -> Result<(), StoreError> {
    match next {
        JobNext::RetryAt(at) => conn
            .prepare_cached(
                "UPDATE jobs SET attempt = attempt + 1, due_at = ?2, lease_until = NULL, token = NULL WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![id, at.millis()])),
        JobNext::Remove => conn.prepare_cached("DELETE FROM jobs WHERE id = ?1").and_then(|mut s| s.execute([id])),
    }
    .map(drop)
    .map_err(store_error)
}

fn record_attempt(conn: &Connection, rid: &str, a: &AttemptRecord) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO attempts (receipt_id, round, n, started_at, duration_ms, status_code, error, response)
         SELECT ?1, round, ?2, ?3, ?4, ?5, ?6, ?7 FROM receipts WHERE id = ?1",
    )
    .and_then(|mut s| {
        s.execute(params![rid, a.n, a.started_at.millis(), a.duration_ms as i64, a.status_code, a.error, a.response])
    })
    .map(drop)
    .map_err(store_error)
}

fn set_result(
    conn: &Connection,
    rid: &str,
    state: ResultWebhookState,
    attempts: u32,
    status_code: Option<u16>,
    error: Option<&str>,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE receipts SET result_status = ?2, result_attempts = ?3, result_status_code = ?4, result_error = ?5
         WHERE id = ?1",
    )
    .and_then(|mut s| s.execute(params![rid, result_column(state), attempts, status_code, error]))
    .map(drop)
    .map_err(store_error)
}

/// Sets a receipt's status, and when its next attempt is due (`None` unless it is retrying).
fn set_status(
    conn: &Connection,
    rid: &str,
    status: ReceiptStatus,
    now: Timestamp,
    next_attempt_at: Option<i64>,
) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE receipts SET status = ?2, updated_at = ?3, next_attempt_at = ?4 WHERE id = ?1")
        .and_then(|mut s| s.execute(params![rid, status_column(status), now.millis(), next_attempt_at]))
        .map(drop)
        .map_err(store_error)
}

fn status_now(conn: &Connection, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
    let status: Option<String> = conn
        .prepare_cached("SELECT status FROM receipts WHERE id = ?1")
        .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)).optional())
        .map_err(store_error)?;
    status.map(|s| status_of(&s)).transpose()
}

/// Replays a receipt as the lifecycle decides; answers the status it had.
pub fn replay(conn: &Connection, id: &ReceiptId, now: Timestamp) -> Result<Option<ReceiptStatus>, StoreError> {
    let Some(status) = status_now(conn, id)? else { return Ok(None) };
    if idem_core::event::replay(status) == Replay::Restart {
        restart(conn, id, now)?;
    }
    Ok(Some(status))
}

/// A new round from attempt 1: status `accepted`, the result webhook's state cleared, one delivery
/// job due now.
fn restart(conn: &Connection, id: &ReceiptId, now: Timestamp) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE receipts SET status = ?3, round = round + 1, updated_at = ?2, result_status = NULL WHERE id = ?1",
    )
    .and_then(|mut s| s.execute(params![id.as_str(), now.millis(), status_column(ReceiptStatus::Accepted)]))
    .map_err(store_error)?;
    enqueue(conn, id, DELIVERY, now, None)
}

/// One step of a bulk replay (the caller's one transaction): the next `limit` matching receipts.
pub fn replay_matching(conn: &Connection, filter: &ReceiptFilter, now: Timestamp) -> Result<ReplayBatch, StoreError> {
    let Some(status) = filter.status.filter(|s| idem_core::event::replay(*s) == Replay::Restart) else {
        return Err(internal("a bulk replay needs an ended status"));
    };
    let (clause, values) = filter_sql(filter);
    let ids: Vec<String> = conn
        .prepare_cached(&format!("SELECT id FROM receipts {clause} ORDER BY id DESC LIMIT {}", filter.limit))
        .and_then(|mut s| s.query_map(params_from_iter(values), |r| r.get(0))?.collect())
        .map_err(store_error)?;
    let mut replayed = 0;
    for id in &ids {
        let id = receipt_id(id.clone())?;
        if status_now(conn, &id)? == Some(status) {
            restart(conn, &id, now)?;
            replayed += 1;
        }
    }
    let next = if ids.len() < filter.limit { None } else { ids.last().cloned().map(receipt_id).transpose()? };
    Ok(ReplayBatch { replayed, next })
}

/// Marks a dead receipt as handled; answers the status it had.
pub fn discard(conn: &Connection, id: &ReceiptId, now: Timestamp) -> Result<Option<ReceiptStatus>, StoreError> {
    let Some(status) = status_now(conn, id)? else { return Ok(None) };
    if idem_core::event::discard(status) == Discard::Discard {
        set_status(conn, id.as_str(), ReceiptStatus::Discarded, now, None)?;
    }
    Ok(Some(status))
}

/// Retention: deletes handled receipts last updated before `before`, with their attempts. Only
/// receipts created before it can qualify, so the scan is a range of the status index; one whose
/// result webhook is still queued is kept for now.
pub fn delete_ended(conn: &Connection, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
    let mut ids: Vec<String> = Vec::new();
    let floor = ReceiptId::floor(before);
    for status in ReceiptStatus::ALL.into_iter().filter(|s| idem_core::event::retention_may_delete(*s)) {
        let left = limit - ids.len();
        let mut found: Vec<String> = conn
            .prepare_cached(
                "SELECT id FROM receipts WHERE status = ?1 AND id < ?2 AND updated_at < ?3
                 AND (result_status IS NULL OR result_status IN (?5, ?6)) ORDER BY id LIMIT ?4",
            )
            .and_then(|mut s| {
                s.query_map(
                    params![
                        status_column(status),
                        floor.as_str(),
                        before.millis(),
                        left as i64,
                        result_column(ResultWebhookState::Delivered),
                        result_column(ResultWebhookState::Failed)
                    ],
                    |r| r.get(0),
                )?
                .collect()
            })
            .map_err(store_error)?;
        ids.append(&mut found);
    }
    for id in &ids {
        for sql in ["DELETE FROM attempts WHERE receipt_id = ?1", "DELETE FROM receipts WHERE id = ?1"] {
            conn.prepare_cached(sql).and_then(|mut s| s.execute([id])).map_err(store_error)?;
        }
    }
    Ok(ids.len())
}

/// The WHERE clause of `filter` with only the conditions it sets, so that SQLite picks the index
/// that fits (status, source, event id, or the id range alone).
fn filter_sql(filter: &ReceiptFilter) -> (String, Vec<Value>) {
    let mut terms = Vec::new();
    let mut values = Vec::new();
    let mut add = |term: &str, value: Value| {
        values.push(value);
        terms.push(format!("{term} ?{}", values.len()));
    };
    if let Some(source) = &filter.source {
        add("source =", Value::Text(source.clone()));
    }
    if let Some(status) = filter.status {
        add("status =", Value::Text(status_column(status).to_owned()));
    }
    if let Some(event_id) = &filter.event_id {
        add("event_id =", Value::Text(event_id.clone()));
    }
    if let Some(before) = &filter.before {
        add("id <", Value::Text(before.as_str().to_owned()));
    }
    if let Some(from) = &filter.from {
        add("id >=", Value::Text(from.as_str().to_owned()));
    }
    let clause = if terms.is_empty() { String::new() } else { format!("WHERE {}", terms.join(" AND ")) };
    (clause, values)
}

const RECEIPT_COLUMNS: &str = "id, source, event_id, status, created_at, updated_at, round, \
     result_status, result_attempts, result_status_code, result_error, next_attempt_at";

/// A row of `RECEIPT_COLUMNS`, each column read by its name.
struct ReceiptRow {
    id: String,
    source: String,
    event_id: String,
    status: String,
    created_at: i64,
    updated_at: i64,
    round: u32,
    result_status: Option<String>,
    result_attempts: u32,
    result_status_code: Option<u16>,
    result_error: Option<String>,
    next_attempt_at: Option<i64>,
}

fn receipt_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ReceiptRow> {
    Ok(ReceiptRow {
        id: r.get("id")?,
        source: r.get("source")?,
        event_id: r.get("event_id")?,
        status: r.get("status")?,
        created_at: r.get("created_at")?,
        updated_at: r.get("updated_at")?,
        round: r.get("round")?,
        result_status: r.get("result_status")?,
        result_attempts: r.get("result_attempts")?,
        result_status_code: r.get("result_status_code")?,
        result_error: r.get("result_error")?,
        next_attempt_at: r.get("next_attempt_at")?,
    })
}

fn to_receipt(row: ReceiptRow) -> Result<Receipt, StoreError> {
    let status = status_of(&row.status)?;
    let result = row.result_status.map(|state| result_of(&state)).transpose()?.map(|state| ResultState {
        status: state,
        attempts: row.result_attempts,
        last_status_code: row.result_status_code,
        last_error: row.result_error,
    });
    Ok(Receipt {
        id: receipt_id(row.id)?,
        source: row.source,
        event_id: row.event_id,
        status,
        next_attempt_at: row.next_attempt_at.filter(|_| status == ReceiptStatus::Retrying).map(Timestamp),
        created_at: Timestamp(row.created_at),
        updated_at: Timestamp(row.updated_at),
        round: row.round,
        attempts: Vec::new(),
        body: None,
        content_type: None,
        result,
    })
}

pub fn get(conn: &Connection, id: &ReceiptId) -> Result<Option<Receipt>, StoreError> {
    let row = conn
        .prepare_cached(&format!("SELECT {RECEIPT_COLUMNS}, body, content_type FROM receipts WHERE id = ?1"))
        .and_then(|mut s| {
            s.query_row([id.as_str()], |r| Ok((receipt_row(r)?, r.get("body")?, r.get("content_type")?))).optional()
        })
        .map_err(store_error)?;
    let Some((row, body, content_type)) = row else { return Ok(None) };
    let mut receipt = to_receipt(row)?;
    (receipt.body, receipt.content_type) = (Some(body), content_type);
    let mut stmt = conn
        .prepare_cached(
            "SELECT n, started_at, duration_ms, status_code, error, response, round FROM attempts
             WHERE receipt_id = ?1 ORDER BY round, n",
        )
        .map_err(store_error)?;
    receipt.attempts = stmt
        .query_map(params![id.as_str()], |r| {
            Ok(AttemptRecord {
                round: r.get(6)?,
                n: r.get(0)?,
                started_at: Timestamp(r.get(1)?),
                duration_ms: r.get::<_, i64>(2)? as u64,
                status_code: r.get(3)?,
                error: r.get(4)?,
                response: r.get(5)?,
            })
        })
        .and_then(|rows| rows.collect())
        .map_err(store_error)?;
    Ok(Some(receipt))
}

pub fn list(conn: &Connection, filter: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError> {
    let (clause, values) = filter_sql(filter);
    let sql = format!("SELECT {RECEIPT_COLUMNS} FROM receipts {clause} ORDER BY id DESC LIMIT {}", filter.limit);
    let mut stmt = conn.prepare_cached(&sql).map_err(store_error)?;
    let rows: Vec<ReceiptRow> =
        stmt.query_map(params_from_iter(values), receipt_row).and_then(|rows| rows.collect()).map_err(store_error)?;
    rows.into_iter().map(to_receipt).collect()
}

pub fn count_matching(conn: &Connection, filter: &ReceiptFilter) -> Result<u64, StoreError> {
    let (clause, values) = filter_sql(filter);
    conn.prepare_cached(&format!("SELECT count(*) FROM receipts {clause}"))
        .and_then(|mut s| s.query_row(params_from_iter(values), |r| r.get::<_, i64>(0)))
        .map(|n| n as u64)
        .map_err(store_error)
}

pub fn queue_stats(conn: &Connection, now: Timestamp) -> Result<QueueStats, StoreError> {
    conn.prepare_cached("SELECT count(*), min(due_at) FROM jobs WHERE due_at <= ?1")
        .and_then(|mut s| {
            s.query_row([now.millis()], |r| {
                Ok(QueueStats {
                    due: r.get::<_, i64>(0)? as u64,
                    oldest_due_at: r.get::<_, Option<i64>>(1)?.map(Timestamp),
                })
            })
        })
        .map_err(store_error)
}

pub fn count_receipts(conn: &Connection) -> Result<Vec<(String, ReceiptStatus, u64)>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT source, status, count(*) FROM receipts GROUP BY source, status")
        .map_err(store_error)?;
    let rows: Vec<(String, String, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .and_then(|rows| rows.collect())
        .map_err(store_error)?;
    rows.into_iter().map(|(source, status, n)| Ok((source, status_of(&status)?, n as u64))).collect()
}
