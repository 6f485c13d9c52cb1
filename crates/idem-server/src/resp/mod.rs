//! The Redis protocol (contract §13, issue #41): `[resp] listen` serves the Redis commands that
//! idempotency libraries use on the claims of `[resp] namespace` (docs/reference/redis.md).
//! [`codec`] turns the bytes a client sends into commands and [`reply`] replies into bytes, for
//! RESP2 and RESP3; [`server`] accepts connections, [`session`] answers the connection commands,
//! [`data`] the data commands that read and claim, [`write`] those that change a key whatever it
//! holds, [`script`] the libraries' scripts.

pub mod codec;
pub mod data;
pub mod reply;
mod script;
pub mod server;
pub mod session;
mod write;

pub use server::{Resp, serve};
