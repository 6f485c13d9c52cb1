//! Logs (tracing) and metrics (a Prometheus recorder rendered by `/metrics`).
//!
//! The metrics recorder is process-global, as the `metrics` facade requires; it is installed once,
//! on first use, and shared by every server in the process (tests run several).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::config::{LogConfig, LogFormat};

pub fn metrics_handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let mut builder = PrometheusBuilder::new();
        for family in idem_metrics::families() {
            if let Some(buckets) = family.buckets() {
                builder = builder
                    .set_buckets_for_metric(Matcher::Full(family.name.to_owned()), buckets)
                    .expect("the bucket lists are non-empty constants");
            }
        }
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Fails only if another recorder was installed first; then our handle renders nothing
        // from the facade, which is visible on /metrics and harmless.
        let _ = metrics::set_global_recorder(recorder);
        idem_metrics::describe(env!("CARGO_PKG_VERSION"));
        idem_metrics::register();
        handle
    })
}

/// The series present at zero from start-up for every configured namespace, source and route, so
/// that alerts and `rate()` work before the first event.
pub fn register_configured(config: &crate::config::Config) {
    use idem_gateway::{JwtFailure, ScopePart};
    use idem_metrics::Label;
    config.namespaces.keys().for_each(|ns| idem_metrics::claims::register(ns));
    config.sources.iter().for_each(|source| idem_metrics::events::register_source(source.name.as_str()));
    for route in config.gateway.iter().flat_map(|g| g.routes.iter()) {
        let scope = &route.0.scope;
        idem_metrics::gateway::register_route(idem_metrics::gateway::RouteSeries {
            path: route.0.path.as_str(),
            scoped: !scope.is_empty(),
            jwt: scope.iter().any(|p| matches!(p, ScopePart::Jwt(_))).then_some(JwtFailure::ALL),
        });
    }
    if let Some(gateway) = &config.gateway {
        idem_metrics::gateway::register(gateway.jwt.as_ref().is_some_and(|j| j.jwks_url.is_some()));
    }
    if matches!(config.store, crate::config::StoreConfig::Postgres { .. }) {
        idem_metrics::store::register_postgres();
    }
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
