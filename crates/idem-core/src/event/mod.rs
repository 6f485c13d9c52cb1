//! The pure logic of event intake and delivery: receipt ids and states, the retry schedule, and
//! Standard Webhooks signatures.

pub mod receipt;
pub mod retry;
pub mod signature;

pub use receipt::{
    Accept, AttemptRecord, Job, JobKind, JobOutcome, NewEvent, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus,
    ResultState,
};
pub use retry::next_delay;
pub use signature::{Secret, SignatureError, sign, verify};
