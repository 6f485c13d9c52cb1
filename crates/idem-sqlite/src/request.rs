//! Leased keys in SQLite: the writer's begin / complete / release / extend, and the readers' peek.
//! Atomicity comes from the single writer: a begin reads and writes the row in one command, with
//! no other write in between.

use std::time::Duration;

use idem_core::request::{Begin, Forget, LeaseToken, NewRequest, RequestState};
use idem_core::{ClaimId, StoreError, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};

use crate::row::store_error;

const IN_FLIGHT: i64 = 0;
const COMPLETED: i64 = 1;

/// A row as stored.
struct Row {
    fingerprint: Vec<u8>,
    state: i64,
    until: i64,
    response: Option<Vec<u8>>,
}

fn read(conn: &Connection, id: &ClaimId) -> Result<Option<Row>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT fingerprint, state, until, response FROM requests WHERE id = ?1")
        .map_err(store_error)?;
    stmt.query_row([&id.0[..]], |r| {
        Ok(Row { fingerprint: r.get(0)?, state: r.get(1)?, until: r.get(2)?, response: r.get(3)? })
    })
    .optional()
    .map_err(store_error)
}

fn stored_result(id: &ClaimId, bytes: Option<Vec<u8>>) -> Result<Vec<u8>, StoreError> {
    bytes.ok_or_else(|| StoreError::Internal(format!("request {id}: completed without a result")))
}

pub fn begin(conn: &Connection, request: &NewRequest, now: Timestamp) -> Result<Begin, StoreError> {
    let existing = read(conn, &request.id)?;
    if let Some(row) = existing.as_ref().filter(|row| row.until > now.millis()) {
        let same_fingerprint = row.fingerprint == request.fingerprint;
        return Ok(if row.state == IN_FLIGHT {
            Begin::InFlight { same_fingerprint, lease_until: Timestamp(row.until) }
        } else {
            let result = stored_result(&request.id, row.response.clone())?;
            Begin::Completed { same_fingerprint, result, expires_at: Timestamp(row.until) }
        });
    }
    let token = LeaseToken::generate();
    let lease_until = now.plus(request.lease);
    conn.prepare_cached(
        "INSERT INTO requests (id, fingerprint, state, token, until, response) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (id) DO UPDATE SET fingerprint = excluded.fingerprint, state = excluded.state,
             token = excluded.token, until = excluded.until, response = excluded.response",
    )
    .and_then(|mut s| {
        s.execute(params![
            &request.id.0[..],
            &request.fingerprint[..],
            IN_FLIGHT,
            &token.0[..],
            lease_until.millis(),
            &request.held
        ])
    })
    .map_err(store_error)?;
    let lease_expired = existing.is_some_and(|row| row.state == IN_FLIGHT);
    Ok(Begin::Started { token, lease_until, lease_expired })
}

pub fn complete(
    conn: &Connection,
    id: &ClaimId,
    token: &LeaseToken,
    response: &[u8],
    ttl: Duration,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let changed = conn
        .prepare_cached(
            "UPDATE requests SET state = ?1, token = NULL, until = ?2, response = ?3
             WHERE id = ?4 AND state = ?5 AND token = ?6 AND until > ?7",
        )
        .and_then(|mut s| {
            s.execute(params![
                COMPLETED,
                now.plus(ttl).millis(),
                response,
                &id.0[..],
                IN_FLIGHT,
                &token.0[..],
                now.millis()
            ])
        })
        .map_err(store_error)?;
    Ok(changed == 1)
}

pub fn release(conn: &Connection, id: &ClaimId, token: &LeaseToken) -> Result<bool, StoreError> {
    let changed = conn
        .prepare_cached("DELETE FROM requests WHERE id = ?1 AND state = ?2 AND token = ?3")
        .and_then(|mut s| s.execute(params![&id.0[..], IN_FLIGHT, &token.0[..]]))
        .map_err(store_error)?;
    Ok(changed == 1)
}

pub fn extend(
    conn: &Connection,
    id: &ClaimId,
    token: &LeaseToken,
    lease: Duration,
    now: Timestamp,
) -> Result<Option<Timestamp>, StoreError> {
    let until = now.plus(lease);
    let changed = conn
        .prepare_cached("UPDATE requests SET until = ?1 WHERE id = ?2 AND state = ?3 AND token = ?4 AND until > ?5")
        .and_then(|mut s| s.execute(params![until.millis(), &id.0[..], IN_FLIGHT, &token.0[..], now.millis()]))
        .map_err(store_error)?;
    Ok((changed == 1).then_some(until))
}

pub fn peek(conn: &Connection, id: &ClaimId, now: Timestamp) -> Result<Option<RequestState>, StoreError> {
    let Some(row) = read(conn, id)?.filter(|row| row.until > now.millis()) else { return Ok(None) };
    let fingerprint: [u8; 32] = row
        .fingerprint
        .as_slice()
        .try_into()
        .map_err(|_| StoreError::Internal(format!("request {id}: bad fingerprint")))?;
    Ok(Some(if row.state == IN_FLIGHT {
        RequestState::InFlight {
            fingerprint,
            lease_until: Timestamp(row.until),
            held: row.response.unwrap_or_default(),
        }
    } else {
        RequestState::Completed {
            fingerprint,
            result: stored_result(id, row.response)?,
            expires_at: Timestamp(row.until),
        }
    }))
}

/// Deletes a live completed row; reports a held one.
pub fn forget(conn: &Connection, id: &ClaimId, now: Timestamp) -> Result<Forget, StoreError> {
    let deleted = conn
        .prepare_cached("DELETE FROM requests WHERE id = ?1 AND state = ?2 AND until > ?3")
        .and_then(|mut s| s.execute(params![&id.0[..], COMPLETED, now.millis()]))
        .map_err(store_error)?;
    if deleted == 1 {
        return Ok(Forget::Forgotten);
    }
    let held = read(conn, id)?.is_some_and(|row| row.state == IN_FLIGHT && row.until > now.millis());
    Ok(if held { Forget::InFlight } else { Forget::Absent })
}

/// Deletes up to `limit` gateway rows that no longer hold anything: completed records past
/// their TTL and leases that ran out.
pub fn sweep(conn: &Connection, limit: usize, now: Timestamp) -> Result<usize, StoreError> {
    conn.prepare_cached(
        "DELETE FROM requests WHERE rowid IN (SELECT rowid FROM requests WHERE until <= ?1 ORDER BY until LIMIT ?2)",
    )
    .and_then(|mut s| s.execute(params![now.millis(), limit as i64]))
    .map_err(store_error)
}
