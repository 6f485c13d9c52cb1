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

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::{ClaimId, SignalHandler, StoreSignal};
use tokio_postgres::{AsyncMessage, NoTls};

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
    pub fn spawn(pool: deadpool_postgres::Pool) -> Self {
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
                if let Err(e) = send(&pool, &payloads).await {
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

async fn send(pool: &deadpool_postgres::Pool, payloads: &[String]) -> Result<(), String> {
    let mut client = pool.get().await.map_err(|e| e.to_string())?;
    let tx = client.transaction().await.map_err(|e| e.to_string())?;
    tx.batch_execute("SET LOCAL synchronous_commit TO off").await.map_err(|e| e.to_string())?;
    let statement =
        tx.prepare_cached("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p").await.map_err(|e| e.to_string())?;
    tx.execute(&statement, &[&CHANNEL, &payloads]).await.map_err(|e| e.to_string())?;
    tx.commit().await.map_err(|e| e.to_string())
}

/// Listens for as long as the handlers are wanted.
pub fn spawn(config: tokio_postgres::Config, handlers: Handlers) {
    let weak = Arc::downgrade(&handlers);
    drop(handlers);
    tokio::spawn(async move {
        loop {
            if weak.strong_count() == 0 {
                return;
            }
            if let Err(e) = listen(&config, &weak).await {
                tracing::debug!(error = %e, "signal listener disconnected; reconnecting");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

async fn listen(
    config: &tokio_postgres::Config,
    handlers: &std::sync::Weak<Mutex<Vec<SignalHandler>>>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let driver = tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n.payload().to_owned()).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    while let Some(payload) = rx.recv().await {
        let Some(handlers) = handlers.upgrade() else { break };
        if let Some(signal) = parse(&payload)
            && let Ok(handlers) = handlers.lock()
        {
            handlers.iter().for_each(|h| h(signal.clone()));
        }
    }
    driver.abort();
    Ok(())
}
