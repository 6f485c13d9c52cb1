//! The overview's counts — receipts by source and status, jobs due, claims by namespace — are
//! whole-table scans on PostgreSQL (and receipts on the embedded store's SQLite), and the overview
//! refreshes every five seconds in every open tab. So the counts are one [`Tally`] on the server:
//! one count runs at a time however many tabs ask, and a count that took a while is reused for
//! twenty times what it took, so the database spends at most about a twentieth of one connection
//! counting for dashboards. Counts that take less than [`Tally::CHEAP`] (any small store) are never
//! reused: they are fresh on every refresh. A replay or discard forgets the last count.

use std::future::Future;
use std::time::Duration;

use idem_core::event::{QueueStats, ReceiptStatus};
use idem_core::{StoreError, Stores};
use tokio::sync::Mutex;
use tokio::time::Instant;

pub struct Tally<T> {
    last: Mutex<Option<Taken<T>>>,
}

struct Taken<T> {
    /// When the count started: what it shows is as of then, at the latest.
    at: Instant,
    took: Duration,
    value: T,
}

impl<T: Clone> Default for Tally<T> {
    fn default() -> Self {
        Self { last: Mutex::new(None) }
    }
}

impl<T: Clone> Tally<T> {
    /// Counts that take less than this are never reused.
    pub const CHEAP: Duration = Duration::from_millis(250);
    /// A count is reused for this many times what it took.
    pub const REUSE: u32 = 20;

    /// The last count while it may be reused, else a new one from `count` (waiting for one that
    /// another caller has under way rather than starting a second); with how old it is. A failed
    /// count is answered but not kept.
    pub async fn get<E, F, Fut>(&self, count: F) -> Result<(T, Duration), E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut last = self.last.lock().await;
        if let Some(taken) = last.as_ref().filter(|t| t.took >= Self::CHEAP && t.at.elapsed() < t.took * Self::REUSE) {
            return Ok((taken.value.clone(), taken.at.elapsed()));
        }
        let at = Instant::now();
        let value = count().await?;
        *last = Some(Taken { at, took: at.elapsed(), value: value.clone() });
        Ok((value, at.elapsed()))
    }

    /// Drops the last count, so that the next `get` counts anew.
    pub async fn forget(&self) {
        *self.last.lock().await = None;
    }
}

/// What the dashboard's overview counts, in one look at the stores: receipts by source and status,
/// the jobs due, claims by namespace. Kept in a [`Tally`] shared by every tab that shows it; a
/// replay or discard forgets it.
#[derive(Clone, Default)]
pub struct StoreCounts {
    pub receipts: Vec<(String, ReceiptStatus, u64)>,
    pub queue: QueueStats,
    pub claims: Vec<(String, u64)>,
}

pub type OverviewCounts = Tally<StoreCounts>;

impl StoreCounts {
    pub async fn of(stores: &Stores) -> Result<Self, StoreError> {
        let (receipts, queue, claims) =
            tokio::join!(stores.events.count_receipts(), stores.events.queue_stats(), stores.claims.count_claims());
        Ok(Self { receipts: receipts?, queue: queue?, claims: claims? })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    async fn count(counted: &AtomicU32, took: Duration) -> Result<u32, String> {
        tokio::time::sleep(took).await;
        Ok(counted.fetch_add(1, Ordering::SeqCst) + 1)
    }

    #[tokio::test(start_paused = true)]
    async fn a_cheap_count_is_never_reused() {
        let (tally, counted) = (Tally::default(), AtomicU32::new(0));
        let quick = Duration::from_millis(5);
        assert_eq!(tally.get(|| count(&counted, quick)).await.map(|(v, _)| v), Ok(1));
        assert_eq!(tally.get(|| count(&counted, quick)).await.map(|(v, _)| v), Ok(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_count_is_reused_for_twenty_times_what_it_took() {
        let (tally, counted) = (Tally::default(), AtomicU32::new(0));
        let slow = Duration::from_secs(1);
        assert_eq!(tally.get(|| count(&counted, slow)).await, Ok((1, slow)));
        tokio::time::advance(Duration::from_secs(10)).await;
        let (value, age) = tally.get(|| count(&counted, slow)).await.expect("count");
        assert_eq!((value, age), (1, Duration::from_secs(11)), "reused, with its age");
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(tally.get(|| count(&counted, slow)).await.map(|(v, _)| v), Ok(2), "21 s old: counted anew");
        tally.forget().await;
        assert_eq!(tally.get(|| count(&counted, slow)).await.map(|(v, _)| v), Ok(3), "forgotten: counted anew");
    }

    #[tokio::test(start_paused = true)]
    async fn callers_at_once_share_one_count() {
        let (tally, counted) = (Arc::new(Tally::default()), Arc::new(AtomicU32::new(0)));
        let slow = Duration::from_secs(1);
        let asks = (0..8).map(|_| {
            let (tally, counted) = (Arc::clone(&tally), Arc::clone(&counted));
            tokio::spawn(async move { tally.get(|| count(&counted, slow)).await.map(|(v, _)| v) })
        });
        for ask in asks.collect::<Vec<_>>() {
            assert_eq!(ask.await.expect("task"), Ok(1));
        }
        assert_eq!(counted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_count_is_not_kept() {
        let tally = Tally::<u32>::default();
        let failed = tally.get(|| async { Err::<u32, _>("down") }).await;
        assert_eq!(failed, Err("down"));
        assert_eq!(tally.get(|| async { Ok::<_, &str>(7) }).await.map(|(v, _)| v), Ok(7));
    }
}
