//! idem's metrics catalogue: every family idem exports, each written once — its name, what kind it
//! is, its `# HELP`, its labels and the values they take (typed: enums, not strings at call
//! sites), the series present at zero from start-up — and the functions that record it. Every
//! crate records through these functions; no other file names a metric. `/metrics` describes every
//! family from [`FAMILIES`]; the dashboard reads the counts it shows from [`http::traffic`] and
//! [`claims::activity`], in process, never from the Prometheus text.
//!
//! The families by area: [`http`] (the API listener, problem answers), [`claims`] (claims,
//! lookups, deletes, operations), [`gateway`], [`events`] (intake, deliveries, receipts, jobs) and
//! [`store`] (group commits, compaction, disk, the sweeper).

pub mod claims;
pub mod events;
pub mod gateway;
pub mod http;
pub mod store;

/// What kind of series a family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric family.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// Its labels, in the order a reader would name them.
    pub labels: &'static [&'static str],
}

const LATENCY_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
const SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0];

impl Family {
    pub const fn counter(name: &'static str, labels: &'static [&'static str], help: &'static str) -> Self {
        Self { name, kind: Kind::Counter, help, labels }
    }

    pub const fn gauge(name: &'static str, labels: &'static [&'static str], help: &'static str) -> Self {
        Self { name, kind: Kind::Gauge, help, labels }
    }

    pub const fn histogram(name: &'static str, labels: &'static [&'static str], help: &'static str) -> Self {
        Self { name, kind: Kind::Histogram, help, labels }
    }

    /// A histogram's buckets: seconds from 100 µs to 10 s, counts (a group commit's size) from 1
    /// to 16,384. `None` for counters and gauges.
    pub fn buckets(&self) -> Option<&'static [f64]> {
        match self.kind {
            Kind::Histogram if self.name.ends_with("_seconds") => Some(LATENCY_BUCKETS),
            Kind::Histogram => Some(SIZE_BUCKETS),
            Kind::Counter | Kind::Gauge => None,
        }
    }
}

/// `idem_build_info{version}`: always 1.
pub const BUILD_INFO: Family =
    Family::gauge("idem_build_info", &["version"], "Always 1; the version label says which idem is running.");

/// Every family, in the order `/metrics` and docs/reference/metrics.md list them.
pub const FAMILIES: &[&[Family]] =
    &[&[BUILD_INFO], http::FAMILIES, claims::FAMILIES, gateway::FAMILIES, events::FAMILIES, store::FAMILIES];

/// Every family, one after another.
pub fn families() -> impl Iterator<Item = &'static Family> {
    FAMILIES.iter().flat_map(|group| group.iter())
}

/// Gives every family its `# HELP` (once a recorder is installed), and the build's version.
pub fn describe(version: &'static str) {
    for family in families() {
        match family.kind {
            Kind::Counter => metrics::describe_counter!(family.name, family.help),
            Kind::Gauge => metrics::describe_gauge!(family.name, family.help),
            Kind::Histogram => metrics::describe_histogram!(family.name, family.help),
        }
    }
    metrics::gauge!(BUILD_INFO.name, "version" => version).set(1.0);
}

/// The series present at zero from start-up whatever is configured (the configured namespaces,
/// sources and routes add theirs: [`claims::register`], [`events::register_source`],
/// [`gateway::register_route`]).
pub fn register() {
    http::register();
    events::register();
    store::register();
}

/// A label's values as an enum: what a call site passes instead of a string, and the list the
/// series present at zero are made from.
pub trait Label: Copy + 'static {
    /// Every value, in order.
    const ALL: &'static [Self];

    /// The label value.
    fn label(self) -> &'static str;
}

/// An enum of label values: `Variant => "text"` each.
macro_rules! labels {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),* }

        impl $crate::Label for $name {
            const ALL: &'static [$name] = &[$($name::$variant),*];

            fn label(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
        }
    };
}
pub(crate) use labels;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_named_once_as_prometheus_wants() {
        let mut names: Vec<&str> = families().map(|f| f.name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a family named twice");
        for family in families() {
            assert!(family.name.starts_with("idem_"), "{}", family.name);
            assert!(family.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
            assert_eq!(
                family.kind == Kind::Counter,
                family.name.ends_with("_total"),
                "{}: counters end in _total",
                family.name
            );
            assert!(!family.help.is_empty());
        }
    }

    /// The reference users read lists every family with its type and labels, and every value a
    /// label takes.
    #[test]
    fn the_reference_lists_every_family_and_value() {
        let reference = include_str!("../../../docs/reference/metrics.md");
        let row = |name: &str| {
            let start = format!("| `{name}` |");
            reference.lines().find(|l| l.starts_with(&start)).unwrap_or_else(|| panic!("{name} is not in metrics.md"))
        };
        for family in families() {
            let cells: Vec<&str> = row(family.name).split('|').map(str::trim).collect();
            let kind = format!("{:?}", family.kind).to_lowercase();
            assert_eq!(cells[2], kind, "{}: its type", family.name);
            let labels: Vec<String> = family.labels.iter().map(|l| format!("`{l}`")).collect();
            assert_eq!(cells[3], labels.join(", "), "{}: its labels", family.name);
        }
        fn values<L: Label>() -> Vec<&'static str> {
            L::ALL.iter().map(|v| v.label()).collect()
        }
        let valued: [(Family, Vec<&str>); 10] = [
            (claims::LOOKUPS, values::<claims::Lookup>()),
            (claims::OPERATIONS, values::<claims::Operation>()),
            (
                gateway::REQUESTS,
                values::<gateway::Outcome>().into_iter().filter(|v| !["over_limit", "abandoned"].contains(v)).collect(),
            ),
            (gateway::UNSTORED_ENDED, values::<gateway::UnstoredEnd>()),
            (gateway::JWKS_FETCHES, values::<gateway::JwksFetch>()),
            (events::INTAKE, values::<events::Intake>()),
            (events::ATTEMPTS, [values::<events::Job>(), values::<events::Attempt>()].concat()),
            (events::DELIVERIES, values::<events::Ended>()),
            (store::RETRIED, values::<store::Retry>()),
            (
                gateway::BACKGROUND_ENDED,
                vec![
                    "forwarded",
                    "released",
                    "upstream_error",
                    "too_large",
                    "lease_lost",
                    "store_error",
                    "unstored",
                    "over_limit",
                    "abandoned",
                ],
            ),
        ];
        for (family, values) in valued {
            let row = row(family.name);
            for value in values {
                assert!(row.contains(&format!("`{value}`")), "{}: `{value}` is not in metrics.md", family.name);
            }
        }
    }
}
