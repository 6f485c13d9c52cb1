//! The API listener: every request (by method, matched route, status and token name) and its
//! latency, and the problem answers it gave by kind. The dashboard's traffic figures are kept here
//! too, as the requests are counted.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Family;

pub const REQUESTS: Family = Family::counter(
    "idem_http_requests_total",
    &["method", "route", "status", "token"],
    "HTTP requests on the API listener, by method, matched route, status and token name.",
);
pub const DURATION: Family = Family::histogram(
    "idem_http_request_duration_seconds",
    &["method", "route"],
    "Time to answer an API request, by method and matched route.",
);
pub const ERRORS: Family = Family::counter(
    "idem_errors_total",
    &["kind"],
    "Problem answers given, by kind (the problem type's last segment).",
);

pub const FAMILIES: &[Family] = &[REQUESTS, DURATION, ERRORS];

/// Requests answered since start: all, 5xx, 4xx.
static TRAFFIC: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// One request answered: `method` and `status` as [`method_label`] and the status's digits give
/// them, `route` the matched route (never the raw path), `token` the caller's token's name.
pub fn request(
    method: &'static str,
    route: impl Into<metrics::SharedString>,
    status: u16,
    token: impl Into<metrics::SharedString>,
    seconds: f64,
) {
    let route = route.into();
    let status_label = status_label(status);
    metrics::counter!(REQUESTS.name, "method" => method, "route" => route.clone(), "status" => status_label, "token" => token)
        .increment(1);
    metrics::histogram!(DURATION.name, "method" => method, "route" => route).record(seconds);
    TRAFFIC[0].fetch_add(1, Ordering::Relaxed);
    match status {
        500..=599 => drop(TRAFFIC[1].fetch_add(1, Ordering::Relaxed)),
        400..=499 => drop(TRAFFIC[2].fetch_add(1, Ordering::Relaxed)),
        _ => {}
    }
}

/// A problem answer of `kind` (its type's last segment).
pub fn problem(kind: &'static str) {
    metrics::counter!(ERRORS.name, "kind" => kind).increment(1);
}

/// What the dashboard shows of the traffic: requests since start, and how many of them were
/// answered 5xx and 4xx.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    pub requests: u64,
    pub server_errors: u64,
    pub client_errors: u64,
}

/// The traffic since start, read in process.
pub fn traffic() -> Traffic {
    Traffic {
        requests: TRAFFIC[0].load(Ordering::Relaxed),
        server_errors: TRAFFIC[1].load(Ordering::Relaxed),
        client_errors: TRAFFIC[2].load(Ordering::Relaxed),
    }
}

/// The series present at zero from start-up: the store's faults, which alerts watch.
pub fn register() {
    for kind in ["store-unavailable", "outcome-unknown"] {
        metrics::counter!(ERRORS.name, "kind" => kind).increment(0);
    }
}

/// A method as a label: any outside HTTP's standard set is "other", so that a client cannot mint
/// series.
pub fn method_label(method: &str) -> &'static str {
    ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"].into_iter().find(|m| *m == method).unwrap_or("other")
}

/// The status as a label: the codes idem answers, without allocating; any other as its digits.
fn status_label(status: u16) -> metrics::SharedString {
    const KNOWN: [(u16, &str); 20] = [
        (200, "200"),
        (201, "201"),
        (202, "202"),
        (204, "204"),
        (304, "304"),
        (400, "400"),
        (401, "401"),
        (403, "403"),
        (404, "404"),
        (405, "405"),
        (409, "409"),
        (413, "413"),
        (415, "415"),
        (417, "417"),
        (422, "422"),
        (431, "431"),
        (500, "500"),
        (502, "502"),
        (503, "503"),
        (504, "504"),
    ];
    match KNOWN.iter().find(|(code, _)| *code == status) {
        Some((_, known)) => metrics::SharedString::const_str(known),
        None => metrics::SharedString::from_owned(status.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded_and_exact() {
        assert_eq!(method_label("POST"), "POST");
        assert_eq!(method_label("BREW"), "other");
        for code in [200u16, 201, 404, 503, 504, 599] {
            assert_eq!(status_label(code).as_ref(), code.to_string());
        }
    }
}
