//! The clocks of a simulated node: its machine's wall clock (which a fault may step) and monotonic
//! clock (which nothing steps), both on tokio's paused time, and the clock idem keeps leases by,
//! read from them as the real one is:
//!
//! - [`Kept::Steady`]: idem_core's [`SteadyClock`] (the embedded store's): the wall clock read at
//!   start, counted on by the monotonic clock, slewed toward the wall clock;
//! - [`Kept::Database`]: idem-postgres's database time: the monotonic clock plus an offset measured
//!   against the store (here, true time, read with a few milliseconds of error);
//! - [`Kept::Wall`]: idem-postgres before #40: the wall clock plus an offset measured every 10 s,
//!   so that a step moves every lease the node judges until the next measurement. Kept to show
//!   that the simulation finds what a step did then (`--clock wall`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::{Clock, SteadyClock, Ticks, Timestamp};
use tokio::time::Instant;

/// Run time zero, as a wall clock reads it: 2026-11-01T00:00:00Z.
pub const EPOCH_MS: i64 = 1_793_491_200_000;

/// One machine's clocks: true time, and the steps its wall clock was moved by (when, by how much).
#[derive(Debug, Clone)]
pub struct Machine {
    start: Instant,
    steps: Arc<Mutex<Vec<(Duration, i64)>>>,
}

impl Machine {
    pub fn new(start: Instant) -> Self {
        Self { start, steps: Arc::default() }
    }

    /// True time: what a perfect clock reads.
    pub fn true_now(&self) -> Timestamp {
        Timestamp(EPOCH_MS + self.monotonic().as_millis() as i64)
    }

    /// Moves the wall clock by `by_ms`, now.
    pub fn step(&self, by_ms: i64) {
        let at = self.monotonic();
        self.steps.lock().unwrap_or_else(|e| e.into_inner()).push((at, by_ms));
    }

    /// How far the wall clock had been stepped at run time `t`.
    fn stepped_at(&self, t: Duration) -> i64 {
        self.steps.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|(at, _)| *at <= t).map(|(_, by)| by).sum()
    }
}

impl Ticks for Machine {
    fn wall(&self) -> Timestamp {
        Timestamp(self.true_now().millis() + self.stepped_at(self.monotonic()))
    }

    fn monotonic(&self) -> Duration {
        Instant::now().saturating_duration_since(self.start)
    }
}

/// Which clock a node keeps leases by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    Steady,
    Database,
    Wall,
}

/// The database's time followed on the monotonic clock: an offset measured once.
#[derive(Debug)]
struct Followed {
    machine: Machine,
    offset: i64,
}

impl Clock for Followed {
    fn now(&self) -> Timestamp {
        Timestamp(self.machine.monotonic().as_millis() as i64 + self.offset)
    }
}

/// The wall clock plus an offset measured at start and every 10 s since (idem-postgres before
/// #40): between measurements a step of the wall clock moves it.
#[derive(Debug)]
struct WallPlusOffset {
    machine: Machine,
    started: Duration,
    error_ms: i64,
}

impl Clock for WallPlusOffset {
    fn now(&self) -> Timestamp {
        let now = self.machine.monotonic();
        let measured_at = self.started + Duration::from_secs(now.saturating_sub(self.started).as_secs() / 10 * 10);
        // At that measurement wall + offset read true time: the offset undid the steps made by then.
        Timestamp(self.machine.wall().millis() - self.machine.stepped_at(measured_at) + self.error_ms)
    }
}

/// The clock one life of a node keeps leases by; `error_ms` is how far off its measurement of
/// the database's time was.
pub fn kept(kind: Kept, machine: &Machine, error_ms: i64) -> Arc<dyn Clock> {
    match kind {
        Kept::Steady => Arc::new(SteadyClock::new(machine.clone())),
        Kept::Database => {
            let offset = machine.true_now().millis() - machine.monotonic().as_millis() as i64 + error_ms;
            Arc::new(Followed { machine: machine.clone(), offset })
        }
        Kept::Wall => Arc::new(WallPlusOffset { machine: machine.clone(), started: machine.monotonic(), error_ms }),
    }
}
