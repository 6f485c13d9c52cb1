//! Time on a shared database: every node reads "now" as its own clock plus its measured offset
//! from the database's clock, so nodes with skewed clocks still agree on when a claim or lease
//! expires. The offset is measured at start and every 10 seconds (the midpoint of a round trip).

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
            self.offset_ms.store(db - (before + after) / 2, Ordering::Relaxed);
        }
    }
}
