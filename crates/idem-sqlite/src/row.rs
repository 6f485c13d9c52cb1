//! Turning stored rows back into domain records. A row that does not decode is a broken invariant
//! (`StoreError::Internal`), never a panic.

use idem_core::{ClaimId, ClaimRecord, Namespace, Parts, StoreError, Timestamp};
use rusqlite::Row;
use serde_json::value::RawValue;

/// Columns, in order: parts, data, created_at, expires_at (the writer spells them out in its
/// constant SQL).
pub const COLUMNS: &str = "parts, data, created_at, expires_at";

pub fn record(ns: &Namespace, id: ClaimId, row: &Row<'_>) -> rusqlite::Result<Result<ClaimRecord, StoreError>> {
    let parts: Vec<u8> = row.get(0)?;
    let data: Option<String> = row.get(1)?;
    let created_at: i64 = row.get(2)?;
    let expires_at: Option<i64> = row.get(3)?;
    Ok(decode(ns, id, &parts, data, created_at, expires_at))
}

fn decode(
    ns: &Namespace,
    id: ClaimId,
    parts: &[u8],
    data: Option<String>,
    created_at: i64,
    expires_at: Option<i64>,
) -> Result<ClaimRecord, StoreError> {
    let parts = Parts::decode(parts).map_err(|e| StoreError::Internal(format!("claim {id}: bad parts: {e}")))?;
    let data = data
        .map(RawValue::from_string)
        .transpose()
        .map_err(|e| StoreError::Internal(format!("claim {id}: bad data: {e}")))?;
    Ok(ClaimRecord {
        namespace: ns.clone(),
        id,
        parts,
        data,
        created_at: Timestamp(created_at),
        expires_at: expires_at.map(Timestamp),
    })
}

/// Classifies a SQLite error: everything the database itself reports as busy, locked, full,
/// read-only or an I/O failure means "unavailable, try again"; the rest is an internal fault.
pub fn store_error(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(
            C::DatabaseBusy
            | C::DatabaseLocked
            | C::DiskFull
            | C::ReadOnly
            | C::SystemIoFailure
            | C::CannotOpen
            | C::OutOfMemory
            | C::FileLockingProtocolFailed,
        ) => StoreError::Unavailable(e.to_string()),
        _ => StoreError::Internal(e.to_string()),
    }
}
