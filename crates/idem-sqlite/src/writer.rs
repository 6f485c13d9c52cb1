//! The single writer and its group commit.
//!
//! The writer thread blocks for one command, then takes every command already waiting (up to a
//! bound) and runs them all in one `BEGIN IMMEDIATE … COMMIT`. With `synchronous = FULL` the commit
//! is one fsync for the whole group; only after it returns does any caller get its answer. Each
//! command runs inside its own savepoint, so a command that fails leaves no partial rows behind and
//! does not take the rest of the group with it. If the transaction itself fails (disk full, I/O
//! error), every command in the group is answered `Unavailable`: none of them was acknowledged, so
//! nothing acknowledged is lost.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use idem_core::{ClaimId, ClaimOutcome, ClaimRecord, Clock, Namespace, NewClaim, StoreError, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use crate::row::{self, store_error};

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub enum Command {
    Claim { ns: Namespace, items: Vec<NewClaim>, reply: Reply<Vec<ClaimOutcome>> },
    Delete { ns: Namespace, id: ClaimId, reply: Reply<bool> },
    Sweep { limit: usize, reply: Reply<usize> },
    Probe { reply: Reply<()> },
    Close { reply: oneshot::Sender<()> },
}

impl Command {
    /// How much work the command adds to a group, to bound a group's size.
    fn weight(&self) -> usize {
        match self {
            Command::Claim { items, .. } => items.len().max(1),
            Command::Sweep { limit, .. } => *limit,
            _ => 1,
        }
    }
}

/// A command that ran inside the open transaction, waiting for the commit to learn its fate.
type Pending = Box<dyn FnOnce(Option<&StoreError>) + Send>;

fn pending<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> Pending {
    Box::new(move |failure| {
        let _ = reply.send(match failure {
            Some(e) => Err(e.clone()),
            None => result,
        });
    })
}

const INSERT_CLAIM: &str = "INSERT INTO claims (ns, id, parts, data, created_at, expires_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
     ON CONFLICT (ns, id) DO UPDATE SET
         parts = excluded.parts, data = excluded.data,
         created_at = excluded.created_at, expires_at = excluded.expires_at
     WHERE claims.expires_at IS NOT NULL AND claims.expires_at <= ?5";

pub fn spawn(
    conn: Connection,
    queue: mpsc::Receiver<Command>,
    clock: Arc<dyn Clock>,
    max_batch_items: usize,
) -> std::io::Result<JoinHandle<()>> {
    let writer = Writer { conn, queue, clock, max_batch_items };
    std::thread::Builder::new().name("idem-sqlite-writer".into()).spawn(move || writer.run())
}

struct Writer {
    conn: Connection,
    queue: mpsc::Receiver<Command>,
    clock: Arc<dyn Clock>,
    max_batch_items: usize,
}

impl Writer {
    fn run(mut self) {
        let mut group = Vec::new();
        while let Some(first) = self.queue.blocking_recv() {
            let mut weight = first.weight();
            group.push(first);
            while weight < self.max_batch_items {
                let Ok(next) = self.queue.try_recv() else { break };
                weight += next.weight();
                group.push(next);
            }
            if let Some(close) = self.commit_group(&mut group) {
                self.queue.close();
                let _ = close.send(());
                break;
            }
        }
        tracing::debug!("sqlite writer stopped");
    }

    /// Runs one group in one transaction; returns the close request if the group held one.
    fn commit_group(&mut self, group: &mut Vec<Command>) -> Option<oneshot::Sender<()>> {
        let started = Instant::now();
        let now = self.clock.now();
        let (count, items) = (group.len(), group.iter().map(Command::weight).sum::<usize>());
        let mut close = None;
        let mut done: Vec<Pending> = Vec::with_capacity(group.len());
        if let Err(e) = self.conn.execute_batch("BEGIN IMMEDIATE") {
            fail_all(group.drain(..), &store_error(e));
            return None;
        }
        let mut commands = group.drain(..);
        while let Some(command) = commands.next() {
            match command {
                Command::Close { reply } => close = Some(reply),
                command => done.push(self.execute(command, now)),
            }
            if self.conn.is_autocommit() {
                // SQLite rolled the whole transaction back (I/O error, full disk): nothing in this
                // group was kept, so nothing in it may be acknowledged.
                let e = StoreError::Unavailable("transaction rolled back by the database".into());
                done.drain(..).for_each(|p| p(Some(&e)));
                fail_all(&mut commands, &e);
                return close;
            }
        }
        drop(commands);
        let outcome = self.conn.execute_batch("COMMIT").map_err(store_error);
        if outcome.is_err() {
            let _ = self.conn.execute_batch("ROLLBACK");
            metrics::counter!("idem_store_commit_errors_total").increment(1);
        }
        done.into_iter().for_each(|p| p(outcome.as_ref().err()));
        metrics::histogram!("idem_store_commit_batch_commands").record(count as f64);
        metrics::histogram!("idem_store_commit_batch_items").record(items as f64);
        metrics::histogram!("idem_store_commit_seconds").record(started.elapsed().as_secs_f64());
        close
    }

    /// Runs one command inside its own savepoint.
    fn execute(&self, command: Command, now: Timestamp) -> Pending {
        match command {
            Command::Claim { ns, items, reply } => pending(reply, self.savepoint(|c| claim(c, &ns, items, now))),
            Command::Delete { ns, id, reply } => pending(reply, self.savepoint(|c| delete(c, &ns, &id, now))),
            Command::Sweep { limit, reply } => pending(reply, self.savepoint(|c| sweep(c, limit, now))),
            Command::Probe { reply } => pending(reply, self.savepoint(|c| probe(c, now))),
            Command::Close { reply } => {
                let _ = reply.send(());
                Box::new(|_| ())
            }
        }
    }

    fn savepoint<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.conn.execute_batch("SAVEPOINT cmd").map_err(store_error)?;
        let result = f(&self.conn);
        let end = if result.is_ok() { "RELEASE cmd" } else { "ROLLBACK TO cmd; RELEASE cmd" };
        if !self.conn.is_autocommit() {
            self.conn.execute_batch(end).map_err(store_error)?;
        }
        result
    }
}

fn fail_all(commands: impl Iterator<Item = Command>, e: &StoreError) {
    for command in commands {
        match command {
            Command::Claim { reply, .. } => drop(reply.send(Err(e.clone()))),
            Command::Delete { reply, .. } => drop(reply.send(Err(e.clone()))),
            Command::Sweep { reply, .. } => drop(reply.send(Err(e.clone()))),
            Command::Probe { reply } => drop(reply.send(Err(e.clone()))),
            Command::Close { reply } => drop(reply.send(())),
        }
    }
}

fn claim(
    conn: &Connection,
    ns: &Namespace,
    items: Vec<NewClaim>,
    now: Timestamp,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    let mut insert = conn.prepare_cached(INSERT_CLAIM).map_err(store_error)?;
    let select_sql = format!("SELECT {} FROM claims WHERE ns = ?1 AND id = ?2", row::COLUMNS);
    let mut select = conn.prepare_cached(&select_sql).map_err(store_error)?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let id = item.parts.id();
        let expires_at = item.ttl.map(|ttl| now.plus(ttl));
        let data = item.data.as_deref().map(|d| d.get());
        let inserted = insert
            .execute(params![
                ns.as_str(),
                &id.0[..],
                item.parts.encode(),
                data,
                now.millis(),
                expires_at.map(Timestamp::millis)
            ])
            .map_err(store_error)?;
        if inserted == 1 {
            let record = ClaimRecord {
                namespace: ns.clone(),
                id,
                parts: item.parts,
                data: item.data,
                created_at: now,
                expires_at,
            };
            out.push(ClaimOutcome { claimed: true, record });
        } else {
            let record = select
                .query_row(params![ns.as_str(), &id.0[..]], |r| row::record(ns, id, r))
                .map_err(store_error)??;
            out.push(ClaimOutcome { claimed: false, record });
        }
    }
    Ok(out)
}

fn delete(conn: &Connection, ns: &Namespace, id: &ClaimId, now: Timestamp) -> Result<bool, StoreError> {
    let mut stmt = conn
        .prepare_cached("DELETE FROM claims WHERE ns = ?1 AND id = ?2 RETURNING expires_at")
        .map_err(store_error)?;
    let deleted: Option<Option<i64>> =
        stmt.query_row(params![ns.as_str(), &id.0[..]], |r| r.get(0)).optional().map_err(store_error)?;
    // Deleting an expired row is housekeeping; to the caller it was already absent.
    Ok(matches!(deleted, Some(expires) if expires.is_none_or(|at| at > now.millis())))
}

fn sweep(conn: &Connection, limit: usize, now: Timestamp) -> Result<usize, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "DELETE FROM claims WHERE (ns, id) IN
                 (SELECT ns, id FROM claims WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2)",
        )
        .map_err(store_error)?;
    stmt.execute(params![now.millis(), limit as i64]).map_err(store_error)
}

fn probe(conn: &Connection, now: Timestamp) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO meta (key, value) VALUES ('ready_probe', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .and_then(|mut s| s.execute(params![now.millis()]))
    .map(drop)
    .map_err(store_error)
}
