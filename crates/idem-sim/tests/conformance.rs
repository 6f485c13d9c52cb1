//! The simulation's store is the `RequestStore` contract: the same suite every real store passes.

use std::sync::Arc;

use idem_conformance::{Harness, START};
use idem_core::ManualClock;
use idem_sim::store::{Direct, Keys};

async fn model() -> Harness<Direct> {
    let clock = Arc::new(ManualClock::new(START));
    let store = Direct { keys: std::sync::Mutex::new(Keys::default()), clock: clock.clone() };
    Harness { store: Arc::new(store), clock, guard: Box::new(()) }
}

idem_conformance::request_suite!(model);
