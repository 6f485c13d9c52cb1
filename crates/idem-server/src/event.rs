//! Event intake and the receipts API (contract §3). Intake validates everything first — source,
//! signature, event id — and stores nothing for bad input; an accepted event's receipt and first
//! delivery job are committed together before the 202.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use idem_core::event::{Accept, NewEvent, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus, Secret, verify};
use idem_core::{Invalid, Namespace};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::app::AppState;
use crate::config::SourceConfig;
use crate::error::ApiError;

/// How far a sender's `webhook-timestamp` may be from now.
const TOLERANCE_SECS: i64 = 300;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct IntakeResponse {
    pub receipt_id: String,
    pub status: String,
    pub replay: bool,
}

fn source<'a>(state: &'a AppState, name: &str) -> Result<&'a SourceConfig, ApiError> {
    state
        .config
        .sources
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("no source named {name:?}")))
}

fn count(source: &str, outcome: &'static str) {
    metrics::counter!("idem_events_intake_total", "source" => source.to_owned(), "outcome" => outcome).increment(1);
}

/// Accept an inbound event: `202` new, `200` a resend of the same event, `409` the same event id
/// with another payload.
#[utoipa::path(post, path = "/v1/sources/{name}/events", tag = "events",
    params(("name" = String, Path, description = "The source's name")),
    request_body(content = String, description = "The event, as the sender sent it"),
    responses(
        (status = 202, description = "Accepted: receipt and first delivery job committed", body = IntakeResponse),
        (status = 200, description = "Seen before with the same payload; nothing new queued", body = IntakeResponse),
        (status = 409, description = "Seen before with another payload; nothing stored", body = crate::error::Problem),
        (status = 400, description = "No event id", body = crate::error::Problem),
        (status = 401, description = "Bad or stale signature", body = crate::error::Problem),
        (status = 404, description = "Unknown source", body = crate::error::Problem),
    ))]
pub async fn intake(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let source = source(&state, &name)?;
    if body.len() > state.max_body_bytes {
        return Err(ApiError::PayloadTooLarge(state.max_body_bytes));
    }
    if let Some(secret) = &source.verify_secret {
        check_signature(secret.expose(), &headers, &body).inspect_err(|_| count(&name, "bad_signature"))?;
    }
    let event_id = event_id(&source.event_id, &headers, &body).inspect_err(|_| count(&name, "invalid"))?;
    let content_type = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let event = NewEvent {
        source: name.clone(),
        event_id,
        payload_hash: Sha256::digest(&body).into(),
        body: body.to_vec(),
        content_type,
    };
    match state.store.accept_event(event).await? {
        Accept::Accepted { receipt_id } => {
            count(&name, "accepted");
            state.delivery_wake.notify_one();
            let body = IntakeResponse { receipt_id: receipt_id.to_string(), status: "accepted".into(), replay: false };
            Ok((StatusCode::ACCEPTED, Json(body)).into_response())
        }
        Accept::Duplicate { receipt_id, status } => {
            count(&name, "replay");
            let body =
                IntakeResponse { receipt_id: receipt_id.to_string(), status: status.as_str().into(), replay: true };
            Ok((StatusCode::OK, Json(body)).into_response())
        }
        Accept::Mismatch { receipt_id } => {
            count(&name, "mismatch");
            Err(ApiError::Conflict(format!(
                "event id already accepted as {receipt_id} with a different payload; nothing was stored"
            )))
        }
    }
}

fn check_signature(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
    let secret = Secret::parse(secret).map_err(|_| ApiError::Internal)?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(id), Some(ts), Some(sig)) =
        (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"))
    else {
        return Err(ApiError::BadSignature("webhook-id, webhook-timestamp and webhook-signature are required".into()));
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    verify(&secret, id, ts, sig, body, now, TOLERANCE_SECS).map_err(|e| ApiError::BadSignature(e.to_string()))
}

/// The event id: a string or number at the JSON pointer, or a header's value.
fn event_id(rule: &str, headers: &HeaderMap, body: &[u8]) -> Result<String, ApiError> {
    let id = if let Some(name) = rule.strip_prefix("header:") {
        let value = headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").trim();
        if value.is_empty() {
            return Err(Invalid::new(rule, "the event id header is missing").into());
        }
        value.to_owned()
    } else {
        let json: serde_json::Value = serde_json::from_slice(body)
            .map_err(|_| Invalid::new("body", "must be JSON: this source reads its event id from it"))?;
        match json.pointer(rule) {
            Some(serde_json::Value::String(s)) if !s.is_empty() => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            Some(_) => return Err(Invalid::new(rule, "the event id must be a non-empty string or a number").into()),
            None => return Err(Invalid::new(rule, "the event id is missing from the body").into()),
        }
    };
    if id.len() > 255 {
        return Err(Invalid::new(rule, "the event id must be at most 255 bytes").into());
    }
    Ok(id)
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

/// One receipt with its attempts.
#[utoipa::path(get, path = "/v1/receipts/{id}", tag = "events",
    params(("id" = String, Path, description = "rcpt_…")),
    responses((status = 200, body = ReceiptView), (status = 404, body = crate::error::Problem)))]
pub async fn read(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<ReceiptView>, ApiError> {
    let id = parse_id(&id)?;
    let receipt = state.store.get_receipt(&id).await?.ok_or_else(|| ApiError::NotFound(format!("no receipt {id}")))?;
    Ok(Json(view(receipt, true)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
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
#[utoipa::path(get, path = "/v1/receipts", tag = "events", params(ListQuery),
    responses((status = 200, body = ReceiptPage), (status = 400, body = crate::error::Problem)))]
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
#[utoipa::path(post, path = "/v1/receipts/{id}/replay", tag = "events",
    params(("id" = String, Path, description = "rcpt_…")),
    responses(
        (status = 202, body = IntakeResponse),
        (status = 404, body = crate::error::Problem),
        (status = 409, description = "The receipt is still being delivered", body = crate::error::Problem),
    ))]
pub async fn replay(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    match state.store.replay_receipt(&id).await? {
        None => Err(ApiError::NotFound(format!("no receipt {id}"))),
        Some(status) if !status.is_terminal() => Err(ApiError::Conflict(format!(
            "receipt {id} is {} ; only completed or dead receipts can be replayed",
            status.as_str()
        ))),
        Some(_) => {
            metrics::counter!("idem_receipt_replays_total").increment(1);
            state.delivery_wake.notify_one();
            let body = IntakeResponse { receipt_id: id.to_string(), status: "accepted".into(), replay: false };
            Ok((StatusCode::ACCEPTED, Json(body)).into_response())
        }
    }
}

pub type Wake = Arc<tokio::sync::Notify>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_come_from_a_pointer_or_a_header() {
        let mut headers = HeaderMap::new();
        headers.insert("idempotency-key", "evt-9".parse().expect("valid"));
        assert_eq!(event_id("header:Idempotency-Key", &headers, b"").expect("header"), "evt-9");
        assert_eq!(event_id("/external_event_id", &headers, br#"{"external_event_id":"e1"}"#).expect("string"), "e1");
        assert_eq!(event_id("/a/b", &headers, br#"{"a":{"b":42}}"#).expect("number"), "42");
        for (rule, body) in [
            ("/x", &b"not json"[..]),
            ("/x", br#"{"y":1}"#),
            ("/x", br#"{"x":null}"#),
            ("/x", br#"{"x":""}"#),
            ("header:Missing", b"{}"),
        ] {
            assert!(matches!(event_id(rule, &headers, body), Err(ApiError::Invalid(_))), "{rule} {body:?}");
        }
    }
}
