//! Claims and operations: claims made (new or existing), deleted, looked up, the live claims per
//! namespace, and the operations API's outcomes. The dashboard's per-namespace figures (claims
//! made and operations begun since start) are kept here too, as they are counted.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crate::{Family, Label, labels};

pub const CLAIMS: Family = Family::counter(
    "idem_claims_total",
    &["namespace", "outcome"],
    "Claims by namespace and outcome: claimed (new) or existing.",
);
pub const DELETED: Family = Family::counter(
    "idem_claims_deleted_total",
    &["namespace"],
    "Claims deleted through the API or the dashboard, by namespace.",
);
pub const UPDATED: Family = Family::counter(
    "idem_claims_updated_total",
    &["namespace", "outcome"],
    "Claims changed whatever they held (the Redis protocol's SET, EXPIRE, PERSIST, GETDEL and scripts), by namespace and outcome: applied, or skipped when its condition did not hold.",
);
pub const LOOKUPS: Family = Family::counter(
    "idem_lookups_total",
    &["namespace", "kind"],
    "Keys looked up, by namespace and kind (ids, prefix, get, list).",
);
pub const OPERATIONS: Family = Family::counter(
    "idem_operations_total",
    &["namespace", "outcome"],
    "Operations API calls by namespace and outcome (started, replayed, in_progress, mismatch, completed, released, extended, lease_lost, deleted).",
);
pub const STORED: Family = Family::gauge(
    "idem_claims_stored",
    &["namespace"],
    "Live claims per namespace: on the embedded store kept exact as claims come, go and expire, read every 15 s; on PostgreSQL a count every 5 minutes in which expired ones count until swept.",
);

pub const FAMILIES: &[Family] = &[CLAIMS, DELETED, UPDATED, LOOKUPS, OPERATIONS, STORED];

labels! {
    /// How a lookup named its keys.
    pub enum Lookup {
        Ids => "ids",
        Prefix => "prefix",
        Get => "get",
        List => "list",
    }
}

labels! {
    /// What an operations API call did.
    pub enum Operation {
        Started => "started",
        Replayed => "replayed",
        InProgress => "in_progress",
        Mismatch => "mismatch",
        Completed => "completed",
        Released => "released",
        Extended => "extended",
        LeaseLost => "lease_lost",
        Deleted => "deleted",
    }
}

/// Claims made and operations begun since start, per namespace: what the dashboard shows.
static ACTIVITY: Mutex<Option<HashMap<String, Activity>>> = Mutex::new(None);

/// What a namespace saw since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Activity {
    /// Claims made new.
    pub claimed: u64,
    /// Operations begun.
    pub started: u64,
}

fn note(namespace: &str, change: impl FnOnce(&mut Activity)) {
    let mut activity = ACTIVITY.lock().unwrap_or_else(|p| p.into_inner());
    let map = activity.get_or_insert_with(HashMap::new);
    match map.get_mut(namespace) {
        Some(seen) => change(seen),
        None => change(map.entry(namespace.to_owned()).or_default()),
    }
}

/// Per namespace, what it saw since start.
pub fn activity() -> HashMap<String, Activity> {
    ACTIVITY.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default()
}

/// A claim request in `namespace`: `claimed` keys new, `existing` already there.
pub fn claimed(namespace: &str, claimed: u64, existing: u64) {
    metrics::counter!(CLAIMS.name, "namespace" => namespace.to_owned(), "outcome" => "claimed").increment(claimed);
    metrics::counter!(CLAIMS.name, "namespace" => namespace.to_owned(), "outcome" => "existing").increment(existing);
    note(namespace, |seen| seen.claimed += claimed);
}

/// `n` claims deleted in `namespace`.
pub fn deleted(namespace: &str, n: u64) {
    metrics::counter!(DELETED.name, "namespace" => namespace.to_owned()).increment(n);
}

/// An update in `namespace`, `applied` or skipped (its condition did not hold).
pub fn updated(namespace: &str, applied: bool) {
    let outcome = if applied { "applied" } else { "skipped" };
    metrics::counter!(UPDATED.name, "namespace" => namespace.to_owned(), "outcome" => outcome).increment(1);
}

/// `keys` keys looked up in `namespace`, named as `how`.
pub fn looked_up(namespace: &str, how: Lookup, keys: u64) {
    metrics::counter!(LOOKUPS.name, "namespace" => namespace.to_owned(), "kind" => how.label()).increment(keys);
}

/// An operations API call in `namespace` that did `what`.
pub fn operation(namespace: &str, what: Operation) {
    metrics::counter!(OPERATIONS.name, "namespace" => namespace.to_owned(), "outcome" => what.label()).increment(1);
    if what == Operation::Started {
        note(namespace, |seen| seen.started += 1);
    }
}

/// The live claims per namespace, as counted now: a namespace counted before and absent now (its
/// claims all deleted or expired: a `GROUP BY` has no row for it) goes back to zero rather than
/// keeping its last value.
pub fn stored(counts: impl IntoIterator<Item = (String, u64)>) {
    static REPORTED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut reported = REPORTED.lock().unwrap_or_else(|p| p.into_inner());
    let reported = reported.get_or_insert_with(HashSet::new);
    let mut now = HashSet::new();
    for (namespace, n) in counts {
        metrics::gauge!(STORED.name, "namespace" => namespace.clone()).set(n as f64);
        now.insert(namespace);
    }
    for gone in reported.difference(&now) {
        metrics::gauge!(STORED.name, "namespace" => gone.clone()).set(0.0);
    }
    *reported = now;
}

/// The series of a configured namespace, present at zero from start-up.
pub fn register(namespace: &str) {
    metrics::gauge!(STORED.name, "namespace" => namespace.to_owned()).set(0.0);
    for outcome in ["claimed", "existing"] {
        metrics::counter!(CLAIMS.name, "namespace" => namespace.to_owned(), "outcome" => outcome).increment(0);
    }
    for what in Operation::ALL {
        metrics::counter!(OPERATIONS.name, "namespace" => namespace.to_owned(), "outcome" => what.label()).increment(0);
    }
}
