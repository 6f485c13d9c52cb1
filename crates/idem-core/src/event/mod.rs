//! The pure logic of event intake and delivery: receipt ids and states, where an event's id comes
//! from, the lifecycle after each attempt, the retry schedule, and Standard Webhooks signatures.

pub mod lifecycle;
pub mod receipt;
pub mod retry;
pub mod signature;
pub mod source;

pub use lifecycle::{
    Change, DeliveryPolicy, Discard, JobNext, Replay, Transition, after_attempt, discard, replay, retention_may_delete,
};
pub use receipt::{
    Accept, AttemptRecord, Job, JobKind, NewEvent, QueueStats, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus,
    ReplayBatch, ResultState, ResultWebhookState,
};
pub use retry::next_delay;
pub use signature::{SignatureError, SigningSecret, SigningSecrets, sign, verify};
pub use source::EventIdRule;
