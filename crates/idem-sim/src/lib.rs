//! A deterministic simulation of idem's request lifecycle (issue #40): the real gateway engine
//! and the real operations API, on simulated time, a simulated network and a store that fails, with
//! the clocks each node keeps; one seed is one run, the same every time; a checker of contract §10
//! judges each run. docs/testing.md says how to run it, and what it has found.
//!
//! - [`world`]: time, chance, the faults of a run and how a message crosses the world;
//! - [`store`]: the store the nodes share (the `RequestStore` contract as PostgreSQL keeps it) and
//!   each node's way to it; [`upstream`]: the upstream and each node's `forward`;
//! - [`node`]: a node's lives (engine, router, clock); [`clock`]: the clocks a node keeps;
//! - [`client`]: the gateway's clients and the operations' workers;
//! - [`history`]: what happened; [`check`]: the checker; [`run`]: one seed.

pub mod check;
pub mod client;
pub mod clock;
pub mod history;
pub mod node;
pub mod rng;
pub mod run;
pub mod store;
mod unused;
pub mod upstream;
pub mod world;

pub use run::{Options, Outcome, run};
