//! Event intake (docs/reference/api.md#events): `POST /v1/sources/{name}/events`. Intake validates
//! everything first — source, size, signature, event id — and stores nothing for bad input; an
//! accepted event's receipt and first delivery job are committed together before the 202. What
//! happens to it after that is the event lifecycle's (`idem_core::event::lifecycle`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use idem_core::event::{Accept, NewEvent, ReceiptStatus, SigningSecrets};
use idem_metrics::events::Intake;
use serde::Serialize;

use crate::config::Can;
use crate::web::auth::{Caller, TokenLabel};
use crate::web::error::{ApiError, Problem};
use crate::web::extract::RawBody;
use crate::web::state::AppState;

/// How far a sender's `webhook-timestamp` may be from now.
const TOLERANCE_SECS: i64 = 300;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct IntakeResponse {
    pub receipt_id: String,
    /// `accepted` for a new event; a resend's receipt as it stands now.
    #[schema(schema_with = super::receipt::any_status)]
    pub status: ReceiptStatus,
    pub replay: bool,
}

/// An event that is not JSON: any bytes.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
#[allow(dead_code, reason = "only its ToSchema is used, to describe the body")]
pub struct RawEvent(Vec<u8>);

fn count(source: &str, outcome: Intake) {
    idem_metrics::events::intake(source, outcome);
}

/// Accept an inbound event: `202` new, `200` a resend of the same event, `409` the same event id
/// with another payload.
#[utoipa::path(post, path = "/v1/sources/{name}/events", operation_id = "acceptEvent", tag = "events",
    params(("name" = String, Path, description = "The source's name", pattern = "^[a-z0-9_.-]{1,64}$")),
    // Taken as sent: JSON when the source's `event_id` is a JSON pointer, any bytes when it is a
    // header.
    request_body(description = "The event, as the sender sent it", content(
        (serde_json::Value = "application/json", example = json!({"external_event_id": "evt_1042", "type": "order.paid"})),
        (inline(RawEvent) = "application/octet-stream"),
    )),
    // A signed source's intake needs no token: its signature is the credential.
    security((), ("bearer" = [])),
    responses(
        (status = 202, description = "Accepted: receipt and first delivery job committed", body = IntakeResponse),
        (status = 200, description = "Seen before with the same payload; nothing new queued", body = IntakeResponse,
            headers(("Idempotent-Replayed" = String))),
        (status = 409, description = "Seen before with another payload; nothing stored", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "No event id", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "A signed source: a missing, bad or stale signature. Another source: no valid bearer token", body = Problem, content_type = "application/problem+json",
            headers(("WWW-Authenticate" = String))),
        (status = 403, description = "The token may not write to this source", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown source", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Larger than limits.max_body_bytes", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn intake(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let source = state.config.source(&name).ok_or_else(|| ApiError::NotFound(format!("no source named {name:?}")))?;
    let signed = source.verify_secret.is_some();
    if let Some(secret) = &source.verify_secret {
        let now_secs = state.clock.now().millis() / 1000;
        check_signature(secret, &headers, &body, now_secs).inspect_err(|_| count(&name, Intake::BadSignature))?;
    } else {
        caller.require(Can::Write, "event intake")?;
        caller.require_source(&name)?;
    }
    let mut response = accept(&state, &name, source, &headers, body).await?;
    if signed {
        response.extensions_mut().insert(TokenLabel("signature".into()));
    }
    Ok(response)
}

async fn accept(
    state: &AppState,
    name: &str,
    source: &crate::config::SourceConfig,
    headers: &HeaderMap,
    body: bytes::Bytes,
) -> Result<Response, ApiError> {
    let name = name.to_owned();
    let header = |h: &str| headers.get(h).and_then(|v| v.to_str().ok());
    let event_id = source.event_id.extract(header, &body).inspect_err(|_| count(&name, Intake::Invalid))?;
    let content_type = header(axum::http::header::CONTENT_TYPE.as_str()).map(str::to_owned);
    let event = NewEvent::new(name.clone(), event_id, body.to_vec(), content_type);
    match state.stores.events.accept_event(event).await? {
        Accept::Accepted { receipt_id } => {
            count(&name, Intake::Accepted);
            state.delivery_wake.notify_one();
            let body =
                IntakeResponse { receipt_id: receipt_id.to_string(), status: ReceiptStatus::Accepted, replay: false };
            Ok((StatusCode::ACCEPTED, Json(body)).into_response())
        }
        Accept::Duplicate { receipt_id, status } => {
            count(&name, Intake::Replay);
            let body = IntakeResponse { receipt_id: receipt_id.to_string(), status, replay: true };
            Ok((StatusCode::OK, [super::REPLAYED], Json(body)).into_response())
        }
        Accept::Mismatch { receipt_id } => {
            count(&name, Intake::Mismatch);
            Err(ApiError::Conflict(format!(
                "event id already accepted as {receipt_id} with a different payload; nothing was stored"
            )))
        }
    }
}

fn check_signature(secrets: &SigningSecrets, headers: &HeaderMap, body: &[u8], now_secs: i64) -> Result<(), ApiError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(id), Some(ts), Some(sig)) =
        (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"))
    else {
        return Err(ApiError::BadSignature("webhook-id, webhook-timestamp and webhook-signature are required".into()));
    };
    secrets.verify(id, ts, sig, body, now_secs, TOLERANCE_SECS).map_err(|e| ApiError::BadSignature(e.to_string()))
}
