//! The simulated world a run happens in: its time, its chance, its faults, and how a message
//! crosses it. Every party (the clients, each idem node, the store, the upstream) talks to another
//! only through [`World::deliver`], which says when a message sent now arrives, given the faults
//! the run's schedule holds: a cut link holds messages until it heals (as TCP retransmits them), a
//! paused party sends and reads nothing until it resumes, a crashed node's messages go nowhere.
//!
//! Time is tokio's paused clock: nothing sleeps for real, and the clock jumps to the next timer
//! whenever every task waits, so that a run of minutes takes milliseconds and is the same each time.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::history::History;
use crate::rng::Rng;

/// Who sends and receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Party {
    /// The clients and workers, on their side of every node's listener.
    Clients,
    Node(usize),
    Store,
    Upstream,
}

/// `[from, until)` in run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: Duration,
    pub until: Duration,
}

impl Window {
    pub fn holds(&self, t: Duration) -> bool {
        self.from <= t && t < self.until
    }
}

/// One fault of a run's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Nothing crosses between `a` and `b` (either way) in the window; what is sent is held.
    Cut { a: Party, b: Party, window: Window },
    /// The node runs nothing observable: what it sends, and what reaches it, waits for the end.
    Pause { node: usize, window: Window },
    /// The node dies (`kill -9`) at `window.from` and is started again at `window.until`.
    Crash { node: usize, window: Window },
    /// The node's wall clock is moved by `by_ms` at `at` (its monotonic clock is not).
    Step { node: usize, at: Duration, by_ms: i64 },
    /// The store refuses every call (a primary gone, no other yet).
    StoreDown { window: Window },
    /// The store takes calls but answers none until the window ends (a long checkpoint, a lock).
    StoreStall { window: Window },
}

/// The run's shared state, behind one lock that no task holds across an `.await`.
pub struct World {
    pub start: Instant,
    pub rng: Rng,
    pub faults: Vec<Fault>,
    pub history: History,
}

pub type Shared = Arc<Mutex<World>>;

/// Run time: how long since the run began.
pub fn elapsed(start: Instant) -> Duration {
    Instant::now().saturating_duration_since(start)
}

pub fn lock(world: &Shared) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl World {
    pub fn now(&self) -> Duration {
        elapsed(self.start)
    }

    /// When a link between `a` and `b` is cut at `t`: the end of the cut.
    pub fn cut(&self, a: Party, b: Party, t: Duration) -> Option<Duration> {
        self.faults.iter().find_map(|f| match *f {
            Fault::Cut { a: x, b: y, window } if ((x, y) == (a, b) || (x, y) == (b, a)) && window.holds(t) => {
                Some(window.until)
            }
            _ => None,
        })
    }

    /// When a node paused at `t` resumes.
    pub fn paused(&self, node: usize, t: Duration) -> Option<Duration> {
        self.faults.iter().find_map(|f| match *f {
            Fault::Pause { node: n, window } if n == node && window.holds(t) => Some(window.until),
            _ => None,
        })
    }

    /// The node's life at `t`: which start of it is running (0 the first, +1 per restart), or
    /// `None` while it is dead.
    pub fn life(&self, node: usize, t: Duration) -> Option<u32> {
        let mut life = 0;
        for f in &self.faults {
            if let Fault::Crash { node: n, window } = *f
                && n == node
            {
                if window.holds(t) {
                    return None;
                }
                if window.until <= t {
                    life += 1;
                }
            }
        }
        Some(life)
    }

    /// When the node running at `t` dies next, if it does.
    pub fn death(&self, node: usize, t: Duration) -> Option<Duration> {
        self.faults
            .iter()
            .filter_map(|f| match *f {
                Fault::Crash { node: n, window } if n == node && window.from >= t => Some(window.from),
                _ => None,
            })
            .min()
    }

    /// Is this node's `life` the one running at `t`?
    pub fn alive(&self, node: usize, life: u32, t: Duration) -> bool {
        self.life(node, t) == Some(life)
    }

    pub fn store_down(&self, t: Duration) -> bool {
        self.faults.iter().any(|f| matches!(*f, Fault::StoreDown { window } if window.holds(t)))
    }

    /// When a store stalled at `t` answers again.
    pub fn store_stalled(&self, t: Duration) -> Option<Duration> {
        self.faults.iter().find_map(|f| match *f {
            Fault::StoreStall { window } if window.holds(t) => Some(window.until),
            _ => None,
        })
    }

    /// When a message `from` sends to `to` at `t`, taking `latency` on the wire, is read: held while
    /// the sender is paused, while the link is cut, and while the receiver is paused. (Whether a
    /// dead party sends or reads at all is its caller's to check.)
    pub fn deliver(&self, from: Party, to: Party, t: Duration, latency: Duration) -> Duration {
        let mut at = t;
        if let Party::Node(n) = from
            && let Some(end) = self.paused(n, at)
        {
            at = end;
        }
        // A heal can meet another cut of the same link: keep going until the link is open.
        while let Some(end) = self.cut(from, to, at) {
            at = end;
        }
        at += latency;
        if let Party::Node(n) = to
            && let Some(end) = self.paused(n, at)
        {
            at = end;
        }
        at
    }

    /// Is `node`'s path to the store usable at `t` (the node running and not paused, the link up,
    /// the store taking calls)?
    pub fn store_path_ok(&self, node: usize, t: Duration) -> bool {
        self.life(node, t).is_some()
            && self.paused(node, t).is_none()
            && self.cut(Party::Node(node), Party::Store, t).is_none()
            && !self.store_down(t)
            && self.store_stalled(t).is_none()
    }
}

/// Sleeps until run time `t` (at once if it has passed).
pub async fn until(start: Instant, t: Duration) {
    tokio::time::sleep_until(start + t).await;
}
