//! The single writer and its group commit.
//!
//! The writer thread blocks for one command, then takes every command already waiting (up to a
//! bound) and runs them all in one `BEGIN IMMEDIATE … COMMIT`. With `synchronous = FULL` the commit
//! is one fsync for the whole group; only after it returns does any caller get its answer. If any
//! command or the commit fails (disk full, I/O error, a lock held by another program), the whole
//! group is rolled back and every command in it is answered with the error: none of them was
//! acknowledged, so nothing acknowledged is lost and nothing is half applied.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use std::time::Duration;

use idem_core::event::{Accept, Job, NewEvent, ReceiptFilter, ReceiptId, ReceiptStatus, ReplayBatch, Transition};
use idem_core::request::{Begin, Forget, LeaseToken, NewRequest};
use idem_core::{ClaimId, ClaimOutcome, ClaimRecord, Clock, Namespace, NewClaim, StoreError, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use crate::row::{self, store_error};

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub enum Command {
    Claim { ns: Namespace, items: Vec<NewClaim>, reply: Reply<Vec<ClaimOutcome>> },
    Delete { ns: Namespace, id: ClaimId, reply: Reply<bool> },
    Sweep { limit: usize, reply: Reply<usize> },
    SweepRequests { limit: usize, reply: Reply<usize> },
    Begin { request: NewRequest, reply: Reply<Begin> },
    Complete { id: ClaimId, token: LeaseToken, response: Vec<u8>, ttl: Duration, reply: Reply<bool> },
    Release { id: ClaimId, token: LeaseToken, reply: Reply<bool> },
    Extend { id: ClaimId, token: LeaseToken, lease: Duration, reply: Reply<Option<Timestamp>> },
    Forget { id: ClaimId, reply: Reply<Forget> },
    Accept { event: NewEvent, reply: Reply<Accept> },
    Lease { limit: usize, lease: Duration, busy: Vec<String>, reply: Reply<Vec<Job>> },
    Finish { job: Box<Job>, transition: Box<Transition>, reply: Reply<bool> },
    Replay { id: ReceiptId, reply: Reply<Option<ReceiptStatus>> },
    ReplayMatching { filter: Box<ReceiptFilter>, reply: Reply<ReplayBatch> },
    Discard { id: ReceiptId, reply: Reply<Option<ReceiptStatus>> },
    DeleteEnded { before: Timestamp, limit: usize, reply: Reply<usize> },
    Probe { reply: Reply<()> },
    Close { reply: oneshot::Sender<()> },
}

impl Command {
    /// How much work the command adds to a group, to bound a group's size.
    fn weight(&self) -> usize {
        match self {
            Command::Claim { items, .. } => items.len().max(1),
            Command::Sweep { limit, .. }
            | Command::SweepRequests { limit, .. }
            | Command::DeleteEnded { limit, .. } => *limit,
            Command::ReplayMatching { filter, .. } => filter.limit,
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

/// Reads an existing claim; the columns are [`row::COLUMNS`].
const SELECT_CLAIM: &str = "SELECT parts, data, created_at, expires_at FROM claims WHERE ns = ?1 AND id = ?2";

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
        let mut failure = run(&self.conn, "BEGIN IMMEDIATE").err();
        for command in group.drain(..) {
            match command {
                Command::Close { reply } => close = Some(reply),
                command if failure.is_some() => done.push(abandon(command)),
                command => {
                    let (pending, error) = self.execute(command, now);
                    done.push(pending);
                    failure = error;
                }
            }
        }
        let failure = failure.or_else(|| run(&self.conn, "COMMIT").err());
        if let Some(e) = &failure {
            // Nothing in this group was kept, so nothing in it may be acknowledged.
            if !self.conn.is_autocommit() {
                let _ = self.conn.execute_batch("ROLLBACK");
            }
            tracing::warn!(error = %e, commands = count, "store write failed; the group was rolled back");
            metrics::counter!("idem_store_commit_errors_total").increment(1);
        }
        done.into_iter().for_each(|p| p(failure.as_ref()));
        metrics::histogram!("idem_store_commit_batch_commands").record(count as f64);
        metrics::histogram!("idem_store_commit_batch_items").record(items as f64);
        metrics::histogram!("idem_store_commit_seconds").record(started.elapsed().as_secs_f64());
        close
    }

    /// Runs one command inside the group's transaction. Its answer waits for the commit; an error
    /// fails the whole group, so that no command is ever half applied.
    fn execute(&self, command: Command, now: Timestamp) -> (Pending, Option<StoreError>) {
        fn ran<T: Send + 'static>(reply: Reply<T>, result: Result<T, StoreError>) -> (Pending, Option<StoreError>) {
            let error = result.as_ref().err().cloned();
            (pending(reply, result), error)
        }
        let conn = &self.conn;
        match command {
            Command::Claim { ns, items, reply } => ran(reply, claim(conn, &ns, items, now)),
            Command::Delete { ns, id, reply } => ran(reply, delete(conn, &ns, &id, now)),
            Command::Sweep { limit, reply } => ran(reply, sweep(conn, limit, now)),
            Command::SweepRequests { limit, reply } => ran(reply, crate::request::sweep(conn, limit, now)),
            Command::Begin { request, reply } => ran(reply, crate::request::begin(conn, &request, now)),
            Command::Complete { id, token, response, ttl, reply } => {
                ran(reply, crate::request::complete(conn, &id, &token, &response, ttl, now))
            }
            Command::Release { id, token, reply } => ran(reply, crate::request::release(conn, &id, &token)),
            Command::Forget { id, reply } => ran(reply, crate::request::forget(conn, &id, now)),
            Command::Extend { id, token, lease, reply } => {
                ran(reply, crate::request::extend(conn, &id, &token, lease, now))
            }
            Command::Accept { event, reply } => ran(reply, crate::event::accept(conn, &event, now)),
            Command::Lease { limit, lease, busy, reply } => {
                ran(reply, crate::event::lease(conn, limit, lease, &busy, now))
            }
            Command::Finish { job, transition, reply } => {
                ran(reply, crate::event::finish(conn, &job, &transition, now))
            }
            Command::Replay { id, reply } => ran(reply, crate::event::replay(conn, &id, now)),
            Command::ReplayMatching { filter, reply } => ran(reply, crate::event::replay_matching(conn, &filter, now)),
            Command::Discard { id, reply } => ran(reply, crate::event::discard(conn, &id, now)),
            Command::DeleteEnded { before, limit, reply } => {
                ran(reply, crate::event::delete_ended(conn, before, limit))
            }
            Command::Probe { reply } => ran(reply, probe(conn, now)),
            Command::Close { reply } => (abandon(Command::Close { reply }), None),
        }
    }
}

/// Runs a parameterless statement, prepared once.
fn run(conn: &Connection, sql: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql).and_then(|mut s| s.execute([])).map(drop).map_err(store_error)
}

/// A command left unrun because its group already failed: it is answered with that failure.
fn abandon(command: Command) -> Pending {
    match command {
        Command::Claim { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Delete { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Sweep { reply, .. } | Command::SweepRequests { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Begin { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Complete { reply, .. } | Command::Release { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Extend { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Forget { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Finish { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Accept { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Lease { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Replay { reply, .. } | Command::Discard { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::ReplayMatching { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::DeleteEnded { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Probe { reply } => pending(reply, Err(StoreError::Closed)),
        Command::Close { reply } => {
            let _ = reply.send(());
            Box::new(|_| ())
        }
    }
}

/// Claims every item. Items are inserted in id order, which keeps consecutive inserts on nearby
/// index pages; the sort is stable, so of two equal keys the one asked first still wins. Answers
/// come back in request order.
fn claim(
    conn: &Connection,
    ns: &Namespace,
    items: Vec<NewClaim>,
    now: Timestamp,
) -> Result<Vec<ClaimOutcome>, StoreError> {
    let mut insert = conn.prepare_cached(INSERT_CLAIM).map_err(store_error)?;
    let mut select = conn.prepare_cached(SELECT_CLAIM).map_err(store_error)?;
    let mut keyed: Vec<(usize, ClaimId, NewClaim)> =
        items.into_iter().enumerate().map(|(i, item)| (i, item.parts.id(), item)).collect();
    keyed.sort_by_key(|(_, id, _)| *id);
    let mut out: Vec<Option<ClaimOutcome>> = (0..keyed.len()).map(|_| None).collect();
    for (i, id, item) in keyed {
        let expires_at = item.ttl.map(|ttl| now.plus(ttl));
        let data = item.data.as_deref().map(|d| d.get());
        let values =
            params![ns.as_str(), &id.0[..], item.parts.encode(), data, now.millis(), expires_at.map(Timestamp::millis)];
        let inserted = insert.execute(values).map_err(store_error)?;
        out[i] = Some(if inserted == 1 {
            let record = ClaimRecord {
                namespace: ns.clone(),
                id,
                parts: item.parts,
                data: item.data,
                created_at: now,
                expires_at,
            };
            ClaimOutcome { claimed: true, record }
        } else {
            let record = select
                .query_row(params![ns.as_str(), &id.0[..]], |r| row::record(ns, id, r))
                .map_err(store_error)??;
            ClaimOutcome { claimed: false, record }
        });
    }
    out.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| StoreError::Internal("a claim went unanswered".into()))
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
