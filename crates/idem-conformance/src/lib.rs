//! The store conformance suites: the behaviour every idem store backend must show, written once,
//! one suite per storage trait.
//!
//! - [`claim_suite!`] checks a [`ClaimStore`](idem_core::ClaimStore),
//! - [`request_suite!`] a [`RequestStore`](idem_core::RequestStore) (what the gateway and the tower
//!   layer need, so a custom store for the layer runs only this one),
//! - [`event_suite!`] an [`EventStore`](idem_core::EventStore),
//! - [`suite!`] all three plus the lifecycle checks, for a store that is all of them (PostgreSQL).
//!
//! [`pgbouncer`] puts a PgBouncer of a test's own in front of the test database, so that a
//! backend's suite runs through a pooler too.
//!
//! A backend's test file calls a macro with an async factory that returns a fresh, empty
//! [`Harness`]; the macro expands to a module of `#[tokio::test]`s, one per check, so every backend
//! runs the very same functions and a failure names the suite and the check that broke.

use std::sync::Arc;
use std::time::Duration;

use idem_core::{ClaimId, ManualClock, Namespace, NewClaim, Parts, Timestamp};
use serde_json::value::RawValue;

pub mod claims;
pub mod events;
pub mod pgbouncer;
pub mod requests;

/// A fresh store under test, with the clock it reads.
pub struct Harness<S: ?Sized> {
    pub store: Arc<S>,
    pub clock: Arc<ManualClock>,
    /// Whatever keeps the store's resources alive (a temporary directory, a database).
    pub guard: Box<dyn std::any::Any + Send>,
}

/// What a harness factory returns: a harness, or `None` when the backend is not available here.
pub trait IntoHarness<S: ?Sized> {
    fn into_harness(self) -> Option<Harness<S>>;
}

impl<S: ?Sized> IntoHarness<S> for Harness<S> {
    fn into_harness(self) -> Option<Harness<S>> {
        Some(self)
    }
}

impl<S: ?Sized> IntoHarness<S> for Option<Harness<S>> {
    fn into_harness(self) -> Option<Harness<S>> {
        self
    }
}

/// Says loudly that a test did not run and why, and counts it: when `IDEM_TEST_SKIPS` names a
/// file (scripts/test.sh sets one), a line is added to it, so that the closing count of the test
/// command reports the test as skipped rather than passed.
pub fn skipped(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "!!! SKIPPED: {why} !!!");
    if let Ok(path) = std::env::var("IDEM_TEST_SKIPS")
        && let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        // One write of the whole line: O_APPEND keeps lines from tests running at once apart.
        let _ = file.write_all(format!("{}\n", why.replace('\n', " ")).as_bytes());
    }
}

/// The instant every harness clock starts at: 2026-01-01T00:00:00Z.
pub const START: Timestamp = Timestamp(1_767_225_600_000);

pub fn ns(name: &str) -> Namespace {
    Namespace::new(name).expect("test namespace is valid")
}

pub fn parts(p: &[&str]) -> Parts {
    Parts::new(p.iter().map(|s| s.to_string()).collect()).expect("test parts are valid")
}

pub fn id(p: &[&str]) -> ClaimId {
    parts(p).id()
}

pub fn new_claim(p: &[&str], data: Option<&str>, ttl: Option<Duration>) -> NewClaim {
    let data = data.map(|d| RawValue::from_string(d.to_owned()).expect("test data is JSON"));
    NewClaim { parts: parts(p), data, ttl, client: None, created_at: None }
}

/// The [`ClaimStore`](idem_core::ClaimStore) suite, as a module `claim_store`.
#[macro_export]
macro_rules! claim_suite {
    ($factory:path) => {
        $crate::checks!(claim_store, claims, $factory;
            claim_new_then_existing,
            key_and_one_part_forms_are_one_key,
            namespaces_are_separate,
            data_round_trips_exactly,
            batch_answers_in_order_and_first_equal_key_wins,
            lookup_answers_in_request_order,
            prefix_matches_whole_parts_only,
            expiry_is_exact_for_every_operation,
            expired_claim_can_be_claimed_again,
            a_batch_takes_over_expired_keys_once,
            sweeper_deletes_only_expired_in_bounded_batches,
            delete_removes_and_reports_absence,
            race_of_500_has_exactly_one_winner,
            race_across_20_keys_has_one_winner_each,
            claims_are_counted_per_namespace,
            a_retry_with_its_client_token_is_told_it_won,
            a_race_with_client_tokens_tells_one_caller_it_won,
            list_pages_a_prefix_in_parts_order,
            delete_prefix_removes_only_that_prefix,
            an_imported_claim_keeps_when_it_was_made,
            an_update_replaces_whatever_the_key_holds,
            an_update_keeps_what_it_does_not_set,
            update_conditions_hold_as_stated,
            an_update_to_a_past_expiry_deletes,
            concurrent_updates_of_one_key_lose_nothing,
        );
    };
}

/// The [`RequestStore`](idem_core::RequestStore) suite, as a module `request_store`.
#[macro_export]
macro_rules! request_suite {
    ($factory:path) => {
        $crate::checks!(request_store, requests, $factory;
            first_begin_holds_the_key_and_others_see_it_in_flight,
            completed_response_is_replayed_until_its_ttl,
            only_the_lease_holder_completes_or_releases,
            an_expired_lease_frees_the_key_and_voids_the_old_token,
            a_lease_that_ran_out_is_its_holders_until_a_begin_takes_the_key,
            extend_moves_the_lease_for_its_holder_only,
            an_extension_never_shortens_a_lease,
            held_bytes_are_kept_while_held_and_forget_frees_only_results,
            race_of_200_begins_has_one_holder,
            sweeper_deletes_finished_requests,
            a_begin_retried_with_its_client_token_gets_its_lease_back,
            fences_grow_with_each_take_of_a_key,
        );
    };
}

/// The [`EventStore`](idem_core::EventStore) suite, as a module `event_store`.
#[macro_export]
macro_rules! event_suite {
    ($factory:path) => {
        $crate::checks!(event_store, events, $factory;
            intake_dedups_by_event_id_and_compares_payloads,
            a_leased_job_is_delivered_once_and_completes,
            failures_retry_when_due_then_go_dead_and_queue_the_result,
            an_expired_lease_is_leased_again_and_the_old_holder_cannot_finish,
            a_lease_takes_at_most_its_limit,
            a_released_job_is_leased_again_at_once,
            replay_starts_a_terminal_receipt_again_from_attempt_1,
            receipts_list_newest_first_with_filters_and_cursor,
            race_of_100_intakes_of_one_event_accepts_once,
            receipts_are_counted_by_source_and_status,
            each_status_filter_finds_exactly_its_receipts,
            a_receipt_holds_its_event,
            a_resend_with_its_keys_reordered_is_a_duplicate,
            a_dead_letter_is_discarded_and_can_still_be_replayed,
            bulk_replay_replays_every_match_step_by_step_and_only_once,
            concurrent_bulk_replays_replay_each_receipt_once,
            retention_deletes_old_handled_receipts_and_keeps_dead_letters,
        );
    };
}

/// Every suite, and the lifecycle checks of a whole [`Store`].
#[macro_export]
macro_rules! suite {
    ($factory:path) => {
        $crate::claim_suite!($factory);
        $crate::request_suite!($factory);
        $crate::event_suite!($factory);
        $crate::checks!(store_lifecycle, claims, $factory; ready_when_open_and_closed_after_close);
    };
}

/// Expands to a module of tests, one per check of `$checks`, each on a fresh harness.
#[doc(hidden)]
#[macro_export]
macro_rules! checks {
    ($module:ident, $checks:ident, $factory:path; $($check:ident),* $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    // A factory may decline (a backend whose database is not configured); it says so.
                    let Some(harness) = $crate::IntoHarness::into_harness($factory().await) else { return };
                    $crate::$checks::$check(&harness).await;
                }
            )*
        }
    };
}
