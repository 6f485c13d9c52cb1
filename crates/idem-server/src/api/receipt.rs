//! The receipts API (docs/reference/api.md, Events and Dead letters): one receipt with its event
//! and attempts, a page of receipts, replay of one or of every receipt matching a filter, and
//! discard. A receipt's states and what a replay or a discard may do are the event lifecycle's
//! (`idem_core::event::lifecycle`); this file only shows and asks.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem_core::Invalid;
use idem_core::event::{Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, ResultWebhookState};
use serde::{Deserialize, Serialize};
use utoipa::openapi::{Object, ObjectBuilder, Type};

use crate::actions::{
    BulkReplayRequest, body_view, check_event_id, check_source, check_source_scope, discard_one, parse_status,
    replay_all, replay_one,
};
use crate::config::Can;
use crate::web::auth::Caller;
use crate::web::error::{ApiError, Problem};
use crate::web::extract::{ApiJson, NoInput};
use crate::web::state::AppState;

/// What a replay answers: the receipt, now `accepted` again, and that this call replayed it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReplayResponse {
    pub receipt_id: String,
    /// Always `accepted`: delivery starts again from attempt 1.
    #[schema(schema_with = accepted)]
    pub status: ReceiptStatus,
    /// Always `true`: this call queued the receipt for delivery again.
    #[schema(schema_with = always_true)]
    pub replayed: bool,
}

fn accepted() -> Object {
    super::openapi::only(ReceiptStatus::Accepted.as_str())
}

fn discarded() -> Object {
    super::openapi::only(ReceiptStatus::Discarded.as_str())
}

fn always_true() -> Object {
    super::openapi::only(true)
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AttemptView {
    /// The delivery round: 1, then one more per replay.
    pub round: u32,
    pub n: u32,
    #[schema(format = DateTime)]
    pub started_at: String,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub status_code: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<String>,
    /// The first 1 KiB of the handler's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub response: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ResultView {
    #[schema(schema_with = result_status)]
    pub status: ResultWebhookState,
    pub attempts: u32,
    #[schema(required)]
    pub last_status_code: Option<u16>,
    #[schema(required)]
    pub last_error: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReceiptView {
    pub id: String,
    pub source: String,
    pub event_id: String,
    #[schema(schema_with = any_status)]
    pub status: ReceiptStatus,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// 1, plus one per replay.
    pub round: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub attempts: Option<Vec<AttemptView>>,
    /// When the next delivery attempt is due: only while `retrying`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    pub next_attempt_at: Option<String>,
    #[schema(required)]
    pub result_webhook: Option<ResultView>,
    /// The event as received, when it was JSON (one receipt only, not in listings).
    #[serde(skip_serializing_if = "Option::is_none")]
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

pub fn view(r: Receipt, with_attempts: bool) -> ReceiptView {
    let attempts = with_attempts.then(|| {
        r.attempts
            .into_iter()
            .map(|a| AttemptView {
                round: a.round,
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
        status: r.status,
        created_at: r.created_at.to_rfc3339(),
        updated_at: r.updated_at.to_rfc3339(),
        round: r.round,
        attempts,
        next_attempt_at: r.next_attempt_at.map(|at| at.to_rfc3339()),
        result_webhook: r.result.map(|s| ResultView {
            status: s.status,
            attempts: s.attempts,
            last_status_code: s.last_status_code,
            last_error: s.last_error,
        }),
    }
}

fn parse_id(id: &str) -> Result<ReceiptId, ApiError> {
    Ok(ReceiptId::parse(id)?)
}

/// One receipt with its event and attempts.
#[utoipa::path(get, path = "/v1/receipts/{id}", operation_id = "getReceipt", tag = "events",
    params(ReceiptIdParam),
    responses((status = 200, body = ReceiptView), (status = 404, body = Problem, content_type = "application/problem+json")))]
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
    #[param(nullable = false, pattern = "^[a-z0-9_.-]{1,64}$")]
    pub source: Option<String>,
    /// accepted, processing, retrying, completed, dead or discarded.
    #[param(schema_with = any_status)]
    pub status: Option<String>,
    /// Only the receipt(s) of this event id.
    #[param(nullable = false, pattern = "^[^\\u0000]*$")]
    pub event_id: Option<String>,
    /// 1 to 1000; default 50.
    #[param(nullable = false, minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    #[param(nullable = false, pattern = "^rcpt_[0-9a-f]{36}$")]
    pub cursor: Option<String>,
}

/// A receipt's `status`, or a listing's: any receipt status.
pub fn any_status() -> Object {
    let all = ReceiptStatus::ALL.map(ReceiptStatus::as_str);
    let description = "accepted, processing, retrying, completed, dead or discarded.";
    ObjectBuilder::new().schema_type(Type::String).enum_values(Some(all)).description(Some(description)).build()
}

/// The result webhook's `status`.
fn result_status() -> Object {
    let all = ResultWebhookState::ALL.map(ResultWebhookState::as_str);
    let description = "pending, retrying, delivered or failed.";
    ObjectBuilder::new().schema_type(Type::String).enum_values(Some(all)).description(Some(description)).build()
}

/// `{id}` of a receipt, as the OpenAPI document states it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "only its IntoParams is used, to describe the path")]
pub struct ReceiptIdParam {
    /// rcpt_…
    #[param(pattern = "^rcpt_[0-9a-f]{36}$")]
    pub id: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReceiptPage {
    pub receipts: Vec<ReceiptView>,
    #[schema(required)]
    pub next_cursor: Option<String>,
}

/// Receipts, newest first, a page at a time.
#[utoipa::path(get, path = "/v1/receipts", operation_id = "listReceipts", tag = "events", params(ListQuery),
    responses((status = 200, body = ReceiptPage), (status = 400, body = Problem, content_type = "application/problem+json")))]
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
    params(ReceiptIdParam),
    responses(
        (status = 202, description = "Queued again from attempt 1", body = ReplayResponse),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The receipt is still being delivered", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "A body that is not JSON (a form post): send none", body = Problem, content_type = "application/problem+json"),
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
    let body = ReplayResponse { receipt_id: id.to_string(), status: ReceiptStatus::Accepted, replayed: true };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
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

/// Replay every receipt matching a filter (default: every dead letter), or count them first
/// with `dry_run` (which a `read` token may do; a replay needs `admin`).
#[utoipa::path(post, path = "/v1/receipts/replay", operation_id = "replayReceipts", tag = "events",
    request_body(content = BulkReplayRequest, example = json!(
        {"source": "partner", "status": "dead", "created_after": "2026-11-01T00:00:00Z", "dry_run": true}
    )),
    responses(
        (status = 202, description = "Every matching receipt was queued again from attempt 1", body = BulkReplayResponse),
        (status = 200, description = "Dry run: how many match; nothing changed", body = BulkReplayResponse),
        (status = 400, body = Problem, content_type = "application/problem+json"),
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
    #[schema(schema_with = discarded)]
    pub status: ReceiptStatus,
}

/// Mark a dead receipt as handled by hand: it leaves the dead letters and can still be replayed.
#[utoipa::path(post, path = "/v1/receipts/{id}/discard", operation_id = "discardReceipt", tag = "events",
    params(ReceiptIdParam),
    responses(
        (status = 200, description = "The receipt is discarded", body = DiscardResponse),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The receipt is not dead", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "A body that is not JSON (a form post): send none", body = Problem, content_type = "application/problem+json"),
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
    Ok(Json(DiscardResponse { receipt_id: id.to_string(), status: ReceiptStatus::Discarded }))
}
