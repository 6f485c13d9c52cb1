//! Cross-node wake-ups through PostgreSQL `LISTEN/NOTIFY`: a change that another node may be
//! waiting for (jobs queued, a gateway key completed or released) sends a notification inside its
//! own transaction, so it is delivered exactly when the change commits. Each node keeps one
//! listening connection, reconnecting if it drops; polling remains the fallback.

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
