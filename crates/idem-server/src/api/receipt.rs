//! The receipts API (contract §3): one receipt with its attempts, a page of receipts, and replay.
//! A receipt's states and what a replay may do are the event lifecycle's
//! (`idem_core::event::lifecycle`); this file only shows and asks.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem_core::event::{Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, Replay};
use idem_core::{Invalid, Namespace};
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::state::AppState;

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
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
    /// 1, plus one per replay.
    pub round: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptView>>,
    pub result_webhook: Option<ResultView>,
}

fn view(r: Receipt, with_attempts: bool) -> ReceiptView {
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
    ReceiptView {
        id: r.id.to_string(),
        source: r.source,
        event_id: r.event_id,
        status: r.status.as_str().into(),
        created_at: r.created_at.to_rfc3339(),
        updated_at: r.updated_at.to_rfc3339(),
        round: r.round,
        attempts,
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

/// One receipt with its attempts.
#[utoipa::path(get, path = "/v1/receipts/{id}", operation_id = "getReceipt", tag = "events",
    params(("id" = String, Path, description = "rcpt_…")),
    responses((status = 200, body = ReceiptView), (status = 404, body = crate::api::error::Problem)))]
pub async fn read(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<ReceiptView>, ApiError> {
    let id = parse_id(&id)?;
    let receipt = state.store.get_receipt(&id).await?.ok_or_else(|| ApiError::NotFound(format!("no receipt {id}")))?;
    Ok(Json(view(receipt, true)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub source: Option<String>,
    /// accepted, processing, retrying, completed or dead.
    pub status: Option<String>,
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
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ReceiptPage>, ApiError> {
    let Query(q) = query.map_err(|e| Invalid::new("query", e.body_text()))?;
    let status = q
        .status
        .as_deref()
        .map(|s| {
            ReceiptStatus::parse(s)
                .ok_or_else(|| Invalid::new("status", "must be accepted, processing, retrying, completed or dead"))
        })
        .transpose()?;
    if let Some(source) = &q.source {
        Namespace::new(source).map_err(|e| Invalid::new("source", e.message))?;
    }
    let limit = q.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(Invalid::new("limit", "must be 1 to 1000").into());
    }
    let before = q
        .cursor
        .as_deref()
        .map(|c| ReceiptId::parse(c).map_err(|_| Invalid::new("cursor", "is not a cursor from this API")))
        .transpose()?;
    let filter = ReceiptFilter { source: q.source, status, limit, before };
    let receipts = state.store.list_receipts(&filter).await?;
    let next_cursor = (receipts.len() == limit).then(|| receipts.last().map(|r| r.id.to_string())).flatten();
    Ok(Json(ReceiptPage { receipts: receipts.into_iter().map(|r| view(r, false)).collect(), next_cursor }))
}

/// Deliver a `dead` or `completed` receipt again, from attempt 1, with the same `webhook-id`.
#[utoipa::path(post, path = "/v1/receipts/{id}/replay", operation_id = "replayReceipt", tag = "events",
    params(("id" = String, Path, description = "rcpt_…")),
    responses(
        (status = 202, description = "Queued again from attempt 1", body = ReplayResponse),
        (status = 404, body = crate::api::error::Problem),
        (status = 409, description = "The receipt is still being delivered", body = crate::api::error::Problem),
    ))]
pub async fn replay(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let had = state.store.replay_receipt(&id).await?.ok_or_else(|| ApiError::NotFound(format!("no receipt {id}")))?;
    match idem_core::event::replay(had) {
        Replay::Refused(status) => Err(ApiError::Conflict(format!(
            "receipt {id} is {} and still being delivered; only completed or dead receipts can be replayed",
            status.as_str()
        ))),
        Replay::Restart => {
            metrics::counter!("idem_receipt_replays_total").increment(1);
            state.delivery_wake.notify_one();
            let body = ReplayResponse { receipt_id: id.to_string(), status: "accepted", replayed: true };
            Ok((StatusCode::ACCEPTED, Json(body)).into_response())
        }
    }
}
