//! Reading out the claims and stored results that idem kept in SQLite before the log engine, so
//! that the server can move them into the log once (`idem-server`'s embedded store does).

use idem_core::{ClaimId, ClaimRecord, Namespace, StoreError, Timestamp};

use rusqlite::{Connection, params};

use crate::row::{self, store_error};

/// A completed key's stored result, as the log imports it.
#[derive(Debug, Clone)]
pub struct LegacyResult {
    pub id: ClaimId,
    pub fingerprint: [u8; 32],
    pub result: Vec<u8>,
    pub expires_at: Timestamp,
}

pub fn counts(conn: &Connection) -> Result<(u64, u64), StoreError> {
    let count = |table: &str| -> Result<u64, StoreError> {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(store_error)
    };
    Ok((count("claims")?, count("requests")?))
}

/// Up to `limit` claims after `after` in (namespace, id) order, live or not (the log drops the
/// expired ones itself).
pub fn claims(
    conn: &Connection,
    after: Option<(String, ClaimId)>,
    limit: usize,
) -> Result<Vec<ClaimRecord>, StoreError> {
    let (ns, id) = after.unwrap_or((String::new(), ClaimId([0; 32])));
    let sql = format!("SELECT {}, ns, id FROM claims WHERE (ns, id) > (?1, ?2) ORDER BY ns, id LIMIT ?3", row::COLUMNS);
    let mut stmt = conn.prepare(&sql).map_err(store_error)?;
    let rows = stmt
        .query_map(params![ns, &id.0[..], limit as i64], |r| {
            let ns: String = r.get(4)?;
            let id: Vec<u8> = r.get(5)?;
            let decoded = match (Namespace::new(&ns), ClaimId::from_slice(&id)) {
                (Ok(ns), Some(id)) => row::record(&ns, id, r)?,
                _ => Err(StoreError::Internal(format!("claims row in {ns}: bad namespace or id"))),
            };
            Ok(decoded)
        })
        .map_err(store_error)?;
    rows.map(|found| found.map_err(store_error)?).collect()
}

/// Up to `limit` completed results after `after`, in id order. Leases are left behind: their
/// holders were requests of the process that stopped, so those keys are free again.
pub fn results(conn: &Connection, after: Option<ClaimId>, limit: usize) -> Result<Vec<LegacyResult>, StoreError> {
    let after = after.unwrap_or(ClaimId([0; 32]));
    let mut stmt = conn
        .prepare(
            "SELECT id, fingerprint, response, until FROM requests WHERE state = 1 AND id > ?1 ORDER BY id LIMIT ?2",
        )
        .map_err(store_error)?;
    let rows = stmt
        .query_map(params![&after.0[..], limit as i64], |r| {
            Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Vec<u8>>(1)?, r.get::<_, Option<Vec<u8>>>(2)?, r.get::<_, i64>(3)?))
        })
        .map_err(store_error)?;
    let mut out = Vec::new();
    for found in rows {
        let (id, fingerprint, result, until) = found.map_err(store_error)?;
        let bad = |what: &str| StoreError::Internal(format!("requests row: bad {what}"));
        out.push(LegacyResult {
            id: ClaimId::from_slice(&id).ok_or_else(|| bad("id"))?,
            fingerprint: fingerprint.as_slice().try_into().map_err(|_| bad("fingerprint"))?,
            result: result.ok_or_else(|| bad("result"))?,
            expires_at: Timestamp(until),
        });
    }
    Ok(out)
}
