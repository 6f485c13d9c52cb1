//! How statements reach PostgreSQL. Every statement idem sends goes through [`Run`] (on a pooled
//! [`Conn`], or a [`Tx`] on one) as an [`Sql`]: its text and the types of its parameters. How it
//! is sent is chosen once per store, by `[store] pooler` ([`Statements`]), not at each call:
//!
//! - **Prepared** (the default): a named statement, prepared once per connection and kept in the
//!   connection's cache, then bound and executed in one round trip; PostgreSQL parses it once and
//!   may keep its plan. A statement built per call or run rarely ([`Sql::once`]) is prepared for
//!   that call alone.
//! - **Unnamed** (`pooler = "transaction"`): the unnamed statement, parsed, bound and executed in
//!   one message with its parameter types stated (tokio-postgres's `query_typed`). Nothing of it
//!   outlives the message, so a pooler that hands each transaction any server connection
//!   (PgBouncer in transaction mode, RDS Proxy) can never bind it on another connection, where a
//!   named statement would be missing (SQLSTATE 26000) or, worse, another client's. It costs a
//!   parse and a plan per call (docs/storage.md's "PgBouncer and other poolers" has the figures).
//!
//! A connection offers nothing else: no statement can be prepared behind this module's back. Text
//! in the simple protocol (`BEGIN`, `SET LOCAL`) carries no statement, and passes any pooler.
//!
//! In debug builds the prepared path checks each statement's stated types against the ones
//! PostgreSQL inferred, so the conformance suite proves both paths send the same statement.

use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::{ClientWrapper, StatementCache};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Error, Row};

/// A statement: its text, and the types of `$1`, `$2`, … in order.
#[derive(Debug, Clone, Copy)]
pub struct Sql<'a> {
    text: &'a str,
    types: &'a [Type],
    /// Kept prepared on each connection (by default), rather than prepared per call.
    cached: bool,
}

impl<'a> Sql<'a> {
    /// A statement run often: by default prepared once per connection and kept.
    pub const fn cached(text: &'a str, types: &'a [Type]) -> Self {
        Self { text, types, cached: true }
    }

    /// A statement run rarely (kept, it would only take room) or built per call (its texts would
    /// fill the cache): by default prepared for the call alone.
    pub const fn once(text: &'a str, types: &'a [Type]) -> Self {
        Self { text, types, cached: false }
    }
}

/// How a store sends its statements (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statements {
    Prepared,
    Unnamed,
}

type Params<'p> = [&'p (dyn ToSql + Sync)];

/// What runs statements: a pooled connection, or a transaction on one.
pub trait Run {
    /// The client the statements go to, its statement cache, and how they are sent.
    fn target(&self) -> (&Client, &StatementCache, Statements);

    /// Set when a statement on this connection met a fault of the connection itself (broken, the
    /// server shutting down or read-only: [`crate::connection_fault`]), rather than of the
    /// statement (a deadlock, a constraint): the pool then discards it and every older one.
    fn faulted(&self) -> &AtomicBool;

    /// `result`, noting a fault of the connection on the way.
    fn noted<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        if result.as_ref().is_err_and(crate::connection_fault) {
            self.faulted().store(true, Ordering::Relaxed);
        }
        result
    }

    async fn query(&self, sql: &Sql<'_>, params: &Params<'_>) -> Result<Vec<Row>, Error> {
        let result = async {
            match self.target() {
                (client, _, Statements::Unnamed) => client.query_typed(sql.text, &typed(sql, params)).await,
                (client, cache, _) if sql.cached => client.query(&prepared(client, cache, sql).await?, params).await,
                (client, _, _) => client.query(sql.text, params).await,
            }
        }
        .await;
        self.noted(result)
    }

    /// Exactly one row, else an error.
    async fn query_one(&self, sql: &Sql<'_>, params: &Params<'_>) -> Result<Row, Error> {
        let result = async {
            match self.target() {
                (client, _, Statements::Unnamed) => client.query_typed_one(sql.text, &typed(sql, params)).await,
                (client, cache, _) if sql.cached => {
                    client.query_one(&prepared(client, cache, sql).await?, params).await
                }
                (client, _, _) => client.query_one(sql.text, params).await,
            }
        }
        .await;
        self.noted(result)
    }

    /// At most one row, else an error.
    async fn query_opt(&self, sql: &Sql<'_>, params: &Params<'_>) -> Result<Option<Row>, Error> {
        let result = async {
            match self.target() {
                (client, _, Statements::Unnamed) => client.query_typed_opt(sql.text, &typed(sql, params)).await,
                (client, cache, _) if sql.cached => {
                    client.query_opt(&prepared(client, cache, sql).await?, params).await
                }
                (client, _, _) => client.query_opt(sql.text, params).await,
            }
        }
        .await;
        self.noted(result)
    }

    /// How many rows the statement changed.
    async fn execute(&self, sql: &Sql<'_>, params: &Params<'_>) -> Result<u64, Error> {
        let result = async {
            match self.target() {
                (client, _, Statements::Unnamed) => client.execute_typed(sql.text, &typed(sql, params)).await,
                (client, cache, _) if sql.cached => client.execute(&prepared(client, cache, sql).await?, params).await,
                (client, _, _) => client.execute(sql.text, params).await,
            }
        }
        .await;
        self.noted(result)
    }
}

/// `sql` prepared on `client`, from its cache when it is there.
async fn prepared(client: &Client, cache: &StatementCache, sql: &Sql<'_>) -> Result<tokio_postgres::Statement, Error> {
    let statement = cache.prepare(client, sql.text).await?;
    debug_assert_eq!(statement.params(), sql.types, "the stated parameter types of: {}", sql.text);
    Ok(statement)
}

/// Each parameter with its stated type.
fn typed<'p>(sql: &Sql<'_>, params: &Params<'p>) -> Vec<(&'p (dyn ToSql + Sync), Type)> {
    debug_assert_eq!(params.len(), sql.types.len(), "one type per parameter of: {}", sql.text);
    params.iter().copied().zip(sql.types.iter().cloned()).collect()
}

/// A pooled connection: statements go through [`Run`] only.
pub struct Conn {
    client: ClientWrapper,
    statements: Statements,
    faulted: AtomicBool,
}

impl Conn {
    pub fn new(client: ClientWrapper, statements: Statements) -> Self {
        Self { client, statements, faulted: AtomicBool::new(false) }
    }

    /// Whether the connection is no good any more: closed, or a statement on it met a fault of
    /// the connection itself.
    pub fn at_fault(&self) -> bool {
        self.client.is_closed() || self.faulted.load(Ordering::Relaxed)
    }

    /// Starts a transaction (`BEGIN`, in the simple protocol); dropped without a commit, it is
    /// rolled back.
    pub async fn transaction(&mut self) -> Result<Tx<'_>, Error> {
        let statements = self.statements;
        let faulted = &self.faulted;
        match self.client.transaction().await {
            Ok(tx) => Ok(Tx { tx, statements, faulted }),
            Err(e) => {
                if crate::connection_fault(&e) {
                    faulted.store(true, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }
}

impl Run for Conn {
    fn target(&self) -> (&Client, &StatementCache, Statements) {
        (&self.client, &self.client.statement_cache, self.statements)
    }

    fn faulted(&self) -> &AtomicBool {
        &self.faulted
    }
}

/// A transaction on a pooled connection.
pub struct Tx<'a> {
    tx: deadpool_postgres::Transaction<'a>,
    statements: Statements,
    faulted: &'a AtomicBool,
}

impl Tx<'_> {
    pub async fn commit(self) -> Result<(), Error> {
        let faulted = self.faulted;
        let result = self.tx.commit().await;
        if result.as_ref().is_err_and(crate::connection_fault) {
            faulted.store(true, Ordering::Relaxed);
        }
        result
    }

    /// Text in the simple protocol, with no parameters (`SET LOCAL …`).
    pub async fn batch_execute(&self, text: &str) -> Result<(), Error> {
        self.noted(self.tx.batch_execute(text).await)
    }
}

impl Run for Tx<'_> {
    fn target(&self) -> (&Client, &StatementCache, Statements) {
        (self.tx.client(), &self.tx.statement_cache, self.statements)
    }

    fn faulted(&self) -> &AtomicBool {
        self.faulted
    }
}
