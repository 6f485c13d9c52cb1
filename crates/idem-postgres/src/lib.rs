//! The PostgreSQL store: any number of idem nodes share one database. Atomicity comes from the
//! database, not the process: unique constraints with `INSERT … ON CONFLICT` for claims and event
//! intake, row locks for gateway keys, `FOR UPDATE SKIP LOCKED` with leases for the job queue, and
//! a receipt with its first job in one transaction. Transient failures (deadlock, serialization
//! failure, a racing insert) are retried here; an unreachable database is `Unavailable`.
//!
//! It implements every storage trait; for events it persists the transitions the core lifecycle
//! decides.
//!
//! Time is the database's: each node follows the database clock (its own clock plus a measured
//! offset), so nodes with skewed clocks agree on expiry. Tests inject a clock instead.

mod claim;
mod event;
mod group;
mod request;
mod schema;
mod signal;
mod time;

pub use time::TimeSource;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use idem_core::event::{
    Accept, Job, NewEvent, QueueStats, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, ReplayBatch, Transition,
};
use idem_core::request::{Begin, Forget, LeaseToken, NewRequest, RequestState};
use idem_core::{
    ClaimId, ClaimOutcome, ClaimRecord, ClaimStore, Clock, EventStore, Namespace, NewClaim, Parts, RequestStore,
    StoreError, StoreLifecycle, Timestamp,
};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("invalid PostgreSQL URL: {0}")]
    Url(String),
    #[error("cannot reach PostgreSQL: {0}")]
    Connect(String),
}

pub struct PgStore {
    pool: Pool,
    clock: Arc<dyn Clock>,
    /// Single claims go through group commit.
    singles: tokio::sync::mpsc::Sender<group::Queued>,
    /// Who hears of other nodes' changes (LISTEN/NOTIFY).
    handlers: signal::Handlers,
    /// Tells other nodes of this one's changes, once committed.
    notifier: signal::Notifier,
}

/// Maps a driver error to the store's terms; SQLSTATEs stay inside this crate.
pub(crate) fn store_error(e: tokio_postgres::Error) -> StoreError {
    match e.code() {
        Some(code) if is_transient(code) => StoreError::Unavailable(e.to_string()),
        Some(code)
            if code.code().starts_with("08") || code.code().starts_with("57") || code.code().starts_with("53") =>
        {
            StoreError::Unavailable(e.to_string())
        }
        Some(_) => StoreError::Internal(e.to_string()),
        None => StoreError::Unavailable(e.to_string()),
    }
}

fn is_transient(code: &SqlState) -> bool {
    *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
        || *code == SqlState::UNIQUE_VIOLATION
}

/// Whether an error is worth running the same operation again.
pub(crate) fn retryable(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(is_transient)
}

impl PgStore {
    /// Connects (`pool_size` connections at most) and applies pending migrations.
    pub async fn connect(url: &str, pool_size: usize, time: TimeSource) -> Result<Self, OpenError> {
        let config: tokio_postgres::Config =
            url.parse().map_err(|e: tokio_postgres::Error| OpenError::Url(e.to_string()))?;
        Self::with_config(config, pool_size, time).await
    }

    /// As [`PgStore::connect`], from a parsed config (tests set `search_path` this way).
    pub async fn with_config(
        config: tokio_postgres::Config,
        pool_size: usize,
        time: TimeSource,
    ) -> Result<Self, OpenError> {
        let listen_config = config.clone();
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool =
            Pool::builder(manager).max_size(pool_size.max(1)).build().map_err(|e| OpenError::Connect(e.to_string()))?;
        let clock: Arc<dyn Clock> = match time {
            TimeSource::Given(clock) => clock,
            TimeSource::Database { local } => time::DatabaseClock::start(local, pool.clone()).await,
        };
        let singles = group::spawn(pool.clone(), Arc::clone(&clock), (pool_size / 2).max(1));
        let handlers = signal::Handlers::default();
        signal::spawn(listen_config, Arc::clone(&handlers));
        let notifier = signal::Notifier::spawn(pool.clone());
        let store = Self { pool, clock, singles, handlers, notifier };
        let mut client = store.client().await.map_err(|e| OpenError::Connect(e.to_string()))?;
        schema::migrate(&mut client).await.map_err(|e| OpenError::Connect(e.to_string()))?;
        Ok(store)
    }

    /// Applies pending migrations to the database at `url` (what `idem migrate` runs).
    pub async fn migrate(url: &str) -> Result<usize, OpenError> {
        let (mut client, connection) =
            tokio_postgres::connect(url, NoTls).await.map_err(|e| OpenError::Connect(e.to_string()))?;
        tokio::spawn(connection);
        schema::migrate(&mut client).await.map_err(|e| OpenError::Connect(e.to_string()))
    }

    async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Closed => StoreError::Closed,
            other => StoreError::Unavailable(other.to_string()),
        })
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The clock this store reads (the database's, unless a test gave one).
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }
}

#[async_trait]
impl ClaimStore for PgStore {
    async fn claim(&self, ns: &Namespace, mut items: Vec<NewClaim>) -> Result<Vec<ClaimOutcome>, StoreError> {
        if items.len() == 1 {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let claim = items.pop().ok_or_else(|| StoreError::Internal("empty claim".into()))?;
            let queued = group::Queued { ns: ns.clone(), claim, reply };
            self.singles.send(queued).await.map_err(|_| StoreError::Closed)?;
            return answer.await.map_err(|_| StoreError::Closed)?.map(|outcome| vec![outcome]);
        }
        let mut client = self.client().await?;
        claim::claim(&mut client, ns, items, self.now()).await
    }

    async fn lookup(&self, ns: &Namespace, ids: &[ClaimId]) -> Result<Vec<Option<ClaimRecord>>, StoreError> {
        let client = self.client().await?;
        claim::lookup(&client, ns, ids, self.now()).await
    }

    async fn prefix_exists(&self, ns: &Namespace, prefix: &Parts) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT 1 FROM claims WHERE ns = $1 AND parts >= $2 AND parts < $3
                 AND (expires_at IS NULL OR expires_at > $4) LIMIT 1",
                &[&ns.as_str(), &prefix.encode(), &prefix.prefix_upper_bound(), &self.now().millis()],
            )
            .await
            .map_err(store_error)?;
        Ok(row.is_some())
    }

    async fn delete(&self, ns: &Namespace, id: &ClaimId) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("DELETE FROM claims WHERE ns = $1 AND id = $2 RETURNING expires_at", &[&ns.as_str(), &&id.0[..]])
            .await
            .map_err(store_error)?;
        let now = self.now().millis();
        Ok(row.is_some_and(|r| r.get::<_, Option<i64>>(0).is_none_or(|at| at > now)))
    }

    async fn count_claims(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let client = self.client().await?;
        let rows = client.query("SELECT ns, count(*) FROM claims GROUP BY ns", &[]).await.map_err(store_error)?;
        Ok(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64)).collect())
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let now = self.now().millis();
        let limit = limit as i64;
        let deleted = client
            .execute(
                "DELETE FROM claims WHERE (ns, id) IN
                     (SELECT ns, id FROM claims WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)",
                &[&now, &limit],
            )
            .await
            .map_err(store_error)?;
        Ok(deleted as usize)
    }
}

#[async_trait]
impl RequestStore for PgStore {
    async fn sweep_requests(&self, limit: usize) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let deleted = client
            .execute(
                "DELETE FROM requests WHERE id IN (SELECT id FROM requests WHERE until <= $1 ORDER BY until LIMIT $2)",
                &[&self.now().millis(), &(limit as i64)],
            )
            .await
            .map_err(store_error)?;
        Ok(deleted as usize)
    }

    async fn begin_request(&self, request: NewRequest) -> Result<Begin, StoreError> {
        let mut client = self.client().await?;
        request::begin(&mut client, &request, self.now()).await
    }

    async fn complete_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        result: &[u8],
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let completed = request::complete(&client, id, &token, result, ttl, self.now()).await?;
        if completed {
            self.notifier.notify(signal::request_done(id));
        }
        Ok(completed)
    }

    async fn extend_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        lease: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        let client = self.client().await?;
        request::extend(&client, id, &token, lease, self.now()).await
    }

    async fn release_request(&self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("DELETE FROM requests WHERE id = $1 AND state = 0 AND token = $2")
            .await
            .map_err(store_error)?;
        let released = client.execute(&statement, &[&&id.0[..], &&token.0[..]]).await.map_err(store_error)? == 1;
        if released {
            self.notifier.notify(signal::request_done(id));
        }
        Ok(released)
    }

    async fn peek_request(&self, id: &ClaimId) -> Result<Option<RequestState>, StoreError> {
        let client = self.client().await?;
        request::peek(&client, id, self.now()).await
    }

    async fn forget_request(&self, id: &ClaimId) -> Result<Forget, StoreError> {
        let client = self.client().await?;
        request::forget(&client, id, self.now()).await
    }
}

#[async_trait]
impl EventStore for PgStore {
    async fn accept_event(&self, e: NewEvent) -> Result<Accept, StoreError> {
        let mut client = self.client().await?;
        let accepted = event::accept(&mut client, &e, self.now()).await?;
        if matches!(accepted, Accept::Accepted { .. }) {
            self.notifier.notify(signal::JOBS.to_owned());
        }
        Ok(accepted)
    }

    async fn lease_jobs(&self, limit: usize, lease: Duration, busy_sources: &[String]) -> Result<Vec<Job>, StoreError> {
        let mut client = self.client().await?;
        event::lease(&mut client, limit, lease, busy_sources, self.now()).await
    }

    async fn finish_job(&self, job: &Job, transition: Transition) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        event::finish(&mut client, job, &transition, self.now()).await
    }

    async fn get_receipt(&self, id: &ReceiptId) -> Result<Option<Receipt>, StoreError> {
        let client = self.client().await?;
        event::get(&client, id).await
    }

    async fn list_receipts(&self, filter: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError> {
        let client = self.client().await?;
        event::list(&client, filter).await
    }

    async fn replay_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        let mut client = self.client().await?;
        let replayed = event::replay(&mut client, id, self.now()).await?;
        if replayed.is_some_and(|status| idem_core::event::replay(status) == idem_core::event::Replay::Restart) {
            self.notifier.notify(signal::JOBS.to_owned());
        }
        Ok(replayed)
    }

    async fn count_matching(&self, filter: &ReceiptFilter) -> Result<u64, StoreError> {
        let client = self.client().await?;
        event::count_matching(&client, filter).await
    }

    async fn replay_matching(&self, filter: &ReceiptFilter) -> Result<ReplayBatch, StoreError> {
        let mut client = self.client().await?;
        let batch = event::replay_matching(&mut client, filter, self.now()).await?;
        if batch.replayed > 0 {
            self.notifier.notify(signal::JOBS.to_owned());
        }
        Ok(batch)
    }

    async fn discard_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        let mut client = self.client().await?;
        event::discard(&mut client, id, self.now()).await
    }

    async fn delete_ended_receipts(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
        let mut client = self.client().await?;
        event::delete_ended(&mut client, before, limit).await
    }

    async fn count_receipts(&self) -> Result<Vec<(String, ReceiptStatus, u64)>, StoreError> {
        let client = self.client().await?;
        event::count_receipts(&client).await
    }

    async fn queue_stats(&self) -> Result<QueueStats, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT count(*), min(due_at) FROM jobs WHERE due_at <= $1", &[&self.now().millis()])
            .await
            .map_err(store_error)?;
        Ok(QueueStats { due: row.get::<_, i64>(0) as u64, oldest_due_at: row.get::<_, Option<i64>>(1).map(Timestamp) })
    }
}

#[async_trait]
impl StoreLifecycle for PgStore {
    fn on_signal(&self, handler: idem_core::SignalHandler) {
        if let Ok(mut handlers) = self.handlers.lock() {
            handlers.push(handler);
        }
    }

    async fn check_ready(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO meta (key, value) VALUES ('ready_probe', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&self.now().millis()],
            )
            .await
            .map(drop)
            .map_err(store_error)
    }

    async fn close(&self) {
        self.pool.close();
    }
}
