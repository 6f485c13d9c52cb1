//! Time on a shared database: every node reads "now" as its own clock plus its measured offset
//! from the database's clock, so nodes with skewed clocks still agree on when a claim or lease
//! expires. The offset is measured at start and every 10 seconds (the midpoint of a round trip of
//! at most half a second: a slower one is not used).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use idem_core::{Clock, Timestamp};

use crate::pool::Db;

/// How a store reads the time.
pub enum TimeSource {
    /// The database's clock, followed from this node's `local` clock (production: the system clock).
    Database { local: Arc<dyn Clock> },
    /// Exactly this clock (tests that control time).
    Given(Arc<dyn Clock>),
}

#[derive(Debug)]
pub struct DatabaseClock {
    local: Arc<dyn Clock>,
    offset_ms: AtomicI64,
}

impl Clock for DatabaseClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.local.now().millis() + self.offset_ms.load(Ordering::Relaxed))
    }
}

impl DatabaseClock {
    /// Measures the offset once, then keeps it current in the background.
    pub async fn start(local: Arc<dyn Clock>, db: Arc<Db>) -> Arc<Self> {
        let clock = Arc::new(Self { local, offset_ms: AtomicI64::new(0) });
        clock.measure(&db).await;
        let weak = Arc::downgrade(&clock);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let Some(clock) = weak.upgrade() else { return };
                clock.measure(&db).await;
            }
        });
        clock
    }

    /// One measurement, within a call's time limit; a failed one leaves the last offset.
    async fn measure(&self, db: &Db) {
        let local = &self.local;
        let measured = async {
            crate::pool::with_conn!(*db, false, |client| {
                let before = local.now().millis();
                let row = client
                    .query_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint", &[])
                    .await
                    .map_err(crate::store_error)?;
                Ok::<_, idem_core::StoreError>((before, row.get::<_, i64>(0), local.now().millis()))
            })
        };
        if let Ok((before, db, after)) = measured.await {
            match offset(before, db, after) {
                Some(offset) => self.offset_ms.store(offset, Ordering::Relaxed),
                None => {
                    tracing::debug!(round_trip_ms = after - before, "clock measurement too slow to use; offset kept")
                }
            }
        }
    }
}

/// A measurement whose round trip took longer is not used: the database read its clock somewhere
/// within the round trip, so the offset is known only to half of it, and a round trip that spanned
/// a stalled path (a partition, a black hole: up to `call_timeout`) would move every lease this
/// node computes by seconds.
const MAX_ROUND_TRIP_MS: i64 = 500;

/// The offset of the database's clock from this node's, from one measurement (this node's clock
/// before and after, the database's in between), when its round trip was short enough to trust.
fn offset(before: i64, db: i64, after: i64) -> Option<i64> {
    (after - before <= MAX_ROUND_TRIP_MS).then(|| db - (before + after) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_counts_only_when_its_round_trip_was_short() {
        assert_eq!(offset(1_000, 1_010, 1_020), Some(0), "the midpoint of a quick round trip");
        assert_eq!(offset(1_000, 3_000, 1_020), Some(1_990), "a database two seconds ahead");
        assert_eq!(offset(1_000, 1_000 + MAX_ROUND_TRIP_MS, 1_000 + MAX_ROUND_TRIP_MS), Some(MAX_ROUND_TRIP_MS / 2));
        // A query held by a stalled path for 4.9 s and answered when it came back: its midpoint
        // is 2.45 s before the answer, so it is refused rather than taken as a 2.45 s offset.
        assert_eq!(offset(1_000, 5_900, 5_900), None);
    }
}
