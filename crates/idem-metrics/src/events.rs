//! Events: intake by outcome, delivery attempts and the receipts that ended, replays and discards,
//! the sweeper's deletions of handled receipts, the jobs due and the receipts by status.

use std::collections::HashSet;
use std::sync::Mutex;

use metrics::SharedString;

use crate::{Family, Label, labels};

pub const INTAKE: Family = Family::counter(
    "idem_events_intake_total",
    &["source", "outcome"],
    "Events received, by source and outcome (accepted, replay, mismatch, invalid, bad_signature).",
);
pub const ATTEMPTS: Family = Family::counter(
    "idem_delivery_attempts_total",
    &["source", "kind", "outcome"],
    "Delivery attempts by source, kind (delivery, result) and outcome (success, failure).",
);
pub const DELIVERIES: Family = Family::counter(
    "idem_deliveries_total",
    &["source", "outcome"],
    "Receipts that ended, by source and outcome (completed, dead).",
);
pub const REPLAYS: Family = Family::counter(
    "idem_receipt_replays_total",
    &[],
    "Receipts queued for delivery again: one at a time, in bulk, or from the dashboard.",
);
pub const DISCARDS: Family =
    Family::counter("idem_receipt_discards_total", &[], "Dead receipts discarded (marked handled by hand).");
pub const RECEIPTS_DELETED: Family = Family::counter(
    "idem_receipts_deleted_total",
    &[],
    "Handled receipts deleted by the sweeper under [events] retention.",
);
pub const JOBS_DUE: Family =
    Family::gauge("idem_jobs_due", &[], "Delivery and result jobs due now, leased or not (the backlog).");
pub const OLDEST_DUE: Family =
    Family::gauge("idem_jobs_oldest_due_age_seconds", &[], "How long the oldest due job has been waiting.");
pub const RECEIPTS: Family = Family::gauge(
    "idem_receipts",
    &["source", "status"],
    "Receipts by source and status, counted every minute (dead letters: status=\"dead\").",
);

pub const FAMILIES: &[Family] =
    &[INTAKE, ATTEMPTS, DELIVERIES, REPLAYS, DISCARDS, RECEIPTS_DELETED, JOBS_DUE, OLDEST_DUE, RECEIPTS];

labels! {
    /// What became of an event received.
    pub enum Intake {
        Accepted => "accepted",
        Replay => "replay",
        Mismatch => "mismatch",
        Invalid => "invalid",
        BadSignature => "bad_signature",
    }
}

labels! {
    /// Which job an attempt was for: the event to the handler, or its result to the result URL.
    pub enum Job {
        Delivery => "delivery",
        Result => "result",
    }
}

labels! {
    /// Whether an attempt was answered 2xx.
    pub enum Attempt {
        Success => "success",
        Failure => "failure",
    }
}

labels! {
    /// How a receipt ended.
    pub enum Ended {
        Completed => "completed",
        Dead => "dead",
    }
}

/// An event from `source` received, and what became of it.
pub fn intake(source: &str, outcome: Intake) {
    metrics::counter!(INTAKE.name, "source" => source.to_owned(), "outcome" => outcome.label()).increment(1);
}

/// One attempt of a `job` for `source`.
pub fn attempt(source: impl Into<SharedString>, job: Job, outcome: Attempt) {
    metrics::counter!(ATTEMPTS.name, "source" => source, "kind" => job.label(), "outcome" => outcome.label())
        .increment(1);
}

/// A receipt of `source` ended.
pub fn ended(source: impl Into<SharedString>, how: Ended) {
    metrics::counter!(DELIVERIES.name, "source" => source, "outcome" => how.label()).increment(1);
}

/// `n` receipts queued for delivery again.
pub fn replayed(n: u64) {
    metrics::counter!(REPLAYS.name).increment(n);
}

/// A dead receipt discarded.
pub fn discarded() {
    metrics::counter!(DISCARDS.name).increment(1);
}

/// `n` handled receipts deleted by the sweeper.
pub fn receipts_deleted(n: u64) {
    metrics::counter!(RECEIPTS_DELETED.name).increment(n);
}

/// The jobs due now, and how long the oldest of them has waited.
pub fn jobs_due(due: u64, oldest_seconds: f64) {
    metrics::gauge!(JOBS_DUE.name).set(due as f64);
    metrics::gauge!(OLDEST_DUE.name).set(oldest_seconds);
}

/// The receipts per (source, status) as counted now: one counted before and absent now (all its
/// receipts replayed or deleted: a `GROUP BY` has no row for it) goes back to zero.
pub fn receipts(counts: impl IntoIterator<Item = (String, &'static str, u64)>) {
    static REPORTED: Mutex<Option<HashSet<(String, &'static str)>>> = Mutex::new(None);
    let mut reported = REPORTED.lock().unwrap_or_else(|p| p.into_inner());
    let reported = reported.get_or_insert_with(HashSet::new);
    let mut now = HashSet::new();
    for (source, status, n) in counts {
        metrics::gauge!(RECEIPTS.name, "source" => source.clone(), "status" => status).set(n as f64);
        now.insert((source, status));
    }
    for (source, status) in reported.difference(&now) {
        metrics::gauge!(RECEIPTS.name, "source" => source.clone(), "status" => *status).set(0.0);
    }
    *reported = now;
}

/// The series of a configured source, present at zero from start-up (its dead letters too, until
/// the first count says otherwise).
pub fn register_source(source: &str) {
    let name = || source.to_owned();
    for outcome in Intake::ALL {
        metrics::counter!(INTAKE.name, "source" => name(), "outcome" => outcome.label()).increment(0);
    }
    for how in Ended::ALL {
        metrics::counter!(DELIVERIES.name, "source" => name(), "outcome" => how.label()).increment(0);
    }
    metrics::gauge!(RECEIPTS.name, "source" => name(), "status" => "dead").set(0.0);
    for job in Job::ALL {
        for outcome in Attempt::ALL {
            metrics::counter!(ATTEMPTS.name, "source" => name(), "kind" => job.label(), "outcome" => outcome.label())
                .increment(0);
        }
    }
}

/// The events' own series at zero.
pub fn register() {
    for family in [REPLAYS, DISCARDS, RECEIPTS_DELETED] {
        metrics::counter!(family.name).increment(0);
    }
    jobs_due(0, 0.0);
}
