//! What stands between idem and PostgreSQL (contract §10's "Poolers"; docs/storage.md's
//! "PgBouncer and other poolers").
//!
//! A pooler that keeps each client on one server session (PgBouncer's session mode, HAProxy)
//! needs nothing. One that hands each transaction whichever server connection is free
//! (PgBouncer's transaction mode, RDS Proxy) keeps nothing of a session from one transaction to
//! the next: no named prepared statement, no `LISTEN`, no session advisory lock. With
//! `[store] pooler = "transaction"` idem relies on none of them: unnamed statements (`sql.rs`),
//! notifications heard over `[store] direct_url` or not at all (waiters and workers look again
//! within a second anyway), migrations in one transaction under a transaction-level lock
//! (`schema.rs`).
//!
//! Without the setting, such a pooler is found in two ways and answered in one. At start-up a
//! probe sees the server connection under one client connection change between two transactions
//! (a direct connection, a session pooler or a TCP proxy never does that); at any time after, a
//! statement is found missing (SQLSTATE 26000), already there (42P05), or someone else's (08P01,
//! `bind message supplies 7 parameters, but prepared statement "s1" requires 5`). From then on
//! the store refuses every call with [`MISCONFIGURED`] and sends no named statement more (one
//! bound to another client's statement of the same shape would run the wrong SQL): `503`,
//! `/readyz` failing, and the log saying it once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idem_core::StoreError;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, SimpleQueryMessage};

use crate::pool::connect_writable;
use crate::sql::Statements;

/// What stands between idem and PostgreSQL (`[store] pooler`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pooler {
    /// Nothing, or a pooler that keeps each client on one server session (PgBouncer's session
    /// mode, HAProxy): named prepared statements, `LISTEN` on the URL.
    #[default]
    None,
    /// A pooler that hands each transaction any server connection (PgBouncer's transaction mode,
    /// RDS Proxy): unnamed statements; `LISTEN` only over `direct_url`.
    Transaction,
}

impl Pooler {
    pub(crate) fn statements(self) -> Statements {
        match self {
            Pooler::None => Statements::Prepared,
            Pooler::Transaction => Statements::Unnamed,
        }
    }
}

/// What a store met by a transaction pooler without the setting answers (to clients too).
pub const MISCONFIGURED: &str = "PostgreSQL is reached through a pooler that gives each transaction its own \
     server connection (PgBouncer in transaction mode, RDS Proxy), and idem's prepared statements do not \
     survive that: set [store] pooler = \"transaction\" (with [store] direct_url for notifications), or \
     pool in session mode";

/// Whether `e` is a named statement lost to a transaction pooler: missing (26000), already there
/// (42P05), or another client's with other parameters (08P01, told by PostgreSQL's English
/// message; in another language it stays a protocol fault: a 503 all the same).
pub fn lost_statement(e: &tokio_postgres::Error) -> bool {
    let Some(db) = e.as_db_error() else { return false };
    let code = db.code();
    *code == SqlState::INVALID_SQL_STATEMENT_NAME
        || *code == SqlState::DUPLICATE_PSTATEMENT
        || (*code == SqlState::PROTOCOL_VIOLATION && db.message().starts_with("bind message"))
}

/// Told once per process: the first store to meet the pooler says so, with what gave it away.
static TOLD: AtomicBool = AtomicBool::new(false);

/// The error a store answers once it has met a transaction pooler without the setting; `cause`
/// (what gave it away) is logged, the first time only.
pub fn misconfigured(cause: &str) -> StoreError {
    if !TOLD.swap(true, Ordering::Relaxed) {
        tracing::error!(cause, "{MISCONFIGURED}; until then every store call answers 503");
    }
    StoreError::Misconfigured(MISCONFIGURED.to_owned())
}

/// At start-up: whether the server connection under one client connection changes between two
/// of its transactions, which only a transaction pooler does. Clients `a` and `b` each open a
/// transaction and read their backend's pid, so that a pooler must give them two server
/// connections; both end, `a` first; then `a` and `b` read their pids again. A direct connection,
/// a session pooler or a TCP proxy answers the same pids; a pooler that reuses the last server
/// connection freed first (PgBouncer's default) gives `a` the one `b` had. One that hands them
/// out another way may go unseen here, and is found by its first lost statement. `Some`: what gave
/// it away.
pub async fn probe(hosts: &[(String, Config)], timeout: Duration) -> Option<String> {
    // At once: behind a dead first host, start-up waits out its connect_timeout once, not twice.
    let (a, b) = tokio::join!(connect_writable(hosts, timeout), connect_writable(hosts, timeout));
    let (a, b) = match (a, b) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            a.into_iter().chain(b).for_each(|c| c.driver.abort());
            return None;
        }
    };
    let pids = async {
        let first_a = backend_pid(&a.client, "BEGIN; SELECT pg_backend_pid()").await?;
        // Behind a pooler with one server connection to give, this waits: bounded below.
        let first_b = backend_pid(&b.client, "BEGIN; SELECT pg_backend_pid()").await?;
        a.client.batch_execute("COMMIT").await.ok()?;
        b.client.batch_execute("COMMIT").await.ok()?;
        let again_a = backend_pid(&a.client, "SELECT pg_backend_pid()").await?;
        let again_b = backend_pid(&b.client, "SELECT pg_backend_pid()").await?;
        Some([(first_a, again_a), (first_b, again_b)])
    };
    let pids = tokio::time::timeout(timeout, pids).await.ok().flatten();
    // Ended before the connections, so that a pooler keeps its server connections (one whose
    // client left mid-transaction is closed).
    for client in [&a.client, &b.client] {
        let _ = tokio::time::timeout(timeout, client.batch_execute("ROLLBACK")).await;
    }
    a.driver.abort();
    b.driver.abort();
    let changed = pids?.into_iter().find(|(first, again)| first != again)?;
    let (first, again) = changed;
    Some(format!("one connection's server backend changed between two of its transactions (pid {first}, then {again})"))
}

/// The backend pid the last statement of `text` (the simple protocol: no statement is prepared)
/// answers.
async fn backend_pid(client: &Client, text: &str) -> Option<String> {
    let messages = client.simple_query(text).await.ok()?;
    messages.into_iter().rev().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    })
}
