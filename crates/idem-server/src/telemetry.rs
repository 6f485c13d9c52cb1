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
        describe();
        metrics::gauge!("idem_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        handle
    })
}

/// `# HELP` for every family idem records, so a dashboard or an alert can say what it watches.
/// What kind of series a family is.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric family idem exports, with the `# HELP` line `/metrics` gives it.
const FAMILIES: &[(Kind, &str, &str)] = &[
    (Kind::Gauge, "idem_build_info", "Always 1; the version label says which idem is running."),
    (
        Kind::Counter,
        "idem_http_requests_total",
        "HTTP requests on the API listener, by method, matched route and status.",
    ),
    (
        Kind::Histogram,
        "idem_http_request_duration_seconds",
        "Time to answer an API request, by method and matched route.",
    ),
    (Kind::Counter, "idem_errors_total", "Problem answers given, by kind (the problem type's last segment)."),
    (Kind::Counter, "idem_claims_total", "Claims by namespace and outcome: claimed (new) or existing."),
    (Kind::Counter, "idem_claims_deleted_total", "Claims deleted through the API, by namespace."),
    (Kind::Counter, "idem_lookups_total", "Keys looked up, by namespace and kind (ids, prefix, get)."),
    (
        Kind::Counter,
        "idem_operations_total",
        "Operations API calls by namespace and outcome (started, replayed, in_progress, mismatch, completed, released, extended, lease_lost, deleted).",
    ),
    (Kind::Counter, "idem_gateway_requests_total", "Gateway requests on guarded routes, by route and outcome."),
    (
        Kind::Histogram,
        "idem_gateway_upstream_duration_seconds",
        "Time the upstream took for a request the gateway forwarded, by route.",
    ),
    (
        Kind::Counter,
        "idem_gateway_lease_expiries_total",
        "Gateway keys taken over after their holder's lease ran out, by route.",
    ),
    (
        Kind::Gauge,
        "idem_gateway_background_calls",
        "Upstream calls still running after their client got a 504 (upstream_timeout), by route.",
    ),
    (
        Kind::Counter,
        "idem_gateway_background_calls_total",
        "Upstream calls that outlived upstream_timeout, by route and how they ended (forwarded, released, upstream_error, too_large, lease_lost, store_error, unstored; over_limit and abandoned: dropped, the key held until its lease ends).",
    ),
    (
        Kind::Gauge,
        "idem_gateway_unstored_responses",
        "Gateway responses (and releases) kept in memory until the store takes them.",
    ),
    (
        Kind::Counter,
        "idem_gateway_unstored_total",
        "Gateway responses the store could not take at once, by route and how they ended (stored, released; lease_lost, dropped, abandoned: given up, the key free once its lease ends).",
    ),
    (
        Kind::Counter,
        "idem_events_intake_total",
        "Events received, by source and outcome (accepted, replay, mismatch, invalid, bad_signature).",
    ),
    (
        Kind::Counter,
        "idem_delivery_attempts_total",
        "Delivery attempts by source, kind (delivery, result) and outcome (success, failure).",
    ),
    (Kind::Counter, "idem_deliveries_total", "Receipts that ended, by source and outcome (completed, dead)."),
    (
        Kind::Counter,
        "idem_receipt_replays_total",
        "Receipts queued for delivery again: one at a time, in bulk, or from the dashboard.",
    ),
    (Kind::Counter, "idem_receipt_discards_total", "Dead receipts discarded (marked handled by hand)."),
    (Kind::Counter, "idem_receipts_deleted_total", "Handled receipts deleted by the sweeper under [events] retention."),
    (Kind::Gauge, "idem_jobs_due", "Delivery and result jobs due now, leased or not (the backlog)."),
    (Kind::Gauge, "idem_jobs_oldest_due_age_seconds", "How long the oldest due job has been waiting."),
    (Kind::Counter, "idem_sweeper_deleted_total", "Expired claims and finished keys deleted by the sweeper."),
    (Kind::Gauge, "idem_sweeper_last_run_timestamp_seconds", "When the sweeper last finished a pass (Unix seconds)."),
    (
        Kind::Gauge,
        "idem_receipts",
        "Receipts by source and status, counted every minute (dead letters: status=\"dead\").",
    ),
    (
        Kind::Gauge,
        "idem_claims_stored",
        "Live claims per namespace: on the embedded store kept exact as claims come, go and expire, read every 15 s; on PostgreSQL a count every 5 minutes in which expired ones count until swept.",
    ),
    (
        Kind::Gauge,
        "idem_store_size_bytes",
        "Bytes the embedded store's files take on disk (log segments, idem.db, -wal, -shm).",
    ),
    (Kind::Gauge, "idem_data_dir_available_bytes", "Bytes still free for idem on the data dir's file system."),
    (
        Kind::Counter,
        "idem_store_compactions_total",
        "Log segments compacted (their live records rewritten, the file deleted).",
    ),
    (Kind::Histogram, "idem_store_commit_batch_commands", "Commands per group commit of the embedded store."),
    (
        Kind::Histogram,
        "idem_store_commit_batch_items",
        "Items (claims and others) per group commit of the embedded store.",
    ),
    (Kind::Histogram, "idem_store_commit_seconds", "Time one group commit of the embedded store took, fsync included."),
    (
        Kind::Counter,
        "idem_store_commit_errors_total",
        "Group commits of the embedded store that failed and were rolled back.",
    ),
    (
        Kind::Counter,
        "idem_store_command_errors_total",
        "Commands of the embedded store that failed while decided (a record unreadable) and were undone alone; the rest of their group went on.",
    ),
];

fn describe() {
    for &(kind, name, help) in FAMILIES {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, help),
            Kind::Gauge => metrics::describe_gauge!(name, help),
            Kind::Histogram => metrics::describe_histogram!(name, help),
        }
    }
}

/// Counters present at zero from start-up for every configured namespace, source and route, so
/// that alerts and `rate()` work before the first event.
pub fn register_configured(config: &crate::config::Config) {
    for ns in config.namespaces.keys() {
        metrics::gauge!("idem_claims_stored", "namespace" => ns.clone()).set(0.0);
        for outcome in ["claimed", "existing"] {
            metrics::counter!("idem_claims_total", "namespace" => ns.clone(), "outcome" => outcome).increment(0);
        }
        for outcome in ["started", "replayed", "in_progress", "completed", "released", "lease_lost"] {
            metrics::counter!("idem_operations_total", "namespace" => ns.clone(), "outcome" => outcome).increment(0);
        }
    }
    for source in &config.sources {
        let name = source.name.as_str().to_owned();
        for outcome in ["accepted", "replay", "mismatch", "invalid", "bad_signature"] {
            metrics::counter!("idem_events_intake_total", "source" => name.clone(), "outcome" => outcome).increment(0);
        }
        for outcome in ["completed", "dead"] {
            metrics::counter!("idem_deliveries_total", "source" => name.clone(), "outcome" => outcome).increment(0);
        }
        // Dead letters are there at zero until the first count says otherwise.
        metrics::gauge!("idem_receipts", "source" => name.clone(), "status" => "dead").set(0.0);
        for kind in ["delivery", "result"] {
            for outcome in ["success", "failure"] {
                metrics::counter!("idem_delivery_attempts_total", "source" => name.clone(), "kind" => kind, "outcome" => outcome)
                    .increment(0);
            }
        }
    }
    for route in config.gateway.iter().flat_map(|g| g.routes.iter()) {
        let path = route.0.path.as_str().to_owned();
        for outcome in ["forwarded", "replayed", "conflict", "mismatch", "released", "upstream_error", "store_error"] {
            metrics::counter!("idem_gateway_requests_total", "route" => path.clone(), "outcome" => outcome)
                .increment(0);
        }
        metrics::gauge!("idem_gateway_background_calls", "route" => path.clone()).set(0.0);
        for outcome in ["forwarded", "over_limit"] {
            metrics::counter!("idem_gateway_background_calls_total", "route" => path.clone(), "outcome" => outcome)
                .increment(0);
        }
        for outcome in ["stored", "lease_lost"] {
            metrics::counter!("idem_gateway_unstored_total", "route" => path.clone(), "outcome" => outcome)
                .increment(0);
        }
    }
    if config.gateway.is_some() {
        metrics::gauge!("idem_gateway_unstored_responses").set(0.0);
    }
    metrics::counter!("idem_receipt_replays_total").increment(0);
    metrics::counter!("idem_receipt_discards_total").increment(0);
    metrics::counter!("idem_receipts_deleted_total").increment(0);
    metrics::counter!("idem_store_commit_errors_total").increment(0);
    metrics::counter!("idem_store_compactions_total").increment(0);
    metrics::counter!("idem_store_command_errors_total").increment(0);
    metrics::counter!("idem_errors_total", "kind" => "store-unavailable").increment(0);
    metrics::counter!("idem_errors_total", "kind" => "outcome-unknown").increment(0);
    metrics::counter!("idem_sweeper_deleted_total").increment(0);
    metrics::gauge!("idem_jobs_due").set(0.0);
    metrics::gauge!("idem_jobs_oldest_due_age_seconds").set(0.0);
}

/// Starts structured logging to stderr. Safe to call more than once (later calls do nothing). Text
/// logs are coloured only when stderr is a terminal and `NO_COLOR` is unset: a log written to a
/// file or read by a program is plain, so that its lines are stable (`idem listening addr=…`).
pub fn init_logging(config: &LogConfig) {
    let filter: tracing_subscriber::filter::Targets = config.level.parse().unwrap_or_else(|_| {
        eprintln!("idem: log level {:?} is not a valid filter; using \"info\"", config.level);
        tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO)
    });
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match config.format {
        LogFormat::Text => {
            use std::io::IsTerminal;
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            registry.with(tracing_subscriber::fmt::layer().with_ansi(colour).with_writer(std::io::stderr)).try_init()
        }
        LogFormat::Json => {
            registry.with(tracing_subscriber::fmt::layer().json().with_writer(std::io::stderr)).try_init()
        }
    };
}
