//! Integration tests of the idem server: the real HTTP API on real sockets, over a real SQLite
//! file; and the real `idem` binary for what only a process shows (signals, kill -9, the CLI).

mod auth;
mod browser;
mod callers;
mod claims;
mod cli;
mod clock_steps;
mod deploy;
mod embedded;
mod errors;
mod events;
mod examples;
mod gateway;
mod health;
mod hostile;
mod multinode;
mod operations;
mod pg_restart;
mod pooler;
mod process;
mod resp;
mod sessions;
mod store_faults;
mod support;
mod tls;
mod ui;
