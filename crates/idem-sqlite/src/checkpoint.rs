//! The checkpointer: a thread that keeps the WAL short by running PASSIVE checkpoints from its own
//! connection. Done by the writer (SQLite's default), a checkpoint of thousands of pages stalls
//! every claim behind it; done here, it runs beside the writer and the writer's own auto-checkpoint
//! is only a backstop.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::schema;

/// How often the checkpointer looks at the WAL.
const INTERVAL: Duration = Duration::from_millis(100);

pub struct Checkpointer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    pub fn spawn(path: &Path) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (path, flag) = (path.to_owned(), Arc::clone(&stop));
        let thread = std::thread::Builder::new().name("idem-sqlite-ckpt".into()).spawn(move || {
            let conn = match schema::open_checkpointer(&path) {
                Ok(conn) => conn,
                Err(e) => return tracing::warn!(error = %e, "checkpointer could not open the store; the writer will checkpoint"),
            };
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(INTERVAL);
                // Busy or locked just means "not now": the next round tries again.
                let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
        })?;
        Ok(Self { stop, thread: Some(thread) })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
