//! The background workers a server runs beside its listeners: delivery of events (and of result
//! webhooks), and the sweeper. Each runs until the server's stop signal.

pub mod delivery;
pub mod sweeper;
