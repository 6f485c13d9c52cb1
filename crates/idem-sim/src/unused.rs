//! The stores the simulation does not exercise (claims, events), for the server's state: every call
//! is `unavailable`. The operations API reaches only the [`RequestStore`](idem_core::RequestStore).

use std::time::Duration;

use async_trait::async_trait;
use idem_core::event::{
    Accept, Job, NewEvent, QueueStats, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, ReplayBatch, Transition,
};
use idem_core::{
    ClaimId, ClaimOutcome, ClaimRecord, ClaimStore, ClaimUpdate, EventStore, Namespace, NewClaim, Parts, StoreError,
    StoreLifecycle, Timestamp, UpdateOutcome,
};

pub struct Unused;

fn unused<T>() -> Result<T, StoreError> {
    Err(StoreError::Unavailable("not simulated".into()))
}

#[async_trait]
impl ClaimStore for Unused {
    async fn claim(&self, _: &Namespace, _: Vec<NewClaim>) -> Result<Vec<ClaimOutcome>, StoreError> {
        unused()
    }
    async fn lookup(&self, _: &Namespace, _: &[ClaimId]) -> Result<Vec<Option<ClaimRecord>>, StoreError> {
        unused()
    }
    async fn prefix_exists(&self, _: &Namespace, _: &Parts) -> Result<bool, StoreError> {
        unused()
    }
    async fn update(&self, _: &Namespace, _: ClaimUpdate) -> Result<UpdateOutcome, StoreError> {
        unused()
    }
    async fn delete(&self, _: &Namespace, _: &ClaimId) -> Result<bool, StoreError> {
        unused()
    }
    async fn list(&self, _: &Namespace, _: &Parts, _: Option<&[u8]>, _: usize) -> Result<Vec<ClaimRecord>, StoreError> {
        unused()
    }
    async fn delete_prefix(&self, _: &Namespace, _: &Parts, _: usize) -> Result<usize, StoreError> {
        unused()
    }
    async fn sweep_expired(&self, _: usize) -> Result<usize, StoreError> {
        unused()
    }
    async fn count_claims(&self) -> Result<Vec<(String, u64)>, StoreError> {
        unused()
    }
}

#[async_trait]
impl EventStore for Unused {
    async fn accept_event(&self, _: NewEvent) -> Result<Accept, StoreError> {
        unused()
    }
    async fn lease_jobs(&self, _: usize, _: Duration, _: &[String]) -> Result<Vec<Job>, StoreError> {
        unused()
    }
    async fn release_jobs(&self, _: &[Job]) -> Result<usize, StoreError> {
        unused()
    }
    async fn finish_job(&self, _: &Job, _: Transition) -> Result<bool, StoreError> {
        unused()
    }
    async fn get_receipt(&self, _: &ReceiptId) -> Result<Option<Receipt>, StoreError> {
        unused()
    }
    async fn list_receipts(&self, _: &ReceiptFilter) -> Result<Vec<Receipt>, StoreError> {
        unused()
    }
    async fn count_matching(&self, _: &ReceiptFilter) -> Result<u64, StoreError> {
        unused()
    }
    async fn replay_receipt(&self, _: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        unused()
    }
    async fn replay_matching(&self, _: &ReceiptFilter) -> Result<ReplayBatch, StoreError> {
        unused()
    }
    async fn discard_receipt(&self, _: &ReceiptId) -> Result<Option<ReceiptStatus>, StoreError> {
        unused()
    }
    async fn delete_ended_receipts(&self, _: Timestamp, _: usize) -> Result<usize, StoreError> {
        unused()
    }
    async fn queue_stats(&self) -> Result<QueueStats, StoreError> {
        unused()
    }
    async fn count_receipts(&self) -> Result<Vec<(String, ReceiptStatus, u64)>, StoreError> {
        unused()
    }
}

#[async_trait]
impl StoreLifecycle for Unused {
    async fn check_ready(&self) -> Result<(), StoreError> {
        Ok(())
    }
    async fn close(&self) {}
}
