//! Claims in PostgreSQL. One statement per claim takes the key (insert, or take over an expired
//! row) or returns the existing record; the primary key makes exactly one of any number of
//! concurrent claims, on any number of nodes, the winner. A batch (and a group of single claims,
//! group.rs) is one set statement over arrays of its distinct keys, taking them in id order; of two
//! equal keys in it the first asked wins. A key found live is answered by a read alone: a duplicate
//! writes nothing. A claim keeps its client token's digest: a retry that carries the same token is
//! told `claimed: true` again.

use std::collections::HashMap;

use idem_core::{
    ClaimId, ClaimOutcome, ClaimRecord, ClaimUpdate, Decided, Keep, Live, Namespace, NewClaim, Parts, StoreError,
    Timestamp, UpdateOutcome,
};
use serde_json::value::RawValue;
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::pool::Object;
use crate::sql::{Run, Sql};
use crate::{commit_error, run_again, store_error};

/// Takes the key (a new row, or an expired row taken over), or answers the live row; a live row is
/// `claimed` again only for the client token that stored it. A key found live is answered by the
/// read alone: the insert is not tried, so a duplicate takes no row lock, gets no transaction id
/// and writes no WAL (an `ON CONFLICT DO UPDATE … WHERE` locks the row, and logs the lock, even when
/// its condition then fails). A key absent or expired in the statement's snapshot is inserted or
/// taken over, ON CONFLICT re-checking expiry on the newest version; a row another transaction
/// committed meanwhile answers no row here, and is read again (`EXISTING`).
const CLAIM: Sql = Sql::cached(
    "WITH live AS (
        SELECT parts, data, created_at, expires_at, coalesce(client_token = $7, false) AS claimed, client_token
        FROM claims WHERE ns = $1 AND id = $2 AND (expires_at IS NULL OR expires_at > $5)),
    ins AS (
        INSERT INTO claims (ns, id, parts, data, created_at, expires_at, client_token)
        SELECT $1, $2, $3, $4, $8, $6, $7 WHERE NOT EXISTS (SELECT 1 FROM live)
        ON CONFLICT (ns, id) DO UPDATE SET parts = excluded.parts, data = excluded.data,
            created_at = excluded.created_at, expires_at = excluded.expires_at, client_token = excluded.client_token
        WHERE claims.expires_at IS NOT NULL AND claims.expires_at <= $5
        RETURNING parts, data, created_at, expires_at, true AS claimed, client_token)
    SELECT * FROM ins
    UNION ALL
    SELECT * FROM live",
    &[Type::TEXT, Type::BYTEA, Type::BYTEA, Type::TEXT, Type::INT8, Type::INT8, Type::BYTEA, Type::INT8],
);

const EXISTING: Sql = Sql::cached(
    "SELECT parts, data, created_at, expires_at, coalesce(client_token = $3, false), client_token
    FROM claims WHERE ns = $1 AND id = $2",
    &[Type::TEXT, Type::BYTEA, Type::BYTEA],
);

/// A batch in one statement: the keys are inserted first, in id order (the order every batch and
/// a delete by prefix lock in), `ON CONFLICT DO NOTHING`, which finds an existing key in the index
/// without locking its row or writing anything; only the keys not inserted are read (`found`), and
/// of those the expired ones are locked in id order and taken over. A batch of new keys thus costs
/// PostgreSQL one index probe per key, as a plain multi-row insert does (reading every key first
/// cost a second probe each: about half the statement's time), and a key found live is still
/// answered by a read alone. The keys are distinct. A key another transaction committed meanwhile
/// answers no row (the reads see the statement's snapshot), and is settled on its own. Columns as
/// CLAIM's, then the key's id.
const CLAIM_SET: Sql = Sql::cached(
    "WITH asked AS (
        SELECT * FROM unnest($2::bytea[], $3::bytea[], $4::text[], $5::int8[], $6::int8[], $7::bytea[])
            AS a(id, parts, data, created_at, expires_at, client_token)),
    ins AS (
        INSERT INTO claims (ns, id, parts, data, created_at, expires_at, client_token)
        SELECT $1, a.id, a.parts, a.data, a.created_at, a.expires_at, a.client_token FROM asked a ORDER BY a.id
        ON CONFLICT (ns, id) DO NOTHING
        RETURNING parts, data, created_at, expires_at, true AS claimed, client_token, id),
    found AS MATERIALIZED (
        SELECT c.parts, c.data, c.created_at, c.expires_at, coalesce(c.client_token = a.client_token, false) AS claimed,
            c.client_token, c.id
        FROM asked a JOIN claims c ON c.ns = $1 AND c.id = a.id
        WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.id = a.id)),
    expired AS MATERIALIZED (
        SELECT c.id FROM claims c WHERE c.ns = $1 AND c.id IN (SELECT id FROM found WHERE expires_at <= $8)
        ORDER BY c.id FOR UPDATE),
    taken AS (
        UPDATE claims c SET parts = a.parts, data = a.data, created_at = a.created_at, expires_at = a.expires_at,
            client_token = a.client_token
        FROM expired e JOIN asked a ON a.id = e.id
        WHERE c.ns = $1 AND c.id = e.id AND c.expires_at IS NOT NULL AND c.expires_at <= $8
        RETURNING c.parts, c.data, c.created_at, c.expires_at, true, c.client_token, c.id)
    SELECT * FROM ins
    UNION ALL
    SELECT * FROM found WHERE expires_at IS NULL OR expires_at > $8
    UNION ALL
    SELECT * FROM taken",
    &[
        Type::TEXT,
        Type::BYTEA_ARRAY,
        Type::BYTEA_ARRAY,
        Type::TEXT_ARRAY,
        Type::INT8_ARRAY,
        Type::INT8_ARRAY,
        Type::BYTEA_ARRAY,
        Type::INT8,
    ],
);

const LOOKUP: Sql = Sql::cached(
    "SELECT parts, data, created_at, expires_at, false, id FROM claims
     WHERE ns = $1 AND id = ANY($2) AND (expires_at IS NULL OR expires_at > $3)",
    &[Type::TEXT, Type::BYTEA_ARRAY, Type::INT8],
);

const LIST: Sql = Sql::cached(
    "SELECT parts, data, created_at, expires_at, false, id FROM claims
     WHERE ns = $1 AND parts >= $2 AND parts < $3 AND parts > $4
     AND (expires_at IS NULL OR expires_at > $5) ORDER BY parts LIMIT $6",
    &[Type::TEXT, Type::BYTEA, Type::BYTEA, Type::BYTEA, Type::INT8, Type::INT8],
);

/// Picks up to `$4` live claims under the prefix in parts order, locks them in id order (the
/// order a batch claim takes its keys in, so the two cannot deadlock), and deletes them.
const DELETE_PREFIX: Sql = Sql::cached(
    "WITH picked AS MATERIALIZED (SELECT id FROM claims
         WHERE ns = $1 AND parts >= $2 AND parts < $3 AND (expires_at IS NULL OR expires_at > $5)
         ORDER BY parts LIMIT $4),
     locked AS MATERIALIZED (SELECT claims.id FROM claims JOIN picked ON claims.id = picked.id
         WHERE claims.ns = $1 ORDER BY claims.id FOR UPDATE OF claims)
     DELETE FROM claims USING locked WHERE claims.ns = $1 AND claims.id = locked.id",
    &[Type::TEXT, Type::BYTEA, Type::BYTEA, Type::INT8, Type::INT8],
);

fn record(ns: &Namespace, id: ClaimId, row: &Row) -> Result<ClaimOutcome, StoreError> {
    let parts: Vec<u8> = row.get(0);
    let data: Option<String> = row.get(1);
    let parts = Parts::decode(&parts).map_err(|e| StoreError::Internal(format!("claim {id}: {e}")))?;
    let data =
        data.map(RawValue::from_string).transpose().map_err(|e| StoreError::Internal(format!("claim {id}: {e}")))?;
    let record = ClaimRecord {
        namespace: ns.clone(),
        id,
        parts,
        data,
        created_at: Timestamp(row.get(2)),
        expires_at: row.get::<_, Option<i64>>(3).map(Timestamp),
    };
    Ok(ClaimOutcome { claimed: row.get(4), record })
}

pub async fn claim(
    client: &mut Object,
    ns: &Namespace,
    items: &[NewClaim],
    now: Timestamp,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    let mut keyed: Vec<(usize, ClaimId, Encoded<'_>)> =
        items.iter().enumerate().map(|(i, c)| (i, c.parts.id(), Encoded::new(c, now))).collect();
    // Id order: concurrent batches lock rows in the same order and cannot deadlock; the sort is
    // stable, so of two equal keys the first asked still wins.
    keyed.sort_by_key(|(_, id, _)| *id);
    let mut tries = 0;
    let mut rows = loop {
        match decide(client, ns, &keyed, now).await {
            Err(e) if tries < 3 && run_again(&e) => tries += 1,
            // One statement, committing on its own: a connection broken under it leaves its
            // outcome unknown (a retry with the same client token learns it).
            Err(e) => return Err(commit_error(e)),
            Ok(rows) => break rows,
        }
    };
    let mut out: Vec<Option<ClaimOutcome>> = (0..keyed.len()).map(|_| None).collect();
    // Each key's answer, and the client token its row holds: a later equal key in the batch is
    // told it won only if it carries that same token.
    let mut first: HashMap<ClaimId, (ClaimOutcome, Option<Vec<u8>>)> = HashMap::with_capacity(keyed.len());
    for (i, id, item) in &keyed {
        let outcome = match first.get(id) {
            Some((winner, stored)) => {
                ClaimOutcome { claimed: stored.is_some() && *stored == item.token, record: winner.record.clone() }
            }
            None => {
                let row = match rows.remove(id) {
                    Some(row) => row,
                    None => settle(client, ns, id, item, now).await?,
                };
                let outcome = record(ns, *id, &row)?;
                first.insert(*id, (outcome.clone(), row.get(5)));
                outcome
            }
        };
        out[*i] = Some(outcome);
    }
    out.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| StoreError::Internal("a claim went unanswered".into()))
}

/// The rows of `keyed`'s distinct keys, by id: one statement for one key, one set statement for
/// several. A key missing was taken by a transaction that committed meanwhile.
async fn decide(
    client: &Object,
    ns: &Namespace,
    keyed: &[(usize, ClaimId, Encoded<'_>)],
    now: Timestamp,
) -> Result<HashMap<ClaimId, Row>, tokio_postgres::Error> {
    let (ns_text, now) = (ns.as_str(), now.millis());
    if let [(_, id, item)] = keyed {
        let bytes: &[u8] = &id.0;
        let row = client.query_opt(&CLAIM, &item.params(&ns_text, &bytes, &now)).await?;
        return Ok(row.map(|row| (*id, row)).into_iter().collect());
    }
    let mut distinct: Vec<&(usize, ClaimId, Encoded<'_>)> = keyed.iter().collect();
    distinct.dedup_by_key(|(_, id, _)| *id);
    let ids: Vec<&[u8]> = distinct.iter().map(|(_, id, _)| &id.0[..]).collect();
    let parts: Vec<&[u8]> = distinct.iter().map(|(_, _, c)| &c.parts[..]).collect();
    let data: Vec<Option<&str>> = distinct.iter().map(|(_, _, c)| c.data).collect();
    let created: Vec<i64> = distinct.iter().map(|(_, _, c)| c.created).collect();
    let expires: Vec<Option<i64>> = distinct.iter().map(|(_, _, c)| c.expires).collect();
    let tokens: Vec<Option<&[u8]>> = distinct.iter().map(|(_, _, c)| c.token.as_deref()).collect();
    let params: [&(dyn ToSql + Sync); 8] = [&ns_text, &ids, &parts, &data, &created, &expires, &tokens, &now];
    let rows = client.query(&CLAIM_SET, &params).await?;
    // (An id that would not read back finds no row, and is settled on its own.)
    Ok(rows.into_iter().filter_map(|row| Some((ClaimId::from_slice(row.get::<_, &[u8]>(6))?, row))).collect())
}

/// How many times [`settle`] reads and claims a key that others keep taking and deleting before
/// it answers 503. Each round misses only if another transaction took the key during it and a
/// delete removed it before the next read: under batch claims and prefix deletes of the same keys
/// racing flat out (tests/conformance.rs), three rounds were once not enough.
const SETTLE_ROUNDS: u64 = 10;

/// The answer to a claim whose statement found the key taken by a transaction that committed
/// after the statement began: the row as that transaction left it, read now; or, if the row is
/// gone again meanwhile (a delete committed after that), the claim made again, on its own, after a
/// pause that grows by a millisecond each round (at most 45 ms in all).
async fn settle(
    client: &Object,
    ns: &Namespace,
    id: &ClaimId,
    item: &Encoded<'_>,
    now: Timestamp,
) -> Result<Row, StoreError> {
    for round in 0..SETTLE_ROUNDS {
        tokio::time::sleep(std::time::Duration::from_millis(round)).await;
        let existing = client.query_opt(&EXISTING, &[&ns.as_str(), &&id.0[..], &item.token]).await;
        if let Some(row) = existing.map_err(store_error)? {
            return Ok(row);
        }
        let (ns, id, now): (&str, &[u8], i64) = (ns.as_str(), &id.0, now.millis());
        let again = client.query_opt(&CLAIM, &item.params(&ns, &id, &now)).await;
        if let Some(row) = again.map_err(commit_error)? {
            return Ok(row);
        }
    }
    Err(StoreError::Unavailable(format!("claim {id}: taken and deleted by others {SETTLE_ROUNDS} times over; retry")))
}

/// A claim's values, as CLAIM takes them.
struct Encoded<'a> {
    parts: Vec<u8>,
    data: Option<&'a str>,
    created: i64,
    expires: Option<i64>,
    token: Option<Vec<u8>>,
}

impl<'a> Encoded<'a> {
    fn new(claim: &'a NewClaim, now: Timestamp) -> Self {
        let (created, expires) = claim.times(now);
        Encoded {
            parts: claim.parts.encode(),
            data: claim.data.as_deref().map(RawValue::get),
            created: created.millis(),
            expires: expires.map(Timestamp::millis),
            token: claim.client.map(|t| t.0.to_vec()),
        }
    }

    /// CLAIM's parameters; `now` in milliseconds.
    fn params<'p>(&'p self, ns: &'p &str, id: &'p &[u8], now: &'p i64) -> [&'p (dyn ToSql + Sync); 8] {
        [ns, id, &self.parts, &self.data, now, &self.expires, &self.token, &self.created]
    }
}

pub async fn lookup(
    client: &Object,
    ns: &Namespace,
    ids: &[ClaimId],
    now: Timestamp,
) -> Result<Vec<Option<ClaimRecord>>, StoreError> {
    let raw: Vec<&[u8]> = ids.iter().map(|id| &id.0[..]).collect();
    let rows = client.query(&LOOKUP, &[&ns.as_str(), &raw, &now.millis()]).await.map_err(store_error)?;
    let mut found = std::collections::HashMap::with_capacity(rows.len());
    for row in &rows {
        let id_bytes: Vec<u8> = row.get(5);
        let id = ClaimId::from_slice(&id_bytes).ok_or_else(|| StoreError::Internal("bad claim id".into()))?;
        found.insert(id, record(ns, id, row)?.record);
    }
    Ok(ids.iter().map(|id| found.get(id).cloned()).collect())
}

/// Live claims under `prefix` in parts order after `after`: a range of the `(ns, parts)` index.
pub async fn list(
    client: &Object,
    ns: &Namespace,
    prefix: &Parts,
    after: Option<&[u8]>,
    limit: usize,
    now: Timestamp,
) -> Result<Vec<ClaimRecord>, StoreError> {
    let after: &[u8] = after.unwrap_or(&[]);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
        [&ns.as_str(), &prefix.encode(), &prefix.prefix_upper_bound(), &after, &now.millis(), &(limit as i64)];
    let rows = client.query(&LIST, &params).await.map_err(store_error)?;
    rows.iter()
        .map(|row| {
            let id_bytes: Vec<u8> = row.get(5);
            let id = ClaimId::from_slice(&id_bytes).ok_or_else(|| StoreError::Internal("bad claim id".into()))?;
            record(ns, id, row).map(|o| o.record)
        })
        .collect()
}

/// Deletes up to `limit` live claims under `prefix`; says how many went. (Expired ones are the
/// sweeper's.) The claims are picked once, in a `MATERIALIZED` CTE as the other bounded deletes
/// are (event.rs's `LEASE`): without row locks a subquery run again would pick the same claims,
/// but once per claim the delete looks at, which costs a namespace's size squared. They are locked
/// in id order, as a batch claim takes its keys; a deadlock with anything else is run again.
pub async fn delete_prefix(
    client: &Object,
    ns: &Namespace,
    prefix: &Parts,
    limit: usize,
    now: Timestamp,
) -> Result<usize, StoreError> {
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&ns.as_str(), &prefix.encode(), &prefix.prefix_upper_bound(), &(limit as i64), &now.millis()];
    let mut tries = 0;
    loop {
        match client.execute(&DELETE_PREFIX, &params).await {
            Ok(deleted) => return Ok(deleted as usize),
            Err(e) if tries < 3 && run_again(&e) => tries += 1,
            Err(e) => return Err(commit_error(e)),
        }
    }
}

/// The key's row, locked until the update's transaction ends (none: no row, live or expired).
const LOCK_ONE: Sql = Sql::cached(
    "SELECT parts, data, created_at, expires_at, false FROM claims WHERE ns = $1 AND id = $2 FOR UPDATE",
    &[Type::TEXT, Type::BYTEA],
);

/// A row replaced in place: new data drops the client token it was claimed with.
const REPLACE: Sql = Sql::cached(
    "UPDATE claims SET data = $3, created_at = $4, expires_at = $5,
         client_token = CASE WHEN $6 THEN client_token END
     WHERE ns = $1 AND id = $2",
    &[Type::TEXT, Type::BYTEA, Type::TEXT, Type::INT8, Type::INT8, Type::BOOL],
);

/// A key with no row: inserted unless another transaction inserted it meanwhile (then the update
/// looks again, at that row locked).
const INSERT_ONE: Sql = Sql::cached(
    "INSERT INTO claims (ns, id, parts, data, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (ns, id) DO NOTHING",
    &[Type::TEXT, Type::BYTEA, Type::BYTEA, Type::TEXT, Type::INT8, Type::INT8],
);

const DELETE_ONE: Sql = Sql::cached("DELETE FROM claims WHERE ns = $1 AND id = $2", &[Type::TEXT, Type::BYTEA]);

/// One key changed if the update's condition holds of its row, locked (`FOR UPDATE`), so that the
/// decision and the write are one with respect to every claim, update and delete of the key.
pub async fn update(
    client: &mut Object,
    ns: &Namespace,
    update: &ClaimUpdate,
    now: Timestamp,
) -> Result<UpdateOutcome, StoreError> {
    let id = update.parts.id();
    let (ns_text, id_bytes): (&str, &[u8]) = (ns.as_str(), &id.0);
    crate::retrying!(client, |tx| {
        loop {
            let row = tx.query_opt(&LOCK_ONE, &[&ns_text, &id_bytes]).await?;
            let before = match row.as_ref().map(|row| record(ns, id, row)).transpose() {
                Ok(found) => found.map(|f| f.record).filter(|r| r.is_live(now)),
                Err(e) => break Err(e),
            };
            let live = before.as_ref().map(|r| Live {
                data: r.data.as_deref().map(RawValue::get),
                created_at: r.created_at,
                expires_at: r.expires_at,
            });
            let Some(decided) = update.decide(live, now) else {
                break Ok(UpdateOutcome { applied: false, before });
            };
            let (data, created_at, expires_at) = match decided {
                Decided::Delete => {
                    if row.is_some() {
                        tx.execute(&DELETE_ONE, &[&ns_text, &id_bytes]).await?;
                    }
                    break Ok(UpdateOutcome { applied: true, before });
                }
                Decided::Write { data, created_at, expires_at } => (data, created_at, expires_at),
            };
            let (data, keeps_client) = match data {
                Keep::Set(data) => (data.map(|d| d.get().to_owned()), false),
                Keep::Keep => (before.as_ref().and_then(|b| b.data.as_deref()).map(|d| d.get().to_owned()), true),
            };
            let (created_at, expires_at) = (created_at.millis(), expires_at.map(Timestamp::millis));
            if row.is_some() {
                tx.execute(&REPLACE, &[&ns_text, &id_bytes, &data, &created_at, &expires_at, &keeps_client]).await?;
                break Ok(UpdateOutcome { applied: true, before });
            }
            let parts = update.parts.encode();
            let params: [&(dyn ToSql + Sync); 6] = [&ns_text, &id_bytes, &parts, &data, &created_at, &expires_at];
            if tx.execute(&INSERT_ONE, &params).await? == 1 {
                break Ok(UpdateOutcome { applied: true, before });
            }
        }
    })
}
