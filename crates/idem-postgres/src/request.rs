//! Leased keys in PostgreSQL: a begin is one statement that inserts the key's row, or takes over
//! a row whose time is up, so exactly one of any number of concurrent begins, on any node, takes
//! the key; completion and release are compare-and-set on the lease token. Each take draws a
//! fencing number from one sequence (`request_fences`), so a later holder's is always greater,
//! across nodes and failovers (a sequence's values are logged before they are handed out).

use std::time::Duration;

use idem_core::request::{Begin, Decision, Forget, Found, LeaseToken, NewRequest, RequestState, decide_begin};
use idem_core::{ClaimId, ClientToken, StoreError, Timestamp};
use tokio_postgres::Row;
use tokio_postgres::types::Type;

use crate::pool::Object;
use crate::sql::{Run, Sql};
use crate::{commit_error, run_again, store_error};

// Every statement is prepared once per connection by default (sql.rs): a statement sent as text
// costs a round trip to prepare it each time.
const READ: Sql = Sql::cached(
    "SELECT fingerprint, state, until, response, token, client_token, fence FROM requests WHERE id = $1",
    &[Type::BYTEA],
);
/// A begin in one statement: take the key if it is free (no row, or a row whose lease or TTL ended:
/// `until <= now`), and say what the row was as the statement found it. The primary key makes one
/// of any number of concurrent begins, on any node, the taker; ON CONFLICT re-checks the condition
/// on the row's newest version, so a begin never takes a key another has just taken. The first
/// column is the new fencing number when the key was taken, else null. A key found live (held or
/// completed: a replay, a duplicate) is answered by the read alone: the insert is not tried, so it
/// draws no fencing number, takes no row lock and writes no WAL.
///
/// `sweep_at` (`$8`) is when the sweep first looks at the row: the lease's end plus the TTL the
/// result is meant to be kept, by which time a result completed within its lease has expired. It
/// is the only indexed column besides the key, and nothing but a take or the sweep changes it, so
/// a completion, an extension or a release of a live lease is a HOT update (schema.rs, migration 5).
const BEGIN: Sql = Sql::cached(
    "WITH old AS (
         SELECT fingerprint, state, until, response, token, client_token, fence FROM requests WHERE id = $1),
     taken AS (
         INSERT INTO requests (id, fingerprint, state, token, until, response, client_token, fence, sweep_at)
         SELECT $1, $2, 0, $3, $4, $6, $7, nextval('request_fences'), $8
         WHERE NOT EXISTS (SELECT 1 FROM old WHERE old.until > $5)
         ON CONFLICT (id) DO UPDATE SET fingerprint = excluded.fingerprint, state = 0, token = excluded.token,
             until = excluded.until, response = excluded.response, client_token = excluded.client_token,
             fence = excluded.fence, sweep_at = excluded.sweep_at
         WHERE requests.until <= $5
         RETURNING fence)
     SELECT (SELECT fence FROM taken), old.fingerprint, old.state, old.until, old.response, old.token,
         old.client_token, old.fence
     FROM (SELECT 1) AS one LEFT JOIN old ON true",
    &[Type::BYTEA, Type::BYTEA, Type::BYTEA, Type::INT8, Type::INT8, Type::BYTEA, Type::BYTEA, Type::INT8],
);
/// Completion, extension and release need the row to be the token's lease, live or ended but still
/// kept (`until > $kept_after`, that is now minus ENDED_LEASE_KEPT): a lease that ran out with no
/// begin taking the key since is still its holder's (idem_core::request).
const COMPLETE: Sql = Sql::cached(
    "UPDATE requests SET state = 1, token = NULL, until = $1, response = $2
     WHERE id = $3 AND state = 0 AND token = $4 AND until > $5",
    &[Type::INT8, Type::BYTEA, Type::BYTEA, Type::BYTEA, Type::INT8],
);
/// An extension never shortens a lease: one sent long ago (a call given up on a stalled path, whose
/// bytes went through when the path came back) may arrive after a newer one.
const EXTEND: Sql = Sql::cached(
    "UPDATE requests SET until = GREATEST(until, $1)
     WHERE id = $2 AND state = 0 AND token = $3 AND until > $4 RETURNING until",
    &[Type::INT8, Type::BYTEA, Type::BYTEA, Type::INT8],
);
pub(crate) const RELEASE: Sql = Sql::cached(
    "DELETE FROM requests WHERE id = $1 AND state = 0 AND token = $2 AND until > $3",
    &[Type::BYTEA, Type::BYTEA, Type::INT8],
);
const FORGET: Sql =
    Sql::once("DELETE FROM requests WHERE id = $1 AND state = 1 AND until > $2", &[Type::BYTEA, Type::INT8]);
const HELD: Sql =
    Sql::once("SELECT 1 FROM requests WHERE id = $1 AND state = 0 AND until > $2", &[Type::BYTEA, Type::INT8]);

/// The oldest `until` a lease the store still keeps can have at `now`.
pub(crate) fn kept_after(now: Timestamp) -> i64 {
    now.millis().saturating_sub(idem_core::request::ENDED_LEASE_KEPT.as_millis() as i64)
}

/// A key's row as a begin sees it.
fn found(id: &ClaimId, row: &Row) -> Result<Found, StoreError> {
    found_at(id, row, 0)
}

/// A key's row whose columns start at `at`: fingerprint, state, until, response, token, client
/// token, fence.
fn found_at(id: &ClaimId, row: &Row, at: usize) -> Result<Found, StoreError> {
    let bad = |what: &str| StoreError::Internal(format!("request {id}: {what}"));
    let fingerprint: [u8; 32] =
        row.get::<_, Vec<u8>>(at).try_into().map_err(|_| bad("a fingerprint of the wrong length"))?;
    let until = Timestamp(row.get(at + 2));
    if row.get::<_, i16>(at + 1) == 0 {
        let token = row.get::<_, Option<Vec<u8>>>(at + 4).ok_or_else(|| bad("held without a token"))?;
        let token = LeaseToken(token.try_into().map_err(|_| bad("a token of the wrong length"))?);
        let client = row
            .get::<_, Option<Vec<u8>>>(at + 5)
            .map(|t| t.try_into().map(ClientToken))
            .transpose()
            .map_err(|_| bad("a client token of the wrong length"))?;
        let fence = row.get::<_, i64>(at + 6) as u64;
        return Ok(Found::Held { fingerprint, until, token, client, fence });
    }
    let result: Vec<u8> = row
        .get::<_, Option<Vec<u8>>>(at + 3)
        .ok_or_else(|| StoreError::Internal(format!("request {id}: completed without a result")))?;
    Ok(Found::Completed { fingerprint, until, result })
}

/// The answer of a row someone else holds or completed (its begin committed first).
fn answer(request: &NewRequest, row: &Row, now: Timestamp) -> Result<Begin, StoreError> {
    match decide_begin(Some(found(&request.id, row)?), &request.fingerprint, request.client, now) {
        Decision::Answer(answer) => Ok(answer),
        Decision::Take { .. } => Err(StoreError::Unavailable("a concurrent begin's lease ended at once; retry".into())),
    }
}

pub async fn begin(client: &mut Object, request: &NewRequest, now: Timestamp) -> Result<Begin, StoreError> {
    let mut tries = 0;
    loop {
        match try_begin(client, request, now).await {
            Err(e) if tries < 3 && run_again(&e) => tries += 1,
            // The begin commits on its own: a connection broken under it leaves its outcome unknown
            // (a retry with the same client token learns it).
            other => return other.map_err(commit_error)?,
        }
    }
}

/// One round trip for a key that is free or live; a second only when a concurrent begin changed
/// the row between the statement's look and its insert.
async fn try_begin(
    client: &Object,
    request: &NewRequest,
    now: Timestamp,
) -> Result<Result<Begin, StoreError>, tokio_postgres::Error> {
    let id = &request.id.0[..];
    let token = LeaseToken::generate();
    let lease_until = now.plus(request.lease);
    let client_token = request.client.map(|t| t.0.to_vec());
    let sweep_at = lease_until.plus(request.keep);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
        &id,
        &&request.fingerprint[..],
        &&token.0[..],
        &lease_until.millis(),
        &now.millis(),
        &request.held,
        &client_token,
        &sweep_at.millis(),
    ];
    let row = client.query_one(&BEGIN, &params).await?;
    let before = match row.get::<_, Option<i16>>(2).map(|_| found_at(&request.id, &row, 1)).transpose() {
        Ok(before) => before,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(fence) = row.get::<_, Option<i64>>(0) {
        // Taken: the row before, if any, says whether a lease had run out.
        let lease_expired = matches!(before, Some(Found::Held { .. }));
        return Ok(Ok(Begin::Started { token, lease_until, lease_expired, fence: fence as u64 }));
    }
    // Not taken: the row as the statement found it answers, unless it looked free (another
    // begin took the key meanwhile): then the row as that begin committed it.
    if let Decision::Answer(answer) = decide_begin(before, &request.fingerprint, request.client, now) {
        return Ok(Ok(answer));
    }
    Ok(match client.query_opt(&READ, &[&id]).await? {
        Some(row) => answer(request, &row, now),
        None => Err(StoreError::Unavailable("a concurrent begin vanished; retry".into())),
    })
}

pub async fn complete(
    client: &Object,
    id: &ClaimId,
    token: &LeaseToken,
    response: &[u8],
    ttl: Duration,
    now: Timestamp,
) -> Result<Option<Timestamp>, StoreError> {
    let until = now.plus(ttl);
    let done = client
        .execute(&COMPLETE, &[&until.millis(), &response, &&id.0[..], &&token.0[..], &kept_after(now)])
        .await
        .map_err(commit_error)?;
    Ok((done == 1).then_some(until))
}

pub async fn extend(
    client: &Object,
    id: &ClaimId,
    token: &LeaseToken,
    lease: Duration,
    now: Timestamp,
) -> Result<Option<Timestamp>, StoreError> {
    let until = now.plus(lease);
    let row = client
        .query_opt(&EXTEND, &[&until.millis(), &&id.0[..], &&token.0[..], &kept_after(now)])
        .await
        .map_err(commit_error)?;
    Ok(row.map(|row| Timestamp(row.get(0))))
}

/// Deletes a live completed row (and wakes its waiters); reports a held one.
pub async fn forget(client: &Object, id: &ClaimId, now: Timestamp) -> Result<Forget, StoreError> {
    let deleted = client.execute(&FORGET, &[&&id.0[..], &now.millis()]).await.map_err(commit_error)?;
    if deleted == 1 {
        return Ok(Forget::Forgotten);
    }
    let held = client.query_opt(&HELD, &[&&id.0[..], &now.millis()]).await.map_err(store_error)?;
    Ok(if held.is_some() { Forget::Held } else { Forget::Absent })
}

pub async fn peek(client: &Object, id: &ClaimId, now: Timestamp) -> Result<Option<RequestState>, StoreError> {
    let Some(row) = client.query_opt(&READ, &[&&id.0[..]]).await.map_err(store_error)? else { return Ok(None) };
    if row.get::<_, i64>(2) <= now.millis() {
        return Ok(None);
    }
    Ok(Some(match found(id, &row)? {
        Found::Held { fingerprint, until, .. } => RequestState::Held {
            fingerprint,
            lease_until: until,
            held: row.get::<_, Option<Vec<u8>>>(3).unwrap_or_default(),
        },
        Found::Completed { fingerprint, until, result } => {
            RequestState::Completed { fingerprint, result, expires_at: until }
        }
    }))
}
