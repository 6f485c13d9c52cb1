//! The background sweeper: deletes expired claims and finished keys (gateway records past their
//! TTL, leases that ran out) in small batches so that the store does not grow forever. Correctness
//! never depends on it: reads already treat an expired record as absent. With `[events]
//! retention` it also deletes handled receipts (`completed`, `discarded`) older than that.

use std::future::Future;
use std::time::Duration;

use std::sync::Arc;

use idem_core::{ClaimStore, Clock, EventStore, RequestStore, StoreError, Stores};
use tokio::sync::watch;

use crate::config::SweeperConfig;

/// Sweeps every `config.interval` until `stop`, by `clock` (the store's: a step of the wall clock
/// moves nothing it deletes).
pub async fn run(
    stores: Stores,
    clock: Arc<dyn Clock>,
    config: SweeperConfig,
    retention: Option<Duration>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(config.interval.0) => {}
            _ = stop.changed() => return,
        }
        sweep_all(stores.claims.as_ref(), stores.requests.as_ref(), config.batch, &stop).await;
        if let Some(retention) = retention {
            sweep_receipts(stores.events.as_ref(), clock.now(), retention, config.batch, &stop).await;
        }
    }
}

/// Retention: deletes handled receipts last changed more than `retention` ago, batch by batch.
pub async fn sweep_receipts(
    store: &dyn EventStore,
    now: idem_core::Timestamp,
    retention: Duration,
    batch: usize,
    stop: &watch::Receiver<bool>,
) -> usize {
    let ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let before = idem_core::Timestamp(now.millis().saturating_sub(ms));
    let n = drain("receipts", || store.delete_ended_receipts(before, batch), batch, stop).await;
    idem_metrics::events::receipts_deleted(n as u64);
    n
}

/// Deletes expired claims, then finished keys, batch after batch until a batch comes back short;
/// each batch is its own small write so that claims keep flowing in between.
pub async fn sweep_all(
    claims: &dyn ClaimStore,
    requests: &dyn RequestStore,
    batch: usize,
    stop: &watch::Receiver<bool>,
) -> usize {
    let claims = drain("claims", || claims.sweep_expired(batch), batch, stop).await;
    let keys = drain("keys", || requests.sweep_requests(batch), batch, stop).await;
    let now = idem_core::Clock::now(&idem_core::SystemClock).millis() as f64 / 1000.0;
    idem_metrics::store::sweep_done(now);
    claims + keys
}

async fn drain<F, Fut>(what: &'static str, mut next: F, batch: usize, stop: &watch::Receiver<bool>) -> usize
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<usize, StoreError>>,
{
    let mut total = 0;
    while !*stop.borrow() {
        match next().await {
            Ok(n) => {
                total += n;
                idem_metrics::store::swept(n as u64);
                if n < batch {
                    break;
                }
                tokio::task::yield_now().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, what, "sweeper could not delete expired records; will retry");
                break;
            }
        }
    }
    if total > 0 {
        tracing::debug!(deleted = total, what, "swept expired records");
    }
    total
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use idem_conformance::{START, new_claim, ns};
    use idem_core::{ClaimStore, ManualClock};
    use idem_log::{LogOptions, LogStore};
    use idem_sqlite::{SqliteOptions, SqliteStore};

    use super::*;

    #[tokio::test]
    async fn sweeps_batch_after_batch_until_only_live_claims_remain() {
        let dir = tempfile::tempdir().expect("temp dir");
        let clock = Arc::new(ManualClock::new(START));
        let store = LogStore::open(dir.path(), clock.clone(), LogOptions::default()).expect("open");
        let n = ns("sweep");
        let ttl = Some(Duration::from_secs(60));
        let expiring = (0..25).map(|i| new_claim(&[&format!("old-{i}")], None, ttl)).collect();
        store.claim(&n, expiring).await.expect("claim");
        store.claim(&n, vec![new_claim(&["kept"], None, None)]).await.expect("claim");
        let (_stop, stopped) = watch::channel(false);
        assert_eq!(sweep_all(&store, &store, 10, &stopped).await, 0, "nothing has expired yet");
        clock.advance(Duration::from_secs(60));
        assert_eq!(sweep_all(&store, &store, 10, &stopped).await, 25, "three batches of at most 10");
        assert!(store.get(&n, &idem_conformance::id(&["kept"])).await.expect("get").is_some());
    }

    #[tokio::test]
    async fn retention_deletes_handled_receipts_older_than_configured() {
        use idem_core::EventStore;
        use idem_core::event::{AttemptRecord, Change, JobNext, NewEvent, ReceiptStatus, Transition};
        let config: crate::config::Config = toml::from_str("[events]\nretention = \"30d\"").expect("config");
        assert_eq!(config.events.retention.map(|r| r.0), Some(Duration::from_secs(30 * 86_400)));
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            SqliteStore::open(dir.path(), Arc::new(idem_core::SystemClock), SqliteOptions::default()).expect("open");
        let event = NewEvent::new("s".into(), "e".into(), b"{}".to_vec(), None);
        store.accept_event(event).await.expect("accept");
        let job = store.lease_jobs(1, Duration::from_secs(60), &[]).await.expect("lease").remove(0);
        let attempt = AttemptRecord {
            round: 1,
            n: 1,
            started_at: idem_core::Timestamp(0),
            duration_ms: 1,
            status_code: Some(200),
            error: None,
            response: None,
        };
        let done = Transition {
            attempt,
            job: JobNext::Remove,
            change: Change::Receipt { status: ReceiptStatus::Completed, result_job: None },
        };
        assert!(store.finish_job(&job, done).await.expect("finish"));
        let (_stop, stopped) = watch::channel(false);
        let all = idem_core::event::ReceiptFilter { limit: 10, ..Default::default() };
        assert_eq!(store.list_receipts(&all).await.expect("list").len(), 1);
        let now = || idem_core::Clock::now(&idem_core::SystemClock);
        let hour = Duration::from_secs(3600);
        assert_eq!(sweep_receipts(&store, now(), hour, 10, &stopped).await, 0, "younger than retention");
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(sweep_receipts(&store, now(), Duration::ZERO, 10, &stopped).await, 1);
        assert!(store.list_receipts(&all).await.expect("list").is_empty());
    }
}
