//! The background sweeper: deletes expired claims in small batches so that the file does not grow
//! forever. Correctness never depends on it: reads already treat an expired claim as absent.

use std::sync::Arc;

use idem_core::Store;
use tokio::sync::watch;

use crate::config::SweeperConfig;

pub async fn run(store: Arc<dyn Store>, config: SweeperConfig, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(config.interval.0) => {}
            _ = stop.changed() => return,
        }
        sweep_all(store.as_ref(), config.batch, &stop).await;
    }
}

/// Deletes batch after batch until a batch comes back short; each batch is its own small write so
/// that claims keep flowing in between.
pub async fn sweep_all(store: &dyn Store, batch: usize, stop: &watch::Receiver<bool>) -> usize {
    let mut total = 0;
    while !*stop.borrow() {
        match store.sweep_expired(batch).await {
            Ok(n) => {
                total += n;
                metrics::counter!("idem_sweeper_deleted_total").increment(n as u64);
                if n < batch {
                    break;
                }
                tokio::task::yield_now().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "sweeper could not delete expired claims; will retry");
                break;
            }
        }
    }
    if total > 0 {
        tracing::debug!(deleted = total, "swept expired claims");
    }
    total
}
