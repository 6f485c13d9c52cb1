//! What happened in a run, as the parties saw it: every change the store applied, every execution
//! the upstream (or an operation's work) performed, and every answer a client got. The checker
//! ([`crate::check`]) judges a run from this alone, and its digest is the run's fingerprint: the
//! same seed must give the same digest.

use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use idem_core::ClaimId;

/// What the store applied to a key, stamped with the time the node sent it (`stamp`, the node's
/// clock, milliseconds) and applied at run time `at`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreEvent {
    pub at: Duration,
    pub node: usize,
    /// Which life of the node sent it.
    pub life: u32,
    /// When the node sent it (run time): `stamp` is what the node's clock read then.
    pub sent: Duration,
    pub id: ClaimId,
    pub stamp: i64,
    pub change: Change,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    /// A begin took the key: its lease (`fence`), until when, and the lease it took over, if one
    /// had run out (its fence and end).
    Taken {
        fence: u64,
        until: i64,
        lease_ms: u64,
        previous: Option<(u64, i64)>,
    },
    Extended {
        fence: u64,
        until: i64,
    },
    Completed {
        fence: u64,
    },
    Released {
        fence: u64,
    },
}

/// Who holds a lease: a node running a gateway request, or a worker running an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Holder {
    Node(usize),
    /// A worker (the logical operation's index) and the node its calls go through.
    Worker {
        op: usize,
        node: usize,
    },
}

/// Something done once per key is meant: an upstream call that acted, or an operation's work.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Execution {
    pub key: String,
    pub fence: u64,
    pub holder: Holder,
    /// When the call began (the node forwarded it, or the worker began its work).
    pub began: Duration,
    pub at: Duration,
    /// When the answer of the call it belongs to reached its caller (`None`: it never did).
    pub answered: Option<Duration>,
    /// Refused by the upstream as an older holder's (its fence below one already seen).
    pub fenced_off: bool,
}

/// One attempt of a client (or worker) and what came back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attempt {
    /// The logical request (or operation) it belongs to.
    pub logical: usize,
    pub key: String,
    pub what: &'static str,
    pub node: usize,
    pub sent: Duration,
    /// When the answer came (`None`: no answer: a timeout or a broken connection).
    pub answered: Option<Duration>,
    pub status: Option<u16>,
    pub body: Vec<u8>,
    pub replayed: bool,
}

/// When a worker stopped running (paused) or died.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkerFault {
    Paused { op: usize, from: Duration, until: Duration },
    Died { op: usize, at: Duration },
}

#[derive(Debug, Default)]
pub struct History {
    pub store: Vec<StoreEvent>,
    pub executions: Vec<Execution>,
    pub attempts: Vec<Attempt>,
    pub worker_faults: Vec<WorkerFault>,
    /// A line per event, kept only when tracing (`--trace`).
    pub trace: Option<String>,
}

impl History {
    /// Appends a line to the trace, when tracing.
    pub fn say(&mut self, at: Duration, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            let _ = writeln!(trace, "{:>9.3}s {}", at.as_secs_f64(), line());
        }
    }

    /// A digest of everything recorded: the same seed must give the same digest. Lease tokens are
    /// left out (128 random bits by design, unguessable; the run compares them, never orders by
    /// them): an operations answer counts by its status and its fence.
    pub fn digest(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.store.hash(&mut h);
        self.executions.hash(&mut h);
        for a in &self.attempts {
            (a.logical, &a.key, a.what, a.node, a.sent, a.answered, a.status, a.replayed).hash(&mut h);
            match a.what {
                "order" | "resend" => a.body.hash(&mut h),
                _ => {
                    serde_json::from_slice::<serde_json::Value>(&a.body).ok().map(|b| b["fence"].as_u64()).hash(&mut h)
                }
            }
        }
        self.worker_faults.hash(&mut h);
        h.finish()
    }
}
