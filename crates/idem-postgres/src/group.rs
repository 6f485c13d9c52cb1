//! Group commit for single claims: concurrent claims wait in a queue, and a dispatcher sends
//! whatever has gathered as one statement per namespace (claim.rs), so that many requests share a
//! round trip and a commit. A batch that already holds many claims goes straight to the database.
//!
//! One group at a time per node: the claims that arrive while it commits make the next, so a group
//! is as large as one commit's worth of claims, and PostgreSQL flushes its WAL less often than for
//! the same claims sent as single `INSERT`s (docs/performance.md, "Single claims in groups"). Sending
//! each group as soon as a connection was free split a commit's arrivals into groups of one or two.
//! But a group held up (waiting on a row another transaction holds, on a connection that died
//! without a word) would hold up every single claim on the node for `call_timeout`: once the last
//! group has been out for [`HELD_UP`], the next goes beside it, up to half the pool's connections.
//!
//! Time limits: a claim waits at most `call_timeout` for its answer. One whose time has passed
//! before its group is sent is not sent, and its caller is told the store is unavailable; one sent
//! whose answer does not come in time may have been stored: its outcome is unknown.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use idem_core::{ClaimOutcome, Clock, Namespace, NewClaim, StoreError};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use crate::claim;
use crate::pool::{Db, with_conn};

/// Claims gathered into one transaction at most.
const MAX_GROUP: usize = 512;

/// How long the last group may be out before the next is sent beside it: many times a commit here
/// (under a millisecond to a few), and short enough that claims behind a held-up group hardly notice.
const HELD_UP: Duration = Duration::from_millis(20);

const QUEUED: u8 = 0;
const SENT: u8 = 1;
const GIVEN_UP: u8 = 2;

pub struct Queued {
    ns: Namespace,
    claim: NewClaim,
    /// [`QUEUED`], then [`SENT`] (by the dispatcher) or [`GIVEN_UP`] (by its caller, at its
    /// deadline), whichever comes first: a claim given up is never sent, and one sent cannot be
    /// given up as "nothing changed".
    state: Arc<AtomicU8>,
    reply: oneshot::Sender<Result<ClaimOutcome, StoreError>>,
}

/// Queues one claim and waits for its answer, at most `call_timeout`.
pub async fn claim_one(
    queue: &mpsc::Sender<Queued>,
    call_timeout: Duration,
    ns: &Namespace,
    claim: NewClaim,
) -> Result<ClaimOutcome, StoreError> {
    let deadline = Instant::now() + call_timeout;
    let (reply, answer) = oneshot::channel();
    let state = Arc::new(AtomicU8::new(QUEUED));
    let queued = Queued { ns: ns.clone(), claim, state: Arc::clone(&state), reply };
    match tokio::time::timeout_at(deadline, queue.send(queued)).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return Err(StoreError::Closed),
        Err(_) => return Err(StoreError::Unavailable("the claim queue stayed full for call_timeout".into())),
    }
    match tokio::time::timeout_at(deadline, answer).await {
        Ok(answer) => answer.map_err(|_| StoreError::Closed)?,
        Err(_) => match state.compare_exchange(QUEUED, GIVEN_UP, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Err(StoreError::Unavailable(format!("no connection within call_timeout ({call_timeout:?})"))),
            Err(_) => Err(StoreError::OutcomeUnknown(format!("no answer within call_timeout ({call_timeout:?})"))),
        },
    }
}

/// Starts the dispatcher; it ends when every sender is gone. `in_flight` groups may be out at
/// once, each on a connection of its own; but the next is sent only once the last one is answered,
/// or has been out for [`HELD_UP`].
pub fn spawn(db: Arc<Db>, clock: Arc<dyn Clock>, in_flight: usize) -> mpsc::Sender<Queued> {
    let (tx, mut rx) = mpsc::channel::<Queued>(8192);
    let slots = Arc::new(Semaphore::new(in_flight.max(1)));
    tokio::spawn(async move {
        // The last group sent: when it is held up from, and its being answered.
        let mut last: Option<(Instant, oneshot::Receiver<()>)> = None;
        while let Some(first) = rx.recv().await {
            // Claims arriving while the last group commits join this one.
            if let Some((held_up_at, answered)) = last.take() {
                let _ = tokio::time::timeout_at(held_up_at, answered).await;
            }
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { return };
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                let Ok(next) = rx.try_recv() else { break };
                group.push(next);
            }
            let mut by_ns: HashMap<Namespace, Vec<Queued>> = HashMap::new();
            for q in group {
                // One its caller has given up on is not sent: it was told nothing was changed.
                if q.state.compare_exchange(QUEUED, SENT, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    by_ns.entry(q.ns.clone()).or_default().push(q);
                }
            }
            let (done, answered) = oneshot::channel::<()>();
            last = Some((Instant::now() + HELD_UP, answered));
            let (db, clock) = (Arc::clone(&db), Arc::clone(&clock));
            tokio::spawn(async move {
                for (ns, queued) in by_ns {
                    run(&db, clock.now(), &ns, queued).await;
                }
                drop((slot, done));
            });
        }
    });
    tx
}

async fn run(db: &Db, now: idem_core::Timestamp, ns: &Namespace, queued: Vec<Queued>) {
    let (claims, replies): (Vec<NewClaim>, Vec<_>) = queued.into_iter().map(|q| (q.claim, q.reply)).unzip();
    let outcome = async { with_conn!(*db, true, |client| claim::claim(&mut client, ns, &claims, now).await) }.await;
    match outcome {
        Ok(outcomes) => replies.into_iter().zip(outcomes).for_each(|(r, o)| drop(r.send(Ok(o)))),
        Err(e) => replies.into_iter().for_each(|r| drop(r.send(Err(e.clone())))),
    }
}
