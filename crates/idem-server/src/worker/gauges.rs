//! Gauges read from outside the request path, every 15 seconds: the embedded store's size on disk
//! and the space left on its file system (so an alert can see the disk filling before writes
//! start answering 503).

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;

const EVERY: Duration = Duration::from_secs(15);

/// Samples the data dir until `stop`. `data_dir` is `None` on PostgreSQL, whose disk is the
/// database's to watch.
pub async fn run(data_dir: Option<PathBuf>, mut stop: watch::Receiver<bool>) {
    let Some(dir) = data_dir else { return };
    loop {
        let sampled = dir.clone();
        if let Ok((size, available)) = tokio::task::spawn_blocking(move || sample(&sampled)).await {
            metrics::gauge!("idem_store_size_bytes").set(size as f64);
            if let Some(available) = available {
                metrics::gauge!("idem_data_dir_available_bytes").set(available as f64);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The store's files (`idem.db` and its `-wal`, `-shm`) in bytes, and the bytes an unprivileged
/// writer may still use on their file system.
fn sample(dir: &std::path::Path) -> (u64, Option<u64>) {
    let size = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("idem.db"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    #[cfg(unix)]
    let available = rustix::fs::statvfs(dir).ok().map(|s| s.f_bavail.saturating_mul(s.f_frsize));
    #[cfg(not(unix))]
    let available = None;
    (size, available)
}
