//! The PostgreSQL store: any number of idem nodes share one database. Atomicity comes from the
//! database, not the process: unique constraints with `INSERT … ON CONFLICT` for claims and event
//! intake, row locks for gateway keys, `FOR UPDATE SKIP LOCKED` with leases for the job queue, and
//! a receipt with its first job in one transaction. Transient failures (deadlock, serialization
//! failure, a racing insert) are retried here; an unreachable database is `Unavailable`, and a
//! write whose connection broke after it was sent is `OutcomeUnknown`. Connections, time limits
//! and what a fault does to them (a failover, a read-only server, a black-holed connection) are
//! [`pool`]'s.
//!
//! It implements every storage trait; for events it persists the transitions the core lifecycle
//! decides.
//!
//! Every statement goes through [`sql`], which sends it as a named prepared statement or, behind
//! a transaction pooler (`[store] pooler = "transaction"`), as an unnamed one; [`pooler`] says
//! what else a pooler changes, and how one met without the setting is answered.
//!
//! Time is the database's: each node follows the database clock (its own monotonic clock plus a
//! measured offset), so nodes with skewed clocks agree on expiry and a step of a node's wall clock
//! moves no lease. Tests inject a clock instead.

mod claim;
mod event;
mod group;
mod pool;
mod pooler;
mod request;
mod schema;
mod signal;
mod sql;
mod time;

pub use pool::PgOptions;
pub use pooler::{MISCONFIGURED, Pooler};
pub use time::TimeSource;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idem_core::event::{
    Accept, Job, NewEvent, QueueStats, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, ReplayBatch, Transition,
};
use idem_core::request::{Begin, Forget, LeaseToken, NewRequest, RequestState};
use idem_core::{
    ClaimId, ClaimOutcome, ClaimRecord, ClaimStore, ClaimUpdate, Clock, EventStore, Namespace, NewClaim, Parts,
    RequestStore, StoreError, StoreLifecycle, Timestamp, UpdateOutcome,
};
use idem_metrics::store::Retry;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use crate::pool::{Db, with_conn};
use crate::sql::{Run, Sql};

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("invalid PostgreSQL URL: {0}")]
    Url(String),
    #[error("cannot reach PostgreSQL: {0}")]
    Connect(String),
}

pub struct PgStore {
    db: Arc<Db>,
    clock: Arc<dyn Clock>,
    /// Single claims go through group commit.
    singles: tokio::sync::mpsc::Sender<group::Queued>,
    /// Who hears of other nodes' changes (LISTEN/NOTIFY).
    handlers: signal::Handlers,
    /// Tells other nodes of this one's changes, once committed.
    notifier: signal::Notifier,
}

fn parse_url(url: &str) -> Result<tokio_postgres::Config, OpenError> {
    url.parse().map_err(|e: tokio_postgres::Error| OpenError::Url(pool::describe(&e)))
}

/// Applies pending migrations on a connection of their own to the first of `hosts` that accepts
/// writes.
async fn migrate_on(hosts: &[(String, tokio_postgres::Config)], timeout: Duration) -> Result<usize, OpenError> {
    let mut connected = pool::connect_writable(hosts, timeout).await.map_err(|e| OpenError::Connect(e.to_string()))?;
    let migrated = schema::migrate(&mut connected.client).await.map_err(|e| OpenError::Connect(pool::describe(&e)));
    connected.driver.abort();
    migrated
}

/// Maps a driver error to the store's terms, for a call after which nothing was changed: a read,
/// or a statement inside a transaction not yet committed. SQLSTATEs stay inside this crate.
pub(crate) fn store_error(e: tokio_postgres::Error) -> StoreError {
    let what = pool::describe(&e);
    if pooler::lost_statement(&e) {
        return pooler::misconfigured(&what);
    }
    match e.code() {
        Some(code) if transient(code).is_some() || is_fault(code) => StoreError::Unavailable(what),
        Some(_) => StoreError::Internal(what),
        None if broken(&e) => StoreError::Unavailable(what),
        None => StoreError::Internal(what),
    }
}

/// As [`store_error`], for a write that was sent to be committed (a `COMMIT`, or a statement
/// committing on its own): if the connection broke, or the server was shut down, before its
/// answer came, the write may have been applied.
pub(crate) fn commit_error(e: tokio_postgres::Error) -> StoreError {
    // A statement lost to a pooler never ran (its 08P01 is a refused bind, not a broken line).
    if pooler::lost_statement(&e) {
        return store_error(e);
    }
    let unknown = match e.code() {
        None => broken(&e),
        Some(code) => {
            code.code().starts_with("08")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::T_R_STATEMENT_COMPLETION_UNKNOWN
        }
    };
    if unknown { StoreError::OutcomeUnknown(pool::describe(&e)) } else { store_error(e) }
}

/// Why the database refused a transaction that is worth running again, if it is.
fn transient(code: &SqlState) -> Option<Retry> {
    if *code == SqlState::T_R_SERIALIZATION_FAILURE {
        Some(Retry::Serialization)
    } else if *code == SqlState::T_R_DEADLOCK_DETECTED {
        Some(Retry::Deadlock)
    } else if *code == SqlState::UNIQUE_VIOLATION {
        Some(Retry::UniqueViolation)
    } else {
        None
    }
}

/// The server cannot serve this connection now: broken (08), shutting down or starting (57),
/// out of resources (53), or read-only (25006: a standby, or a primary made read-only).
fn is_fault(code: &SqlState) -> bool {
    let class = code.code();
    class.starts_with("08")
        || class.starts_with("57")
        || class.starts_with("53")
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
        || *code == SqlState::T_R_STATEMENT_COMPLETION_UNKNOWN
}

/// Whether `e` is a fault of the connection (or of the server behind it) rather than of the
/// statement: broken (class 08, or closed), the server shutting down or not yet up (57P01–57P03),
/// read-only (25006: a standby, or a primary made read-only), or a commit whose outcome the server
/// could not tell (40003). A deadlock, a serialization failure, a constraint, a cancelled statement
/// or a server short of memory leave the connection as good as it was.
pub(crate) fn connection_fault(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        None => broken(e),
        Some(code) => {
            code.code().starts_with("08")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
                || *code == SqlState::READ_ONLY_SQL_TRANSACTION
                || *code == SqlState::T_R_STATEMENT_COMPLETION_UNKNOWN
        }
    }
}

/// The connection itself failed (closed, or an I/O error), rather than the statement.
fn broken(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || std::error::Error::source(e).is_some_and(|cause| cause.is::<std::io::Error>())
}

/// Whether an error is worth running the same transaction again; one that is counts as a retry
/// (`idem_store_retried_transactions_total`), so ask only when it would run again.
pub(crate) fn run_again(e: &tokio_postgres::Error) -> bool {
    let reason = e.code().and_then(transient);
    reason.into_iter().for_each(idem_metrics::store::retried);
    reason.is_some()
}

/// A transaction's failure: before its `COMMIT` was sent (nothing was changed), or at it.
pub(crate) enum TxError {
    Before(tokio_postgres::Error),
    Commit(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for TxError {
    fn from(e: tokio_postgres::Error) -> Self {
        TxError::Before(e)
    }
}

/// Runs a transaction body, again when a concurrent transaction got in the way (at most three
/// times more). A failure at `COMMIT` is never retried here: its outcome may be unknown.
macro_rules! retrying {
    ($client:expr, |$tx:ident| $body:expr) => {{
        let mut tries = 0;
        loop {
            let attempt = async {
                let $tx = $client.transaction().await?;
                let out = $body;
                $tx.commit().await.map_err($crate::TxError::Commit)?;
                Ok::<_, $crate::TxError>(out)
            }
            .await;
            match attempt {
                Err($crate::TxError::Before(e)) if tries < 3 && $crate::run_again(&e) => tries += 1,
                Err($crate::TxError::Before(e)) => break Err($crate::store_error(e)),
                Err($crate::TxError::Commit(e)) => break Err($crate::commit_error(e)),
                Ok(out) => break out,
            }
        }
    }};
}
pub(crate) use retrying;

impl PgStore {
    /// Connects (to the first of the URL's hosts that accepts writes) and applies pending
    /// migrations.
    pub async fn connect(url: &str, options: &PgOptions, time: TimeSource) -> Result<Self, OpenError> {
        Self::with_config(parse_url(url)?, options, time).await
    }

    /// As [`PgStore::connect`], from a parsed config (tests set `search_path` this way).
    pub async fn with_config(
        config: tokio_postgres::Config,
        options: &PgOptions,
        time: TimeSource,
    ) -> Result<Self, OpenError> {
        let direct = options.direct_url.as_deref().map(parse_url).transpose()?;
        let db = Arc::new(Db::new(&config, options).map_err(|e| OpenError::Url(e.to_string()))?);
        // The first connection says, host by host, why none will do.
        let first = db.pool.get().await.map_err(|e| {
            OpenError::Connect(match e {
                deadpool::managed::PoolError::Backend(e) => e.to_string(),
                other => other.to_string(),
            })
        })?;
        drop(first);
        let hosts = pool::per_host(&config, options.connect_timeout);
        if options.pooler == Pooler::None
            && let Some(found) = pooler::probe(&hosts, options.connect_timeout).await
        {
            db.refuse(pooler::misconfigured(&found));
        }
        let clock: Arc<dyn Clock> = match time {
            TimeSource::Given(clock) => clock,
            TimeSource::Database { ticks } => time::DatabaseClock::start(ticks, Arc::clone(&db)).await,
        };
        let singles = group::spawn(Arc::clone(&db), Arc::clone(&clock), (options.pool_size / 2).max(1));
        // What needs a session of its own (LISTEN, migrations) goes past the pooler when it can.
        let sessions = direct.map_or(hosts, |direct| pool::per_host(&direct, options.connect_timeout));
        let handlers = signal::Handlers::default();
        if options.pooler == Pooler::Transaction && options.direct_url.is_none() {
            tracing::info!(
                "[store] pooler = \"transaction\" without direct_url: no notifications are heard; other nodes' changes are found by looking again (within a second)"
            );
        } else {
            signal::spawn(sessions.clone(), options.connect_timeout, Arc::clone(&handlers));
        }
        let notifier = signal::Notifier::spawn(Arc::clone(&db));
        migrate_on(&sessions, options.connect_timeout).await?;
        Ok(Self { db, clock, singles, handlers, notifier })
    }

    /// Applies pending migrations to the database at `url` (what `idem migrate` runs), on the
    /// first of its hosts that accepts writes. Through a transaction pooler too: they take no
    /// session lock (schema.rs).
    pub async fn migrate(url: &str) -> Result<usize, OpenError> {
        let options = PgOptions::default();
        migrate_on(&pool::per_host(&parse_url(url)?, options.connect_timeout), options.connect_timeout).await
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
            let claim = items.pop().ok_or_else(|| StoreError::Internal("empty claim".into()))?;
            return group::claim_one(&self.singles, self.db.call_timeout, ns, claim).await.map(|outcome| vec![outcome]);
        }
        let now = self.now();
        with_conn!(self.db, true, |client| claim::claim(&mut client, ns, &items, now).await)
    }

    async fn lookup(&self, ns: &Namespace, ids: &[ClaimId]) -> Result<Vec<Option<ClaimRecord>>, StoreError> {
        let now = self.now();
        with_conn!(self.db, false, |client| claim::lookup(&client, ns, ids, now).await)
    }

    async fn prefix_exists(&self, ns: &Namespace, prefix: &Parts) -> Result<bool, StoreError> {
        let now = self.now().millis();
        const EXISTS: Sql = Sql::cached(
            "SELECT 1 FROM claims WHERE ns = $1 AND parts >= $2 AND parts < $3
             AND (expires_at IS NULL OR expires_at > $4) LIMIT 1",
            &[Type::TEXT, Type::BYTEA, Type::BYTEA, Type::INT8],
        );
        with_conn!(self.db, false, |client| {
            let row = client
                .query_opt(&EXISTS, &[&ns.as_str(), &prefix.encode(), &prefix.prefix_upper_bound(), &now])
                .await
                .map_err(store_error)?;
            Ok(row.is_some())
        })
    }

    async fn update(&self, ns: &Namespace, update: ClaimUpdate) -> Result<UpdateOutcome, StoreError> {
        let now = self.now();
        with_conn!(self.db, true, |client| claim::update(&mut client, ns, &update, now).await)
    }

    async fn delete(&self, ns: &Namespace, id: &ClaimId) -> Result<bool, StoreError> {
        let now = self.now().millis();
        with_conn!(self.db, true, |client| {
            const DELETE: Sql = Sql::once(
                "DELETE FROM claims WHERE ns = $1 AND id = $2 RETURNING expires_at",
                &[Type::TEXT, Type::BYTEA],
            );
            let row = client.query_opt(&DELETE, &[&ns.as_str(), &&id.0[..]]).await.map_err(commit_error)?;
            Ok(row.is_some_and(|r| r.get::<_, Option<i64>>(0).is_none_or(|at| at > now)))
        })
    }

    async fn list(
        &self,
        ns: &Namespace,
        prefix: &Parts,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<ClaimRecord>, StoreError> {
        let now = self.now();
        with_conn!(self.db, false, |client| claim::list(&client, ns, prefix, after, limit, now).await)
    }

    async fn delete_prefix(&self, ns: &Namespace, prefix: &Parts, limit: usize) -> Result<usize, StoreError> {
        let now = self.now();
        with_conn!(self.db, true, |client| claim::delete_prefix(&client, ns, prefix, limit, now).await)
    }

    async fn count_claims(&self) -> Result<Vec<(String, u64)>, StoreError> {
        with_conn!(self.db, false, |client| {
            const COUNT: Sql = Sql::once("SELECT ns, count(*) FROM claims GROUP BY ns", &[]);
            let rows = client.query(&COUNT, &[]).await.map_err(store_error)?;
            Ok(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64)).collect())
        })
    }

    /// Rows another transaction holds (a claim replacing an expired one, another node's sweeper)
    /// are skipped rather than waited for: a sweep never waits, so it cannot deadlock.
    async fn sweep_expired(&self, limit: usize) -> Result<usize, StoreError> {
        let (now, limit) = (self.now().millis(), limit as i64);
        with_conn!(self.db, true, |client| {
            // Picked once, at most `limit` (event.rs's `LEASE` says why).
            const SWEEP: Sql = Sql::once(
                "WITH picked AS MATERIALIZED (SELECT ns, id FROM claims WHERE expires_at <= $1
                     ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
                 DELETE FROM claims USING picked WHERE claims.ns = picked.ns AND claims.id = picked.id",
                &[Type::INT8, Type::INT8],
            );
            let deleted = client.execute(&SWEEP, &[&now, &limit]).await.map_err(commit_error)?;
            Ok(deleted as usize)
        })
    }
}

#[async_trait]
impl RequestStore for PgStore {
    /// As claims' sweep: rows another transaction holds are skipped, not waited for. A lease that
    /// ran out is kept ENDED_LEASE_KEPT longer, while its holder may still complete it.
    ///
    /// The sweep finds rows by `sweep_at` (request.rs's `BEGIN` sets it), not by `until`, which
    /// every completion and extension changes: an index on it would make each of them write a
    /// new index entry. A row found due is deleted if its time is up; one that is not (a lease
    /// extended past its planned end, a result kept longer than planned) is given a later
    /// `sweep_at` (its `until`, plus ENDED_LEASE_KEPT while it is held), once.
    async fn sweep_requests(&self, limit: usize) -> Result<usize, StoreError> {
        let now = self.now();
        let (kept_after, now) = (request::kept_after(now), now.millis());
        let kept = idem_core::request::ENDED_LEASE_KEPT.as_millis() as i64;
        with_conn!(self.db, true, |client| {
            // Picked once, at most `limit` (event.rs's `LEASE` says why).
            const SWEEP: Sql = Sql::once(
                "WITH picked AS MATERIALIZED (SELECT id, state, until,
                         until <= $1 AND (state = 1 OR until <= $3) AS ended
                     FROM requests WHERE sweep_at <= $1 ORDER BY sweep_at LIMIT $2 FOR UPDATE SKIP LOCKED),
                 gone AS (DELETE FROM requests USING picked WHERE requests.id = picked.id AND picked.ended RETURNING 1),
                 later AS (UPDATE requests SET sweep_at = picked.until + CASE WHEN picked.state = 0 THEN $4::bigint ELSE 0 END
                     FROM picked WHERE requests.id = picked.id AND NOT picked.ended)
                 SELECT count(*) FROM gone",
                &[Type::INT8, Type::INT8, Type::INT8, Type::INT8],
            );
            let row =
                client.query_one(&SWEEP, &[&now, &(limit as i64), &kept_after, &kept]).await.map_err(commit_error)?;
            Ok(row.get::<_, i64>(0) as usize)
        })
    }

    async fn begin_request(&self, request: NewRequest) -> Result<Begin, StoreError> {
        let now = self.now();
        with_conn!(self.db, true, |client| request::begin(&mut client, &request, now).await)
    }

    async fn complete_request(
        &self,
        id: &ClaimId,
        token: LeaseToken,
        result: &[u8],
        ttl: Duration,
    ) -> Result<Option<Timestamp>, StoreError> {
        let now = self.now();
        let completed =
            with_conn!(self.db, true, |client| request::complete(&client, id, &token, result, ttl, now).await)?;
        if completed.is_some() {
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
        let now = self.now();
        with_conn!(self.db, true, |client| request::extend(&client, id, &token, lease, now).await)
    }

    async fn release_request(&self, id: &ClaimId, token: LeaseToken) -> Result<bool, StoreError> {
        let kept_after = request::kept_after(self.now());
        let released = with_conn!(self.db, true, |client| {
            let released = client.execute(&request::RELEASE, &[&&id.0[..], &&token.0[..], &kept_after]).await;
            Ok(released.map_err(commit_error)? == 1)
        })?;
        if released {
            self.notifier.notify(signal::request_done(id));
        }
        Ok(released)
    }

    async fn peek_request(&self, id: &ClaimId) -> Result<Option<RequestState>, StoreError> {
        let now = self.now();
        with_conn!(self.db, false, |client| request::peek(&client, id, now).await)
    }

    async fn forget_request(&self, id: &ClaimId) -> Result<Forget, StoreError> {
        let now = self.now();
        with_conn!(self.db, true, |client| request::forget(&client, id, now).await)
    }
}

#[async_trait]
impl EventStore for PgStore {
    async fn accept_event(&self, e: NewEvent) -> Result<Accept, StoreError> {
        let now = self.now();
        let accepted = with_conn!(self.db, true, |client| event::accept(&mut client, &e, now).await)?;
        if matches!(accepted, Accept::Accepted { .. }) {
            self.notifier.notify(signal::JOBS.to_owned());
        }
        Ok(accepted)
    }

    async fn lease_jobs(&self, limit: usize, lease: Duration, busy_sources: &[String]) -> Result<Vec<Job>, StoreError> {
        let now = self.now();
        with_conn!(self.db, true, |client| event::lease(&mut client, limit, lease, busy_sources, now).await)
    }

    async fn finish_job(&self, job: &Job, transition: Transition) -> Result<bool, StoreError> {
        let now = self.now();
        with_conn!(self.db, true, |client| event::finish(&mut client, job, &transition, now).await)
    }

    /// Released jobs are due at once: the other nodes' workers are woken to take them.
    async fn release_jobs(&self, jobs: &[Job]) -> Result<usize, StoreError> {
        let released = with_conn!(self.db, true, |client| event::release(&client, jobs).await)?;
        if released > 0 {
            self.notifier.notify(signal::JOBS.to_owned());
        }
        Ok(released)
    }

    async fn get_receipt(&self, id: &ReceiptId) -> Result<Option<Receipt>, StoreError> {
        with_conn!(self.db, false, |client| event::get(&client, id).await)
    }

    async fn list_receipts(&self, filter: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError> {
        with_conn!(self.db, false, |client| event::list(&client, filter).await)
    }

    async fn replay_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        let now = self.now();
        let replayed = with_conn!(self.db, true, |client| event::replay(&mut client, id, now).await)?;
        if replayed.is_some_and(|status| idem_core::event::replay(status) == idem_core::event::Replay::Restart) {
            self.notifier.notify(signal::JOBS.to_owned());
        }
        Ok(replayed)
    }

    async fn count_matching(&self, filter: &ReceiptFilter) -> Result<u64, StoreError> {
        with_conn!(self.db, false, |client| event::count_matching(&client, filter).await)
    }

    async fn replay_matching(&self, filter: &ReceiptFilter) -> Result<ReplayBatch, StoreError> {
        let now = self.now();
        let batch = with_conn!(self.db, true, |client| event::replay_matching(&mut client, filter, now).await)?;
        if batch.replayed > 0 {
            self.notifier.notify(signal::JOBS.to_owned());
        }
        Ok(batch)
    }

    async fn discard_receipt(&self, id: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        let now = self.now();
        with_conn!(self.db, true, |client| event::discard(&mut client, id, now).await)
    }

    async fn delete_ended_receipts(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
        with_conn!(self.db, true, |client| event::delete_ended(&mut client, before, limit).await)
    }

    async fn count_receipts(&self) -> Result<Vec<(String, ReceiptStatus, u64)>, StoreError> {
        with_conn!(self.db, false, |client| event::count_receipts(&client).await)
    }

    async fn queue_stats(&self) -> Result<QueueStats, StoreError> {
        let now = self.now().millis();
        with_conn!(self.db, false, |client| {
            const DUE: Sql = Sql::once("SELECT count(*), min(due_at) FROM jobs WHERE due_at <= $1", &[Type::INT8]);
            let row = client.query_one(&DUE, &[&now]).await.map_err(store_error)?;
            Ok(QueueStats {
                due: row.get::<_, i64>(0) as u64,
                oldest_due_at: row.get::<_, Option<i64>>(1).map(Timestamp),
            })
        })
    }
}

#[async_trait]
impl StoreLifecycle for PgStore {
    fn on_signal(&self, handler: idem_core::SignalHandler) {
        if let Ok(mut handlers) = self.handlers.lock() {
            handlers.push(handler);
        }
    }

    /// Ready when a write commits now, within one call's time limit: a node whose database is
    /// unreachable, or read-only, is not.
    async fn check_ready(&self) -> Result<(), StoreError> {
        let now = self.now().millis();
        const PROBE: Sql = Sql::once(
            "INSERT INTO meta (key, value) VALUES ('ready_probe', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[Type::INT8],
        );
        with_conn!(self.db, true, |client| client.execute(&PROBE, &[&now]).await.map(drop).map_err(commit_error))
    }

    async fn close(&self) {
        self.db.pool.close();
    }
}
