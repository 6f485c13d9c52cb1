//! Gauges read from outside the request path: every 15 seconds the embedded store's size on disk
//! and the space left on its file system (so an alert can see the disk filling before writes
//! start answering 503); every minute the receipts by source and status (dead letters are
//! something an alert can watch); every five minutes the stored claims per namespace (a count of
//! the whole table, so an estimate that lags: expired claims count until the sweeper deletes them).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use idem_core::Store;
use tokio::sync::watch;

const EVERY: Duration = Duration::from_secs(15);
/// Receipts are counted every this many rounds (a minute), claims every `CLAIMS_EVERY` (5 minutes).
const RECEIPTS_EVERY: u64 = 4;
const CLAIMS_EVERY: u64 = 20;

/// Samples until `stop`. `data_dir` is `None` on PostgreSQL, whose disk is the database's to watch.
pub async fn run(store: Arc<dyn Store>, data_dir: Option<PathBuf>, mut stop: watch::Receiver<bool>) {
    let (mut receipts, mut claims) = (HashSet::new(), HashSet::new());
    for round in 0u64.. {
        if let Some(dir) = data_dir.clone()
            && let Ok((size, available)) = tokio::task::spawn_blocking(move || sample(&dir)).await
        {
            metrics::gauge!("idem_store_size_bytes").set(size as f64);
            if let Some(available) = available {
                metrics::gauge!("idem_data_dir_available_bytes").set(available as f64);
            }
        }
        if round % RECEIPTS_EVERY == 0 {
            count_receipts(store.as_ref(), &mut receipts).await;
        }
        if round % CLAIMS_EVERY == 0 {
            count_claims(store.as_ref(), &mut claims).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Sets the receipt gauges; a pair counted before and absent now (all its receipts replayed or
/// deleted) goes back to zero rather than keeping its last value.
async fn count_receipts(store: &dyn Store, reported: &mut HashSet<(String, &'static str)>) {
    let counts = match store.count_receipts().await {
        Ok(counts) => counts,
        Err(e) => return tracing::debug!(error = %e, "could not count receipts"),
    };
    let now: HashSet<(String, &'static str)> =
        counts.iter().map(|(s, status, _)| (s.clone(), status.as_str())).collect();
    for (source, status) in reported.difference(&now) {
        metrics::gauge!("idem_receipts", "source" => source.clone(), "status" => *status).set(0.0);
    }
    for (source, status, n) in counts {
        metrics::gauge!("idem_receipts", "source" => source, "status" => status.as_str()).set(n as f64);
    }
    *reported = now;
}

async fn count_claims(store: &dyn Store, reported: &mut HashSet<String>) {
    let counts = match store.count_claims().await {
        Ok(counts) => counts,
        Err(e) => return tracing::debug!(error = %e, "could not count claims"),
    };
    let now: HashSet<String> = counts.iter().map(|(ns, _)| ns.clone()).collect();
    for ns in reported.difference(&now) {
        metrics::gauge!("idem_claims_stored", "namespace" => ns.clone()).set(0.0);
    }
    for (ns, n) in counts {
        metrics::gauge!("idem_claims_stored", "namespace" => ns).set(n as f64);
    }
    *reported = now;
}

/// The store's files (`idem.db` and its `-wal`, `-shm`) in bytes, and the bytes an unprivileged
/// writer may still use on their file system.
fn sample(dir: &std::path::Path) -> (u64, Option<u64>) {
    let size = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("idem.db"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    #[cfg(unix)]
    let available = rustix::fs::statvfs(dir).ok().map(|s| s.f_bavail.saturating_mul(s.f_frsize));
    #[cfg(not(unix))]
    let available = None;
    (size, available)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use idem_conformance::{START, id, new_claim, ns};
    use idem_core::{ClaimStore, ManualClock};
    use idem_sqlite::{SqliteOptions, SqliteStore};

    use super::*;

    fn line(prefix: &str) -> Option<String> {
        crate::telemetry::metrics_handle().render().lines().find(|l| l.starts_with(prefix)).map(str::to_owned)
    }

    #[tokio::test]
    async fn a_namespace_emptied_reads_zero_not_its_last_count() {
        crate::telemetry::metrics_handle(); // the recorder, before anything is recorded
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            SqliteStore::open(dir.path(), Arc::new(ManualClock::new(START)), SqliteOptions::default()).expect("open");
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
