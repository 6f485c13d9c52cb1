//! What the API and the dashboard both do to receipts, written once: replay one, replay every
//! match of a filter in bounded steps, discard one, and the checks and views they share. What a
//! replay or a discard may do is the event lifecycle's (`idem_core::event::lifecycle`); this module
//! asks the store and tells the delivery worker and the dashboard's counts.

use idem_core::event::{Discard, ReceiptFilter, ReceiptId, ReceiptStatus, Replay};
use idem_core::{Invalid, Namespace, Timestamp};
use serde::Deserialize;

use crate::web::auth::Caller;
use crate::web::error::ApiError;
use crate::web::state::AppState;

/// An event body as the API shows it: the JSON value when it parses as JSON, else base64.
pub fn body_view(body: &[u8]) -> (Option<serde_json::Value>, Option<String>) {
    use base64::Engine as _;
    match serde_json::from_slice(body) {
        Ok(value) => (Some(value), None),
        Err(_) => (None, Some(base64::engine::general_purpose::STANDARD.encode(body))),
    }
}

/// Event ids are text; a NUL can never match one (and PostgreSQL refuses it in text).
pub fn check_event_id(event_id: Option<&str>) -> Result<(), Invalid> {
    match event_id {
        Some(id) if id.contains('\0') => Err(Invalid::new("event_id", "must not contain NUL")),
        _ => Ok(()),
    }
}

pub fn check_source(source: Option<&str>) -> Result<(), Invalid> {
    source.map_or(Ok(()), |s| Namespace::new(s).map(drop).map_err(|e| Invalid::new("source", e.message)))
}

pub fn parse_status(text: &str) -> Result<ReceiptStatus, Invalid> {
    ReceiptStatus::parse(text)
        .ok_or_else(|| Invalid::new("status", "must be accepted, processing, retrying, completed, dead or discarded"))
}

/// A listing or a bulk replay by a caller limited to some sources must name one of them.
pub fn check_source_scope(caller: &Caller, source: Option<&str>) -> Result<(), ApiError> {
    match (source, caller.sources()) {
        (Some(source), _) => caller.require_source(source),
        (None, Some(sources)) => Err(ApiError::Forbidden(format!(
            "token {} sees receipts of sources {} only: give source",
            caller.name(),
            sources.join(", ")
        ))),
        (None, None) => Ok(()),
    }
}

/// Replays `id` as the lifecycle decides: 404 unknown, 409 still being delivered.
pub async fn replay_one(state: &AppState, id: &ReceiptId) -> Result<(), ApiError> {
    let had =
        state.stores.events.replay_receipt(id).await?.ok_or_else(|| ApiError::NotFound(format!("no receipt {id}")))?;
    state.overview_counts.forget().await;
    match idem_core::event::replay(had) {
        Replay::Refused(status) => Err(ApiError::Conflict(format!(
            "receipt {id} is {} and still being delivered; only completed, dead or discarded receipts can be replayed",
            status.as_str()
        ))),
        Replay::Restart => {
            idem_metrics::events::replayed(1);
            state.delivery_wake.notify_one();
            Ok(())
        }
    }
}

/// Which receipts a bulk replay selects; every field narrows it.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkReplayRequest {
    #[schema(pattern = "^[a-z0-9_.-]{1,64}$")]
    pub source: Option<String>,
    /// dead (the default), completed or discarded.
    #[schema(schema_with = replay_status)]
    pub status: Option<String>,
    #[schema(pattern = "^[^\\u0000]*$")]
    pub event_id: Option<String>,
    /// RFC 3339: only receipts created before this time.
    #[schema(format = DateTime)]
    pub created_before: Option<String>,
    /// RFC 3339: only receipts created after this time.
    #[schema(format = DateTime)]
    pub created_after: Option<String>,
    /// Count the matching receipts and change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// `status` of a bulk replay: an ended status, or null for the default (dead).
fn replay_status() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::{ObjectBuilder, Type};
    let ended = ReceiptStatus::ALL.into_iter().filter(|s| s.is_terminal()).map(ReceiptStatus::as_str);
    let status = ObjectBuilder::new().schema_type(Type::String).enum_values(Some(ended));
    let either = utoipa::openapi::schema::AnyOfBuilder::new()
        .item(status)
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some("dead (the default), completed or discarded."));
    utoipa::openapi::schema::Schema::AnyOf(either.build())
}

impl BulkReplayRequest {
    /// The filter this asks for; bad input is a 400 that names the field.
    pub fn filter(&self) -> Result<ReceiptFilter, Invalid> {
        let status = parse_status(self.status.as_deref().unwrap_or("dead"))?;
        if !status.is_terminal() {
            return Err(Invalid::new(
                "status",
                "must be dead, completed or discarded: only ended receipts are replayed",
            ));
        }
        check_source(self.source.as_deref())?;
        check_event_id(self.event_id.as_deref())?;
        let time = |field: &'static str, text: &Option<String>| {
            text.as_deref()
                .map(|t| Timestamp::parse_rfc3339(t).ok_or_else(|| Invalid::new(field, "must be an RFC 3339 time")))
                .transpose()
        };
        let mut filter = ReceiptFilter {
            source: self.source.clone(),
            status: Some(status),
            event_id: self.event_id.clone(),
            limit: REPLAY_STEP,
            ..ReceiptFilter::default()
        };
        if let Some(at) = time("created_before", &self.created_before)? {
            filter = filter.created_before(at);
        }
        if let Some(at) = time("created_after", &self.created_after)? {
            filter = filter.created_after(at);
        }
        Ok(filter)
    }
}

/// Receipts replayed per transaction by a bulk replay, so that intake keeps flowing in between.
pub const REPLAY_STEP: usize = 500;

/// Replays every receipt matching `filter`, one bounded step (one transaction) after another.
/// It runs as its own task, so a client that goes away does not stop it halfway; stopping halfway
/// would still be safe, since a repeat only finds what is left.
pub async fn replay_all(state: &AppState, mut filter: ReceiptFilter) -> Result<u64, ApiError> {
    let store = state.stores.events.clone();
    let wake = state.delivery_wake.clone();
    let task = tokio::spawn(async move {
        let mut total = 0;
        loop {
            let step = store.replay_matching(&filter).await?;
            total += step.replayed;
            if step.replayed > 0 {
                idem_metrics::events::replayed(step.replayed);
                wake.notify_one();
            }
            match step.next {
                Some(next) => filter.before = Some(next),
                None => return Ok::<_, idem_core::StoreError>(total),
            }
            tokio::task::yield_now().await;
        }
    });
    let total = task.await.map_err(|e| {
        tracing::error!(error = %e, "bulk replay task stopped");
        ApiError::Internal
    })??;
    state.overview_counts.forget().await;
    tracing::info!(replayed = total, "bulk replay done");
    Ok(total)
}

/// Discards `id` as the lifecycle decides: 404 unknown, 409 not a dead letter.
pub async fn discard_one(state: &AppState, id: &ReceiptId) -> Result<(), ApiError> {
    let had =
        state.stores.events.discard_receipt(id).await?.ok_or_else(|| ApiError::NotFound(format!("no receipt {id}")))?;
    state.overview_counts.forget().await;
    match idem_core::event::discard(had) {
        Discard::Refused(status) => {
            Err(ApiError::Conflict(format!("receipt {id} is {}; only dead receipts can be discarded", status.as_str())))
        }
        Discard::Discard => {
            idem_metrics::events::discarded();
            Ok(())
        }
        Discard::Already => Ok(()),
    }
}
