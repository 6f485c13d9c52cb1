//! Cross-node wake-ups through PostgreSQL `LISTEN/NOTIFY`: a change that another node may be
//! waiting for (jobs queued, a gateway key completed or released) is announced once it has
//! committed. Each node keeps one listening connection, reconnecting if it drops; polling remains
//! the fallback, so a notification lost to a crash or a dropped connection only delays a waiter.
//!
//! The notifications are not sent inside the changes' own transactions: PostgreSQL serializes the
//! commits of every transaction that notifies (one lock, held through each one's WAL flush), which
//! capped gateway first executions at 1,670/s here (2,988/s without). Instead one [`Notifier`] per
//! node gathers what is waiting and sends it in one transaction that does not wait for its flush
//! (nothing is lost by that: a notification is a hint, not data).
//!
//! `LISTEN` needs a session of its own, which a transaction pooler does not keep: there the
//! listening connection goes over `[store] direct_url`, or is not made at all, and nodes find each
//! other's changes by looking again (within a second). Sending works through any pooler.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::pool::Db;
use crate::sql::{Run, Sql};
use idem_core::{ClaimId, SignalHandler, StoreSignal};
use tokio_postgres::types::Type;

pub const CHANNEL: &str = "idem_signals";
pub const JOBS: &str = "jobs";

/// The payload for a completed or released gateway key.
pub fn request_done(id: &ClaimId) -> String {
    format!("req:{id}")
}

fn parse(payload: &str) -> Option<StoreSignal> {
    if payload == JOBS {
        return Some(StoreSignal::JobsQueued);
    }
    let hex = payload.strip_prefix("req:")?;
    ClaimId::parse(hex).ok().map(StoreSignal::RequestDone)
}

pub type Handlers = Arc<Mutex<Vec<SignalHandler>>>;

/// Payloads gathered into one transaction at most.
const MAX_BATCH: usize = 1024;

/// Sends notifications for changes that have committed, many at a time.
#[derive(Clone)]
pub struct Notifier(tokio::sync::mpsc::UnboundedSender<String>);

impl Notifier {
    /// Starts the sender; it ends when every `Notifier` is gone.
    pub fn spawn(db: Arc<Db>) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut payloads = vec![first];
                while payloads.len() < MAX_BATCH {
                    let Ok(next) = rx.try_recv() else { break };
                    payloads.push(next);
                }
                payloads.sort_unstable();
                payloads.dedup();
                if let Err(e) = send(&db, &payloads).await {
                    tracing::debug!(error = %e, "notifications not sent; other nodes find the changes by polling");
                }
            }
        });
        Self(tx)
    }

    /// Announces `payload` (a change that has committed) to every node.
    pub fn notify(&self, payload: String) {
        let _ = self.0.send(payload);
    }
}

const NOTIFY: Sql =
    Sql::cached("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", &[Type::TEXT, Type::TEXT_ARRAY]);

async fn send(db: &Db, payloads: &[String]) -> Result<(), idem_core::StoreError> {
    crate::pool::with_conn!(*db, true, |client| {
        let sent = async {
            let tx = client.transaction().await?;
            // Transaction-scoped, so it holds through a transaction pooler and ends with the batch.
            tx.batch_execute("SET LOCAL synchronous_commit TO off").await?;
            tx.execute(&NOTIFY, &[&CHANNEL, &payloads]).await?;
            tx.commit().await
        };
        sent.await.map_err(crate::store_error)
    })
}

/// Why the listening connection ended (it is made again).
#[derive(Debug, thiserror::Error)]
enum Disconnected {
    #[error(transparent)]
    Connect(#[from] crate::pool::ConnectError),
    #[error("{}", crate::pool::describe(.0))]
    Listen(#[from] tokio_postgres::Error),
}

/// Listens for as long as the handlers are wanted, on a connection to the first host that
/// accepts writes (a standby hears nothing of what is committed on the primary).
pub fn spawn(hosts: Vec<(String, tokio_postgres::Config)>, connect_timeout: Duration, handlers: Handlers) {
    let weak = Arc::downgrade(&handlers);
    drop(handlers);
    tokio::spawn(async move {
        loop {
            if weak.strong_count() == 0 {
                return;
            }
            if let Err(e) = listen(&hosts, connect_timeout, &weak).await {
                tracing::debug!(error = %e, "signal listener disconnected; reconnecting");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

async fn listen(
    hosts: &[(String, tokio_postgres::Config)],
    connect_timeout: Duration,
    handlers: &std::sync::Weak<Mutex<Vec<SignalHandler>>>,
) -> Result<(), Disconnected> {
    let mut connected = crate::pool::connect_writable(hosts, connect_timeout).await?;
    connected.client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    while let Some(notification) = connected.notifications.recv().await {
        let Some(handlers) = handlers.upgrade() else { break };
        if let Some(signal) = parse(notification.payload())
            && let Ok(handlers) = handlers.lock()
        {
            handlers.iter().for_each(|h| h(signal.clone()));
        }
    }
    connected.driver.abort();
    Ok(())
}
