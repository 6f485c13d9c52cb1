//! The Redis protocol (contract §13): what idem needs to speak to the idempotency libraries that
//! already run on Redis. [`codec`] turns the bytes a client sends into commands, [`reply`] replies
//! into bytes, for RESP2 and RESP3; neither does I/O or knows a command. (Issue #41: the server
//! that uses them is still to come; nothing listens yet.)

pub mod codec;
pub mod reply;
