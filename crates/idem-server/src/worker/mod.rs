//! The background workers a server runs beside its listeners: delivery of events (and of result
//! webhooks), the sweeper, and the disk gauges. Each runs until the server's stop signal.

pub mod delivery;
pub mod gauges;
pub mod sweeper;
