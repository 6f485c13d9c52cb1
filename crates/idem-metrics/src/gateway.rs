//! The gateway: requests on guarded routes by outcome, the upstream's time, keys taken over after
//! a lease ran out, calls that outlived `upstream_timeout`, responses kept until the store takes
//! them, and the refusals of JWT scopes.

use metrics::SharedString;

use crate::{Family, Label, labels};

pub const REQUESTS: Family = Family::counter(
    "idem_gateway_requests_total",
    &["route", "outcome"],
    "Gateway requests on guarded routes, by route and outcome.",
);
pub const JWT_FAILURES: Family = Family::counter(
    "idem_gateway_jwt_failures_total",
    &["route", "reason"],
    "Bearer JWTs refused on routes whose scope reads jwt: claims, by route and reason (malformed, wrong_algorithm, bad_signature, expired, not_yet_valid, wrong_issuer, wrong_audience, missing_claim, unknown_key, keys_unavailable).",
);
pub const JWKS_FETCHES: Family = Family::counter(
    "idem_gateway_jwks_fetches_total",
    &["outcome"],
    "Fetches of [gateway.jwt] jwks_url, by outcome (fetched, failed): on first use, for an unknown kid, hourly.",
);
pub const UPSTREAM_DURATION: Family = Family::histogram(
    "idem_gateway_upstream_duration_seconds",
    &["route"],
    "Time the upstream took for a request the gateway forwarded, by route.",
);
pub const LEASE_EXPIRIES: Family = Family::counter(
    "idem_gateway_lease_expiries_total",
    &["route"],
    "Gateway keys taken over after their holder's lease ran out, by route.",
);
pub const BACKGROUND_CALLS: Family = Family::gauge(
    "idem_gateway_background_calls",
    &["route"],
    "Upstream calls still running after their client got a 504 (upstream_timeout), by route.",
);
pub const BACKGROUND_ENDED: Family = Family::counter(
    "idem_gateway_background_calls_total",
    &["route", "outcome"],
    "Upstream calls that outlived upstream_timeout, by route and how they ended (forwarded, released, upstream_error, too_large, lease_lost, store_error, unstored; over_limit and abandoned: dropped, the key held until its lease ends).",
);
pub const UNSTORED_KEPT: Family = Family::gauge(
    "idem_gateway_unstored_responses",
    &[],
    "Gateway responses (and releases) kept in memory until the store takes them.",
);
pub const UNSTORED_ENDED: Family = Family::counter(
    "idem_gateway_unstored_total",
    &["route", "outcome"],
    "Gateway responses the store could not take at once, by route and how they ended (stored, released; lease_lost, dropped, abandoned: given up, the key free once its lease ends).",
);

pub const FAMILIES: &[Family] = &[
    REQUESTS,
    JWT_FAILURES,
    JWKS_FETCHES,
    UPSTREAM_DURATION,
    LEASE_EXPIRIES,
    BACKGROUND_CALLS,
    BACKGROUND_ENDED,
    UNSTORED_KEPT,
    UNSTORED_ENDED,
];

labels! {
    /// How a request on a guarded route ended, or (for a call that outlived `upstream_timeout`)
    /// how its call ended.
    pub enum Outcome {
        /// Executed: the upstream answered and the response was stored.
        Forwarded => "forwarded",
        Replayed => "replayed",
        /// Its key is held by a request still running.
        Conflict => "conflict",
        /// Its key was used with another request.
        Mismatch => "mismatch",
        /// The upstream answered with a status not stored (a 5xx, 408, 429): the key is free again.
        Released => "released",
        UpstreamError => "upstream_error",
        /// The exchange broke off after the upstream may have acted: a 502 saying so was stored
        /// for the key.
        UpstreamBroken => "upstream_broken",
        StoreError => "store_error",
        /// Answered, the response kept until the store takes it.
        Unstored => "unstored",
        /// The response was over `max_stored_response`: passed on, the key released.
        TooLarge => "too_large",
        LeaseLost => "lease_lost",
        UpstreamTimeout => "upstream_timeout",
        /// A method the route does not guard, passed on as it is.
        NoKey => "no_key",
        MissingKey => "missing_key",
        InvalidKey => "invalid_key",
        ScopeMissing => "scope_missing",
        InvalidToken => "invalid_token",
        JwksUnavailable => "jwks_unavailable",
        /// The app's identity endpoint refused the caller (`401`/`403`, passed back).
        IdentityRefused => "identity_refused",
        /// The app's identity endpoint could not say who is calling: `503`.
        IdentityUnavailable => "identity_unavailable",
        /// A call past `upstream_timeout` over `max_background_calls`: dropped.
        OverLimit => "over_limit",
        /// A call given up at shutdown.
        Abandoned => "abandoned",
        /// A call still running at the route's `max_call`: abandoned, its key held until its lease
        /// ends.
        MaxCall => "max_call",
    }
}

labels! {
    /// How a response kept for the store ended.
    pub enum UnstoredEnd {
        Stored => "stored",
        Released => "released",
        LeaseLost => "lease_lost",
        Dropped => "dropped",
        Abandoned => "abandoned",
    }
}

labels! {
    /// How a fetch of the JWKS ended.
    pub enum JwksFetch {
        Fetched => "fetched",
        Failed => "failed",
    }
}

/// A request on `route` ended as `outcome`.
pub fn request(route: impl Into<SharedString>, outcome: Outcome) {
    metrics::counter!(REQUESTS.name, "route" => route, "outcome" => outcome.label()).increment(1);
}

/// The upstream answered a request on `route` after `seconds`.
pub fn upstream(route: impl Into<SharedString>, seconds: f64) {
    metrics::histogram!(UPSTREAM_DURATION.name, "route" => route).record(seconds);
}

/// A key on `route` taken over after its holder's lease ran out.
pub fn lease_expired(route: impl Into<SharedString>) {
    metrics::counter!(LEASE_EXPIRIES.name, "route" => route).increment(1);
}

/// A call on `route` goes on after its client's wait (`running` +1), or has ended (−1).
pub fn background_running(route: impl Into<SharedString>, started: bool) {
    let gauge = metrics::gauge!(BACKGROUND_CALLS.name, "route" => route);
    if started { gauge.increment(1.0) } else { gauge.decrement(1.0) }
}

/// A call on `route` that outlived `upstream_timeout` ended as `outcome`.
pub fn background_ended(route: impl Into<SharedString>, outcome: Outcome) {
    metrics::counter!(BACKGROUND_ENDED.name, "route" => route, "outcome" => outcome.label()).increment(1);
}

/// A response kept for the store (+1), or done with (−1).
pub fn unstored_kept(kept: bool) {
    let gauge = metrics::gauge!(UNSTORED_KEPT.name);
    if kept { gauge.increment(1.0) } else { gauge.decrement(1.0) }
}

/// A response on `route` the store could not take at once ended as `outcome`.
pub fn unstored_ended(route: impl Into<SharedString>, outcome: UnstoredEnd) {
    metrics::counter!(UNSTORED_ENDED.name, "route" => route, "outcome" => outcome.label()).increment(1);
}

/// A bearer JWT refused on `route` for `reason`.
pub fn jwt_failure(route: impl Into<SharedString>, reason: impl Label) {
    metrics::counter!(JWT_FAILURES.name, "route" => route, "reason" => reason.label()).increment(1);
}

/// A fetch of the JWKS ended as `outcome`.
pub fn jwks_fetched(outcome: JwksFetch) {
    metrics::counter!(JWKS_FETCHES.name, "outcome" => outcome.label()).increment(1);
}

/// What of a route's configuration decides its series at zero.
pub struct RouteSeries<'a, R> {
    pub path: &'a str,
    /// Its scope asks who is calling.
    pub scoped: bool,
    /// Its scope reads `jwt:` claims: every reason a JWT is refused.
    pub jwt: Option<&'a [R]>,
}

/// The series of a configured route, present at zero from start-up.
pub fn register_route<R: Label>(route: RouteSeries<'_, R>) {
    let path = || route.path.to_owned();
    let zero = |outcome: Outcome| {
        metrics::counter!(REQUESTS.name, "route" => path(), "outcome" => outcome.label()).increment(0)
    };
    let settled = [Outcome::Forwarded, Outcome::Replayed, Outcome::Conflict, Outcome::Mismatch, Outcome::Released];
    settled.into_iter().chain([Outcome::UpstreamError, Outcome::StoreError]).for_each(zero);
    if route.scoped {
        zero(Outcome::ScopeMissing);
    }
    if let Some(reasons) = route.jwt {
        zero(Outcome::InvalidToken);
        for reason in reasons {
            metrics::counter!(JWT_FAILURES.name, "route" => path(), "reason" => reason.label()).increment(0);
        }
    }
    metrics::gauge!(BACKGROUND_CALLS.name, "route" => path()).set(0.0);
    for outcome in [Outcome::Forwarded, Outcome::OverLimit] {
        metrics::counter!(BACKGROUND_ENDED.name, "route" => path(), "outcome" => outcome.label()).increment(0);
    }
    for outcome in [UnstoredEnd::Stored, UnstoredEnd::LeaseLost] {
        metrics::counter!(UNSTORED_ENDED.name, "route" => path(), "outcome" => outcome.label()).increment(0);
    }
}

/// The gateway's own series at zero: the responses kept for the store, and the JWKS fetches when
/// keys come from a URL.
pub fn register(jwks_url: bool) {
    metrics::gauge!(UNSTORED_KEPT.name).set(0.0);
    if jwks_url {
        for outcome in JwksFetch::ALL {
            metrics::counter!(JWKS_FETCHES.name, "outcome" => outcome.label()).increment(0);
        }
    }
}
