//! The receipts API (contract §3 and §6): one receipt with its event and attempts, a page of
//! receipts, replay of one or of every receipt matching a filter, and discard. A receipt's states
//! and what a replay or a discard may do are the event lifecycle's (`idem_core::event::lifecycle`);
//! this file only shows and asks.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem_core::event::{Discard, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, Replay};
use idem_core::{Invalid, Namespace, Timestamp};
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{ApiJson, NoInput};
use super::state::AppState;
use crate::config::Can;

/// What a replay answers: the receipt, now `accepted` again, and that this call replayed it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReplayResponse {
    pub receipt_id: String,
    /// Always `accepted`: delivery starts again from attempt 1.
    pub status: &'static str,
    /// Always `true`: this call queued the receipt for delivery again.
    pub replayed: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AttemptView {
    pub n: u32,
    pub started_at: String,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The first 1 KiB of the handler's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ResultView {
    pub status: String,
    pub attempts: u32,
    pub last_status_code: Option<u16>,
    pub last_error: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReceiptView {
    pub id: String,
    pub source: String,
    pub event_id: String,
    /// accepted, processing, retrying, completed, dead or discarded.
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
    /// 1, plus one per replay.
    pub round: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptView>>,
    /// When the next delivery attempt is due: only while `retrying`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub next_attempt_at: Option<String>,
    pub result_webhook: Option<ResultView>,
    /// The event as received, when it was JSON (one receipt only, not in listings).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub body: Option<serde_json::Value>,
    /// The event as received, base64, when it was not JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub body_base64: Option<String>,
    /// The event's `Content-Type` as the sender gave it (one receipt only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub content_type: Option<String>,
}

/// An event body as the API shows it: the JSON value when it parses as JSON, else base64.
pub fn body_view(body: &[u8]) -> (Option<serde_json::Value>, Option<String>) {
    use base64::Engine as _;
    match serde_json::from_slice(body) {
        Ok(value) => (Some(value), None),
        Err(_) => (None, Some(base64::engine::general_purpose::STANDARD.encode(body))),
    }
}

pub fn view(r: Receipt, with_attempts: bool) -> ReceiptView {
    let attempts = with_attempts.then(|| {
        r.attempts
            .into_iter()
            .map(|a| AttemptView {
                n: a.n,
                started_at: a.started_at.to_rfc3339(),
                duration_ms: a.duration_ms,
                status_code: a.status_code,
                error: a.error,
                response: a.response,
            })
            .collect()
    });
    let (body, body_base64) = r.body.as_deref().map(body_view).unwrap_or_default();
    ReceiptView {
        body,
        body_base64,
        content_type: r.content_type,
        id: r.id.to_string(),
        source: r.source,
        event_id: r.event_id,
        status: r.status.as_str().into(),
        created_at: r.created_at.to_rfc3339(),
        updated_at: r.updated_at.to_rfc3339(),
        round: r.round,
        attempts,
        next_attempt_at: r.next_attempt_at.map(|at| at.to_rfc3339()),
        result_webhook: r.result.map(|s| ResultView {
            status: s.status.as_str().into(),
            attempts: s.attempts,
            last_status_code: s.last_status_code,
            last_error: s.last_error,
        }),
    }
}

fn parse_id(id: &str) -> Result<ReceiptId, ApiError> {
    Ok(ReceiptId::parse(id)?)
}

pub fn parse_status(text: &str) -> Result<ReceiptStatus, Invalid> {
    ReceiptStatus::parse(text)
        .ok_or_else(|| Invalid::new("status", "must be accepted, processing, retrying, completed, dead or discarded"))
}

/// Event ids are text; a NUL can never match one (and PostgreSQL refuses it in text).
fn check_event_id(event_id: Option<&str>) -> Result<(), Invalid> {
    match event_id {
        Some(id) if id.contains('\0') => Err(Invalid::new("event_id", "must not contain NUL")),
        _ => Ok(()),
    }
}

fn check_source(source: Option<&str>) -> Result<(), Invalid> {
    source.map_or(Ok(()), |s| Namespace::new(s).map(drop).map_err(|e| Invalid::new("source", e.message)))
}

/// One receipt with its event and attempts.
#[utoipa::path(get, path = "/v1/receipts/{id}", operation_id = "getReceipt", tag = "events",
    params(("id" = String, Path, description = "rcpt_…")),
    responses((status = 200, body = ReceiptView), (status = 404, body = crate::api::error::Problem)))]
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ReceiptView>, ApiError> {
    let id = parse_id(&id)?;
    let receipt =
        state.stores.events.get_receipt(&id).await?.ok_or_else(|| ApiError::NotFound(format!("no receipt {id}")))?;
    caller.require_source(&receipt.source)?;
    Ok(Json(view(receipt, true)))
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

/// Before `caller` changes receipt `id`: 403 unless it may use the receipt's source (looked up only
/// for a caller limited to some sources).
async fn check_receipt_scope(state: &AppState, caller: &Caller, id: &ReceiptId) -> Result<(), ApiError> {
    if caller.sources().is_none() {
        return Ok(());
    }
    match state.stores.events.get_receipt(id).await? {
        Some(receipt) => caller.require_source(&receipt.source),
        None => Err(ApiError::NotFound(format!("no receipt {id}"))),
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub source: Option<String>,
    /// accepted, processing, retrying, completed, dead or discarded.
    pub status: Option<String>,
    /// Only the receipt(s) of this event id.
    pub event_id: Option<String>,
    /// 1 to 1000; default 50.
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReceiptPage {
    pub receipts: Vec<ReceiptView>,
    pub next_cursor: Option<String>,
}

/// Receipts, newest first, a page at a time.
#[utoipa::path(get, path = "/v1/receipts", operation_id = "listReceipts", tag = "events", params(ListQuery),
    responses((status = 200, body = ReceiptPage), (status = 400, body = crate::api::error::Problem)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ReceiptPage>, ApiError> {
    let Query(q) = query.map_err(|e| Invalid::new("query", e.body_text()))?;
    let status = q.status.as_deref().map(parse_status).transpose()?;
    check_source(q.source.as_deref())?;
    check_source_scope(&caller, q.source.as_deref())?;
    check_event_id(q.event_id.as_deref())?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(Invalid::new("limit", "must be 1 to 1000").into());
    }
    let before = q
        .cursor
        .as_deref()
        .map(|c| ReceiptId::parse(c).map_err(|_| Invalid::new("cursor", "is not a cursor from this API")))
        .transpose()?;
    let filter = ReceiptFilter { source: q.source, status, event_id: q.event_id, limit, before, from: None };
    let receipts = state.stores.events.list_receipts(&filter).await?;
    let next_cursor = (receipts.len() == limit).then(|| receipts.last().map(|r| r.id.to_string())).flatten();
    Ok(Json(ReceiptPage { receipts: receipts.into_iter().map(|r| view(r, false)).collect(), next_cursor }))
}

/// Deliver a `dead`, `discarded` or `completed` receipt again, from attempt 1, with the same `webhook-id`.
#[utoipa::path(post, path = "/v1/receipts/{id}/replay", operation_id = "replayReceipt", tag = "events",
    params(("id" = String, Path, description = "rcpt_…")),
    responses(
        (status = 202, description = "Queued again from attempt 1", body = ReplayResponse),
        (status = 404, body = crate::api::error::Problem),
        (status = 409, description = "The receipt is still being delivered", body = crate::api::error::Problem),
        (status = 415, description = "A body that is not JSON (a form post): send none", body = crate::api::error::Problem),
    ))]
pub async fn replay(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    _: NoInput,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    check_receipt_scope(&state, &caller, &id).await?;
    replay_one(&state, &id).await?;
    tracing::info!(token = caller.name(), receipt = %id, "receipt replayed");
    let body = ReplayResponse { receipt_id: id.to_string(), status: "accepted", replayed: true };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
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
            metrics::counter!("idem_receipt_replays_total").increment(1);
            state.delivery_wake.notify_one();
            Ok(())
        }
    }
}

/// Which receipts a bulk replay selects; every field narrows it.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkReplayRequest {
    pub source: Option<String>,
    /// dead (the default), completed or discarded.
    pub status: Option<String>,
    pub event_id: Option<String>,
    /// RFC 3339: only receipts created before this time.
    pub created_before: Option<String>,
    /// RFC 3339: only receipts created after this time.
    pub created_after: Option<String>,
    /// Count the matching receipts and change nothing.
    #[serde(default)]
    pub dry_run: bool,
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

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BulkReplayResponse {
    /// Receipts queued for delivery again (absent for a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued: Option<u64>,
    /// Receipts that match (a dry run only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matching: Option<u64>,
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
                metrics::counter!("idem_receipt_replays_total").increment(step.replayed);
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

/// Replay every receipt matching a filter (default: every dead letter), or count them first
/// with `dry_run` (which a `read` token may do; a replay needs `admin`).
#[utoipa::path(post, path = "/v1/receipts/replay", operation_id = "replayReceipts", tag = "events",
    request_body = BulkReplayRequest,
    responses(
        (status = 202, description = "Every matching receipt was queued again from attempt 1", body = BulkReplayResponse),
        (status = 200, description = "Dry run: how many match; nothing changed", body = BulkReplayResponse),
        (status = 400, body = crate::api::error::Problem),
    ))]
pub async fn replay_matching(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<BulkReplayRequest>,
) -> Result<Response, ApiError> {
    if !request.dry_run {
        caller.require(Can::Admin, "replaying receipts")?;
    }
    let filter = request.filter()?;
    check_source_scope(&caller, request.source.as_deref())?;
    if request.dry_run {
        let matching = state.stores.events.count_matching(&filter).await?;
        return Ok(
            (StatusCode::OK, Json(BulkReplayResponse { queued: None, matching: Some(matching) })).into_response()
        );
    }
    let queued = replay_all(&state, filter).await?;
    tracing::info!(token = caller.name(), filter = ?request, queued, "bulk replay");
    Ok((StatusCode::ACCEPTED, Json(BulkReplayResponse { queued: Some(queued), matching: None })).into_response())
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DiscardResponse {
    pub receipt_id: String,
    /// Always `discarded`.
    pub status: &'static str,
}

/// Mark a dead receipt as handled by hand: it leaves the dead letters and can still be replayed.
#[utoipa::path(post, path = "/v1/receipts/{id}/discard", operation_id = "discardReceipt", tag = "events",
    params(("id" = String, Path, description = "rcpt_…")),
    responses(
        (status = 200, description = "The receipt is discarded", body = DiscardResponse),
        (status = 404, body = crate::api::error::Problem),
        (status = 409, description = "The receipt is not dead", body = crate::api::error::Problem),
        (status = 415, description = "A body that is not JSON (a form post): send none", body = crate::api::error::Problem),
    ))]
pub async fn discard(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    _: NoInput,
) -> Result<Json<DiscardResponse>, ApiError> {
    let id = parse_id(&id)?;
    check_receipt_scope(&state, &caller, &id).await?;
    discard_one(&state, &id).await?;
    tracing::info!(token = caller.name(), receipt = %id, "receipt discarded");
    Ok(Json(DiscardResponse { receipt_id: id.to_string(), status: "discarded" }))
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
            if had == ReceiptStatus::Dead {
                metrics::counter!("idem_receipt_discards_total").increment(1);
            }
            Ok(())
        }
    }
}
