//! Gauges read from outside the request path: every 15 seconds the embedded store's size on disk
//! and the space left on its file system (so an alert can see the disk filling before writes
//! start answering 503); every minute the receipts by source and status (dead letters are
//! something an alert can watch); the stored claims per namespace every five minutes where that
//! is a count of a whole table (PostgreSQL: an estimate that lags, expired claims count until the
//! sweeper deletes them). The embedded store keeps its live claims counted as claims come, go and
//! expire, so there they are read at every scrape instead ([`claims_at_scrape`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{ClaimStore, Clock, EventStore, Stores};
use tokio::sync::watch;

const EVERY: Duration = Duration::from_secs(15);
/// Receipts are counted every this many rounds (a minute), claims every `CLAIMS_EVERY` (5 minutes)
/// where counting them scans a table.
const RECEIPTS_EVERY: u64 = 4;
const CLAIMS_EVERY: u64 = 20;

/// Samples until `stop`. `data_dir` is `None` on PostgreSQL, whose disk is the database's to watch.
pub async fn run(stores: Stores, data_dir: Option<PathBuf>, clock: Arc<dyn Clock>, mut stop: watch::Receiver<bool>) {
    for round in 0u64.. {
        clock_apart(clock.as_ref(), round);
        if let Some(dir) = data_dir.clone()
            && let Ok((size, available)) =
                tokio::task::spawn_blocking(move || crate::embedded::tools::size_on_disk(&dir)).await
        {
            idem_metrics::store::on_disk(size, available);
        }
        if round % RECEIPTS_EVERY == 0 {
            count_receipts(stores.events.as_ref()).await;
        }
        if round % CLAIMS_EVERY == 0 && !stores.claims.counts_are_live() {
            count_claims(stores.claims.as_ref()).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// How far the wall clock is from the time leases are kept by; told in the log when over a second,
/// every ten minutes while it lasts (each round is 15 s).
fn clock_apart(clock: &dyn Clock, round: u64) {
    let apart = clock.wall_apart_ms();
    idem_metrics::store::clock_apart(apart as f64 / 1000.0);
    if apart.abs() > 1000 && round.is_multiple_of(40) {
        tracing::warn!(
            apart_ms = apart,
            "the system clock is apart from the time idem keeps leases and TTLs by (it was stepped, or it is skewed from the database's clock); idem does not jump with it: it slews toward the wall clock at 5 ms a second, and on PostgreSQL it follows the database's clock"
        );
    }
}

/// Receipts per (source, status).
async fn count_receipts(store: &dyn EventStore) {
    match store.count_receipts().await {
        Ok(counts) => {
            idem_metrics::events::receipts(counts.into_iter().map(|(source, status, n)| (source, status.as_str(), n)))
        }
        Err(e) => tracing::debug!(error = %e, "could not count receipts"),
    }
}

/// Stored claims per namespace.
async fn count_claims(store: &dyn ClaimStore) {
    match store.count_claims().await {
        Ok(counts) => idem_metrics::claims::stored(counts),
        Err(e) => tracing::debug!(error = %e, "could not count claims"),
    }
}

/// The live claims per namespace, published as a scrape renders the metrics, where the store
/// keeps them counted (no scan).
pub async fn claims_at_scrape(store: &dyn ClaimStore) {
    if store.counts_are_live() {
        count_claims(store).await;
    }
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
        count_claims(&store).await;
        assert_eq!(
            line(r#"idem_claims_stored{namespace="gauged_ns"}"#).as_deref(),
            Some(r#"idem_claims_stored{namespace="gauged_ns"} 2"#)
        );
        for key in ["a", "b"] {
            store.delete(&n, &id(&[key])).await.expect("delete");
        }
        count_claims(&store).await;
        assert_eq!(
            line(r#"idem_claims_stored{namespace="gauged_ns"}"#).as_deref(),
            Some(r#"idem_claims_stored{namespace="gauged_ns"} 0"#)
        );
    }
}
