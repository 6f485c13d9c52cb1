//! Time on a shared database: every node reads "now" as its own monotonic clock plus its measured
//! offset from the database's clock, so nodes with skewed clocks still agree on when a claim or
//! lease expires, and a step of one node's wall clock (NTP at boot, `date -s`, a VM resumed) moves
//! nothing: the wall clock is not read at all. The offset is measured at start and every 10 seconds
//! (the midpoint of a round trip of at most half a second: a slower one is not used); one that moves
//! by more than a second (the database's clock was stepped, or this node was paused) is logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use idem_core::{Clock, Ticks, Timestamp};

use crate::pool::Db;
use crate::sql::{Run, Sql};

/// How a store reads the time.
pub enum TimeSource {
    /// The database's clock, followed on this node's monotonic clock (production: the system's).
    Database { ticks: Arc<dyn Ticks> },
    /// Exactly this clock (tests that control time).
    Given(Arc<dyn Clock>),
}

#[derive(Debug)]
pub struct DatabaseClock {
    ticks: Arc<dyn Ticks>,
    /// The database's time minus this node's monotonic clock, in milliseconds.
    offset_ms: AtomicI64,
}

impl Clock for DatabaseClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.monotonic() + self.offset_ms.load(Ordering::Relaxed))
    }

    /// This node's wall clock against the database's: how skewed this node's clock is.
    fn wall_apart_ms(&self) -> i64 {
        self.ticks.wall().millis() - self.now().millis()
    }
}

impl DatabaseClock {
    fn monotonic(&self) -> i64 {
        i64::try_from(self.ticks.monotonic().as_millis()).unwrap_or(i64::MAX)
    }

    /// Measures the offset once, then keeps it current in the background.
    pub async fn start(ticks: Arc<dyn Ticks>, db: Arc<Db>) -> Arc<Self> {
        let first = ticks.wall().millis() - i64::try_from(ticks.monotonic().as_millis()).unwrap_or(i64::MAX);
        let clock = Arc::new(Self { ticks, offset_ms: AtomicI64::new(first) });
        clock.measure(&db, false).await;
        let weak = Arc::downgrade(&clock);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let Some(clock) = weak.upgrade() else { return };
                clock.measure(&db, true).await;
            }
        });
        clock
    }

    /// One measurement, within a call's time limit; a failed one leaves the last offset. `tell`: a
    /// move of over a second is logged (not at start, where the first guess is the wall clock's).
    async fn measure(&self, db: &Db, tell: bool) {
        let measured = async {
            crate::pool::with_conn!(*db, false, |client| {
                let before = self.monotonic();
                let row = client.query_one(&NOW, &[]).await.map_err(crate::store_error)?;
                Ok::<_, idem_core::StoreError>((before, row.get::<_, i64>(0), self.monotonic()))
            })
        };
        if let Ok((before, db, after)) = measured.await {
            match offset(before, db, after) {
                Some(offset) => {
                    let moved = offset - self.offset_ms.swap(offset, Ordering::Relaxed);
                    if tell && moved.abs() > 1000 {
                        tracing::warn!(
                            moved_ms = moved,
                            "the database's clock moved against this node's monotonic clock (stepped, or this node was paused); following it"
                        );
                    }
                }
                None => {
                    tracing::debug!(round_trip_ms = after - before, "clock measurement too slow to use; offset kept")
                }
            }
        }
    }
}

/// The database's clock, in milliseconds since the epoch.
const NOW: Sql = Sql::once("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint", &[]);

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
