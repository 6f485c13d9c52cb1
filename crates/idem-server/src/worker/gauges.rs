//! Gauges read from outside the request path: every 15 seconds the embedded store's size on disk
//! and the space left on its file system (so an alert can see the disk filling before writes
//! start answering 503); every minute the receipts by source and status (dead letters are
//! something an alert can watch); the stored claims per namespace every five minutes where that
//! is a count of a whole table (PostgreSQL: an estimate that lags, expired claims count until the
//! sweeper deletes them). The embedded store keeps its live claims counted as claims come, go and
//! expire, so there they are read at every scrape instead ([`claims_at_scrape`]).

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use idem_core::{ClaimStore, EventStore, Stores};
use tokio::sync::watch;

const EVERY: Duration = Duration::from_secs(15);
/// Receipts are counted every this many rounds (a minute), claims every `CLAIMS_EVERY` (5 minutes)
/// where counting them scans a table.
const RECEIPTS_EVERY: u64 = 4;
const CLAIMS_EVERY: u64 = 20;

/// Samples until `stop`. `data_dir` is `None` on PostgreSQL, whose disk is the database's to watch.
pub async fn run(stores: Stores, data_dir: Option<PathBuf>, mut stop: watch::Receiver<bool>) {
    let (mut receipts, mut claims) = (HashSet::new(), HashSet::new());
    for round in 0u64.. {
        if let Some(dir) = data_dir.clone()
            && let Ok((size, available)) =
                tokio::task::spawn_blocking(move || crate::embedded::tools::size_on_disk(&dir)).await
        {
            metrics::gauge!("idem_store_size_bytes").set(size as f64);
            if let Some(available) = available {
                metrics::gauge!("idem_data_dir_available_bytes").set(available as f64);
            }
        }
        if round % RECEIPTS_EVERY == 0 {
            count_receipts(stores.events.as_ref(), &mut receipts).await;
        }
        if round % CLAIMS_EVERY == 0 && !stores.claims.counts_are_live() {
            count_claims(stores.claims.as_ref(), &mut claims).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}

type Labels = Vec<(&'static str, String)>;

/// Receipts per (source, status).
async fn count_receipts(store: &dyn EventStore, reported: &mut HashSet<Labels>) {
    match store.count_receipts().await {
        Ok(counts) => publish(
            "idem_receipts",
            counts
                .into_iter()
                .map(|(source, status, n)| (vec![("source", source), ("status", status.as_str().to_owned())], n)),
            reported,
        ),
        Err(e) => tracing::debug!(error = %e, "could not count receipts"),
    }
}

/// Stored claims per namespace.
async fn count_claims(store: &dyn ClaimStore, reported: &mut HashSet<Labels>) {
    match store.count_claims().await {
        Ok(counts) => {
            publish("idem_claims_stored", counts.into_iter().map(|(ns, n)| (vec![("namespace", ns)], n)), reported)
        }
        Err(e) => tracing::debug!(error = %e, "could not count claims"),
    }
}

/// The live claims per namespace, published as a scrape renders the metrics, where the store
/// keeps them counted (no scan).
pub async fn claims_at_scrape(store: &dyn ClaimStore) {
    static REPORTED: std::sync::Mutex<Option<HashSet<Labels>>> = std::sync::Mutex::new(None);
    if !store.counts_are_live() {
        return;
    }
    match store.count_claims().await {
        Ok(counts) => {
            let mut reported = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
            let counts = counts.into_iter().map(|(ns, n)| (vec![("namespace", ns)], n));
            publish("idem_claims_stored", counts, reported.get_or_insert_with(HashSet::new));
        }
        Err(e) => tracing::debug!(error = %e, "could not count claims"),
    }
}

/// Sets a gauge per label set counted now; a label set counted before and absent now (all its
/// records replayed or deleted: `GROUP BY` has no row for it) goes back to zero rather than keeping
/// its last value.
fn publish(name: &'static str, counts: impl Iterator<Item = (Labels, u64)>, reported: &mut HashSet<Labels>) {
    let mut now = HashSet::new();
    for (labels, n) in counts {
        metrics::gauge!(name, &labels).set(n as f64);
        now.insert(labels);
    }
    for gone in reported.difference(&now) {
        metrics::gauge!(name, gone).set(0.0);
    }
    *reported = now;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use idem_conformance::{START, id, new_claim, ns};
    use idem_core::{ClaimStore, ManualClock};
    use idem_log::{LogOptions, LogStore};

    use super::*;

    fn line(prefix: &str) -> Option<String> {
        crate::telemetry::metrics_handle().render().lines().find(|l| l.starts_with(prefix)).map(str::to_owned)
    }

    #[tokio::test]
    async fn a_namespace_emptied_reads_zero_not_its_last_count() {
        crate::telemetry::metrics_handle(); // the recorder, before anything is recorded
        let dir = tempfile::tempdir().expect("temp dir");
        let store = LogStore::open(dir.path(), Arc::new(ManualClock::new(START)), LogOptions::default()).expect("open");
        let n = ns("gauged_ns");
        store.claim(&n, vec![new_claim(&["a"], None, None), new_claim(&["b"], None, None)]).await.expect("claim");
        let mut reported = HashSet::new();
        count_claims(&store, &mut reported).await;
        assert_eq!(
            line(r#"idem_claims_stored{namespace="gauged_ns"}"#).as_deref(),
            Some(r#"idem_claims_stored{namespace="gauged_ns"} 2"#)
        );
        for key in ["a", "b"] {
            store.delete(&n, &id(&[key])).await.expect("delete");
        }
        count_claims(&store, &mut reported).await;
        assert_eq!(
            line(r#"idem_claims_stored{namespace="gauged_ns"}"#).as_deref(),
            Some(r#"idem_claims_stored{namespace="gauged_ns"} 0"#)
        );
    }
}
