//! Group commit for single claims: concurrent claims wait in a queue, and a dispatcher sends
//! whatever has gathered as one pipelined transaction per namespace, so that many requests share a
//! round trip and a commit. A batch that already holds many claims goes straight to the database.

use std::collections::HashMap;
use std::sync::Arc;

use deadpool_postgres::Pool;
use idem_core::{ClaimOutcome, Clock, Namespace, NewClaim, StoreError};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::claim;

/// Claims gathered into one transaction at most.
const MAX_GROUP: usize = 512;

pub struct Queued {
    pub ns: Namespace,
    pub claim: NewClaim,
    pub reply: oneshot::Sender<Result<ClaimOutcome, StoreError>>,
}

/// Starts the dispatcher; it ends when every sender is gone.
pub fn spawn(pool: Pool, clock: Arc<dyn Clock>, in_flight: usize) -> mpsc::Sender<Queued> {
    let (tx, mut rx) = mpsc::channel::<Queued>(8192);
    let slots = Arc::new(Semaphore::new(in_flight.max(1)));
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            // Wait for a free connection first: claims arriving meanwhile join this group.
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { return };
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                let Ok(next) = rx.try_recv() else { break };
                group.push(next);
            }
            let mut by_ns: HashMap<Namespace, Vec<Queued>> = HashMap::new();
            for q in group {
                by_ns.entry(q.ns.clone()).or_default().push(q);
            }
            let (pool, clock) = (pool.clone(), Arc::clone(&clock));
            tokio::spawn(async move {
                for (ns, queued) in by_ns {
                    run(&pool, clock.now(), &ns, queued).await;
                }
                drop(slot);
            });
        }
    });
    tx
}

async fn run(pool: &Pool, now: idem_core::Timestamp, ns: &Namespace, queued: Vec<Queued>) {
    let (claims, replies): (Vec<NewClaim>, Vec<_>) = queued.into_iter().map(|q| (q.claim, q.reply)).unzip();
    let outcome = match pool.get().await {
        Ok(mut client) => claim::claim(&mut client, ns, claims, now).await,
        Err(deadpool_postgres::PoolError::Closed) => Err(StoreError::Closed),
        Err(e) => Err(StoreError::Unavailable(e.to_string())),
    };
    match outcome {
        Ok(outcomes) => replies.into_iter().zip(outcomes).for_each(|(r, o)| drop(r.send(Ok(o)))),
        Err(e) => replies.into_iter().for_each(|r| drop(r.send(Err(e.clone())))),
    }
}
