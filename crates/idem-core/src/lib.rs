//! idem's core: the domain types, the store traits and the pure logic every backend and the server
//! share. Nothing here does I/O; everything here can be tested without a service running.

pub mod claim;
pub mod client_token;
pub mod clock;
pub mod duration;
pub mod error;
pub mod event;
pub mod gateway;
pub mod key;
pub mod media;
pub mod namespace;
pub mod operation;
pub mod request;
pub mod store;
pub mod throttle;

pub use claim::{
    ClaimChange, ClaimOutcome, ClaimRecord, ClaimUpdate, Decided, Keep, Live, NewClaim, UpdateOutcome, UpdateWhen,
};
pub use client_token::ClientToken;
pub use clock::{Clock, ManualClock, SteadyClock, SystemClock, SystemTicks, Ticks, Timestamp};
pub use duration::{format_duration, parse_duration};
pub use error::{Invalid, StoreError};
pub use key::{ClaimId, Parts};
pub use namespace::Namespace;
pub use store::{
    Beside, ClaimStore, ClaimThen, EventStore, RequestStore, SignalHandler, StoreLifecycle, StoreSignal, Stores,
};
