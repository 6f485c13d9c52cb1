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
use idem_core::request::LeaseToken;
use idem_core::{Clock, StoreError, Timestamp};
use rusqlite::{Connection, params};
use tokio::sync::{mpsc, oneshot};

use crate::row::store_error;

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub enum Command {
    Accept { event: NewEvent, reply: Reply<Accept> },
    Lease { limit: usize, lease: Duration, busy: Vec<String>, reply: Reply<Vec<Job>> },
    Finish { job: Box<Job>, transition: Box<Transition>, reply: Reply<bool> },
    Release { jobs: Vec<(i64, LeaseToken)>, reply: Reply<usize> },
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
            Command::DeleteEnded { limit, .. } => *limit,
            Command::ReplayMatching { filter, .. } => filter.limit,
            Command::Release { jobs, .. } => jobs.len(),
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
        }
        done.into_iter().for_each(|p| p(failure.as_ref()));
        idem_metrics::store::committed(count, items as u64, started.elapsed().as_secs_f64(), failure.is_some());
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
            Command::Accept { event, reply } => ran(reply, crate::event::accept(conn, &event, now)),
            Command::Lease { limit, lease, busy, reply } => {
                ran(reply, crate::event::lease(conn, limit, lease, &busy, now))
            }
            Command::Finish { job, transition, reply } => {
                ran(reply, crate::event::finish(conn, &job, &transition, now))
            }
            Command::Release { jobs, reply } => ran(reply, crate::event::release(conn, &jobs)),
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
        Command::Finish { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Accept { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Lease { reply, .. } => pending(reply, Err(StoreError::Closed)),
        Command::Release { reply, .. } => pending(reply, Err(StoreError::Closed)),
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
fn probe(conn: &Connection, now: Timestamp) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO meta (key, value) VALUES ('ready_probe', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .and_then(|mut s| s.execute(params![now.millis()]))
    .map(drop)
    .map_err(store_error)
}
