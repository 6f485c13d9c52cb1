//! Logs (tracing) and metrics (a Prometheus recorder rendered by `/metrics`).
//!
//! The metrics recorder is process-global, as the `metrics` facade requires; it is installed once,
//! on first use, and shared by every server in the process (tests run several).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::config::{LogConfig, LogFormat};

const LATENCY_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
const SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0];

pub fn metrics_handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Prefix("idem_store_commit_batch".into()), SIZE_BUCKETS))
            .expect("the bucket lists are non-empty constants");
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Fails only if another recorder was installed first; then our handle renders nothing
        // from the facade, which is visible on /metrics and harmless.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}

/// Starts structured logging to stderr. Safe to call more than once (later calls do nothing).
pub fn init_logging(config: &LogConfig) {
    let filter: tracing_subscriber::filter::Targets = config.level.parse().unwrap_or_else(|_| {
        eprintln!("idem: log level {:?} is not a valid filter; using \"info\"", config.level);
        tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO)
    });
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match config.format {
        LogFormat::Text => registry.with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr)).try_init(),
        LogFormat::Json => {
            registry.with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr)).try_init()
        }
    };
}
