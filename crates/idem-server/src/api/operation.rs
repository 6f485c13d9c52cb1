//! The operations API (docs/reference/api.md#operations): seed 001's Processing → Completed |
//! Failed record, so that any program can make a piece of work happen once. `begin` takes the key
//! (or answers the stored result, or waits for the holder), `complete` stores the result, `release`
//! lets the work run again, `extend` is a heartbeat for long work. The guarantees are the
//! gateway's, from the same [`RequestStore`](idem_core::RequestStore): one holder of any number of
//! concurrent begins, only the current token can complete, release or extend, an ended lease frees
//! the key. The pure rules (ids, fingerprints, what is stored) are `idem_core::operation`'s.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem_core::claim::MAX_DATA_BYTES;
use idem_core::gateway::Fingerprint;
use idem_core::operation::{self, ANY_REQUEST, Outcome};
use idem_core::request::{Begin, Forget, LeaseToken, NewRequest, RequestState};
use idem_core::{ClaimId, ClientToken, Invalid, Namespace, Parts, Timestamp};
use idem_gateway::waiters::{LOOK_AGAIN, Wait};
use idem_metrics::claims::Operation as Counted;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa::openapi::Object;

use super::claim::KeyRef;
use super::openapi;
use crate::web::error::{ApiError, Problem};
use crate::web::extract::{ApiJson, NsIdParams, NsParam, NsPath, OperationPath};
use crate::web::state::AppState;

/// Longest lease a begin or an extend may ask for.
pub const MAX_LEASE_SECONDS: u64 = 3600;
/// Longest a begin may wait for a running holder.
pub const MAX_WAIT_SECONDS: u64 = 30;
/// Longest a result may be kept: a year.
pub const MAX_TTL_SECONDS: u64 = 365 * 86_400;
const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// A result's TTL when neither the begin nor the namespace gives one.
const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

/// Begin a piece of work.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BeginRequest {
    /// The one-part form of a key.
    #[serde(default, deserialize_with = "crate::web::extract::present")]
    #[schema(nullable = false, min_length = 1, max_length = 1024, pattern = "^[^\\u0000]+$")]
    pub key: Option<String>,
    /// 1 to 16 non-empty parts, each at most 1 KiB, without NUL.
    #[serde(default, deserialize_with = "crate::web::extract::present")]
    #[schema(
        nullable = false,
        min_items = 1,
        max_items = 16,
        min_length = 1,
        max_length = 1024,
        pattern = "^[^\\u0000]+$"
    )]
    pub parts: Option<Vec<String>>,
    /// Any JSON describing the work; a later begin with another `request` gets 422. Compared as
    /// canonical JSON. Absent: matches any.
    #[schema(value_type = Option<Value>)]
    pub request: Option<Box<RawValue>>,
    /// 1 to 3600; default 60. How long the key is held if the worker dies.
    #[serde(default, deserialize_with = "crate::web::extract::whole_seconds")]
    #[schema(minimum = 1, maximum = 3600)]
    pub lease_seconds: Option<u64>,
    /// 1 to 31536000, counted from completion; default the namespace's `default_ttl`, else 24 h.
    #[serde(default, deserialize_with = "crate::web::extract::whole_seconds")]
    #[schema(minimum = 1, maximum = 31_536_000)]
    pub ttl_seconds: Option<u64>,
    /// 0 to 30; default 0. How long to wait for a running holder before answering 409.
    #[serde(default, deserialize_with = "crate::web::extract::whole_seconds")]
    #[schema(minimum = 0, maximum = 30)]
    pub wait_seconds: Option<u64>,
    /// Chosen by the caller for this one begin and sent again, unchanged, with each retry of it:
    /// a retry of a begin that took the key (its first answer lost) gets `201` with the same lease
    /// token. 1 to 255 printable ASCII characters.
    #[serde(default, deserialize_with = "crate::web::extract::present")]
    #[schema(nullable = false, min_length = 1, max_length = 255, pattern = "^[ -~]+$")]
    pub client_token: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// The token begin answered.
    #[schema(pattern = "^[0-9a-fA-F]{32}$")]
    pub token: String,
    /// Any JSON, at most 64 KiB: what later begins of this key get back.
    #[schema(value_type = Option<Value>)]
    pub result: Option<Box<RawValue>>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// The token begin answered.
    #[schema(pattern = "^[0-9a-fA-F]{32}$")]
    pub token: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendRequest {
    /// The token begin answered.
    #[schema(pattern = "^[0-9a-fA-F]{32}$")]
    pub token: String,
    /// 1 to 3600; default 60: the lease ends this long from now.
    #[serde(default, deserialize_with = "crate::web::extract::whole_seconds")]
    #[schema(minimum = 1, maximum = 3600)]
    pub lease_seconds: Option<u64>,
}

/// Where an operation stands, as each answer's `status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationStatus {
    /// This call began it: the caller holds the key.
    Started,
    /// Someone holds the key right now.
    InProgress,
    /// Done; its result is stored.
    Completed,
}

impl OperationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
        }
    }
}

/// `201`: the caller holds the key and does the work.
#[derive(Debug, Serialize, ToSchema)]
pub struct Started {
    /// Always `started`.
    #[schema(schema_with = started)]
    pub status: OperationStatus,
    /// The key's id: lowercase hex SHA-256 of its parts joined by NUL, as for claims.
    pub id: String,
    /// Proof of holding the key: give it to complete, release and extend.
    pub token: String,
    #[schema(format = DateTime)]
    pub lease_expires_at: String,
    /// The lease's fencing number: greater for every later holder of this key, so that what the
    /// work writes to can refuse a write from an older holder (one paused past its lease).
    pub fence: u64,
}

/// The stored result of completed work.
#[derive(Debug, Serialize, ToSchema)]
pub struct Completed {
    /// Always `completed`.
    #[schema(schema_with = completed)]
    pub status: OperationStatus,
    pub id: String,
    #[schema(value_type = Option<Value>, required)]
    pub result: Option<Box<RawValue>>,
    #[schema(format = DateTime)]
    pub completed_at: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
}

/// Work someone holds right now (the token is never shown).
#[derive(Debug, Serialize, ToSchema)]
pub struct InProgress {
    /// Always `in_progress`.
    #[schema(schema_with = in_progress)]
    pub status: OperationStatus,
    pub id: String,
    #[schema(format = DateTime)]
    pub lease_expires_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum OperationView {
    InProgress(InProgress),
    Completed(Completed),
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Extended {
    #[schema(format = DateTime)]
    pub lease_expires_at: String,
}

// Each answer's `status` names its one value, so that a generated client tells them apart.
fn started() -> Object {
    openapi::only(OperationStatus::Started.as_str())
}

fn completed() -> Object {
    openapi::only(OperationStatus::Completed.as_str())
}

fn in_progress() -> Object {
    openapi::only(OperationStatus::InProgress.as_str())
}

/// A begin, validated.
struct NewOperation {
    parts: Parts,
    fingerprint: Fingerprint,
    lease: Duration,
    ttl: Duration,
    wait: Duration,
    client: Option<ClientToken>,
}

fn seconds(field: &str, value: Option<u64>, range: std::ops::RangeInclusive<u64>) -> Result<Option<Duration>, Invalid> {
    match value {
        Some(s) if !range.contains(&s) => {
            Err(Invalid::new(field, format!("must be {} to {}", range.start(), range.end())))
        }
        other => Ok(other.map(Duration::from_secs)),
    }
}

impl BeginRequest {
    fn validate(self, default_ttl: Option<Duration>) -> Result<NewOperation, Invalid> {
        let parts = KeyRef { key: self.key, parts: self.parts }.resolve()?;
        Ok(NewOperation {
            fingerprint: operation::request_fingerprint(self.request.as_deref().map(RawValue::get)),
            lease: seconds("lease_seconds", self.lease_seconds, 1..=MAX_LEASE_SECONDS)?.unwrap_or(DEFAULT_LEASE),
            ttl: seconds("ttl_seconds", self.ttl_seconds, 1..=MAX_TTL_SECONDS)?.or(default_ttl).unwrap_or(DEFAULT_TTL),
            wait: seconds("wait_seconds", self.wait_seconds, 0..=MAX_WAIT_SECONDS)?.unwrap_or_default(),
            client: super::claim::client_token(self.client_token.as_deref())?,
            parts,
        })
    }
}

fn token(text: &str) -> Result<LeaseToken, Invalid> {
    operation::parse_token(text).ok_or_else(|| Invalid::new("token", "must be the 32 hex digits begin answered"))
}

fn count(ns: &Namespace, what: Counted) {
    idem_metrics::claims::operation(ns.as_str(), what);
}

fn completed_view(id: &ClaimId, outcome: Outcome, expires_at: Timestamp) -> Result<Completed, ApiError> {
    let result = outcome.result.map(RawValue::from_string).transpose().map_err(|_| ApiError::Internal)?;
    Ok(Completed {
        status: OperationStatus::Completed,
        id: id.to_string(),
        result,
        completed_at: outcome.completed_at.to_rfc3339(),
        expires_at: expires_at.to_rfc3339(),
    })
}

fn decode(result: &[u8]) -> Result<Outcome, ApiError> {
    Outcome::decode(result).map_err(|e| {
        tracing::error!(error = %e, "a stored operation result could not be read");
        ApiError::Internal
    })
}

/// Begin work: `201` started, `200` the stored result, `409` in progress, `422` another request.
#[utoipa::path(post, path = "/v1/operations/{ns}/begin", operation_id = "beginOperation", tag = "operations",
    params(NsParam),
    request_body(content = BeginRequest, example = json!({"key": "order-1042", "request": {"amount": 1200, "currency": "EUR"}, "lease_seconds": 1})),
    responses(
        (status = 201, description = "Started: the caller holds the key and does the work", body = Started),
        (status = 200, description = "Completed earlier: the stored result; do not do the work again", body = Completed,
            headers(("Idempotent-Replayed" = String))),
        (status = 409, description = "Held by someone else (after waiting up to wait_seconds); see Retry-After", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64))),
        (status = 422, description = "The key was begun with another request", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "Invalid request", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn begin(
    State(state): State<AppState>,
    path: NsPath,
    ApiJson(body): ApiJson<BeginRequest>,
) -> Result<Response, ApiError> {
    let op = body.validate(state.config.default_ttl(path.ns.as_str()))?;
    let id = op.parts.id();
    let key = operation::store_id(&path.ns, &id);
    let wait = Wait::new(&state.waiters, key, op.wait);
    loop {
        let armed = wait.arm();
        let asked_at = state.clock.now();
        let new = NewRequest {
            id: key,
            fingerprint: op.fingerprint,
            lease: op.lease,
            keep: op.ttl,
            held: operation::encode_held(op.ttl),
            client: op.client,
        };
        let lease_until = match state.stores.requests.begin_request(new).await? {
            Begin::Started { token, lease_until, fence, .. } => {
                count(&path.ns, Counted::Started);
                let lease_until = renewed(&state, &key, token, lease_until, asked_at.plus(op.lease), op.lease).await?;
                let started = Started {
                    status: OperationStatus::Started,
                    id: id.to_string(),
                    token: operation::token_text(&token),
                    lease_expires_at: lease_until.to_rfc3339(),
                    fence,
                };
                return Ok((StatusCode::CREATED, Json(started)).into_response());
            }
            Begin::Completed { same_fingerprint, result, expires_at } => {
                same_request(&state, &path.ns, &key, op.fingerprint, same_fingerprint).await?;
                count(&path.ns, Counted::Replayed);
                let view = completed_view(&id, decode(&result)?, expires_at)?;
                return Ok(([super::REPLAYED], Json(view)).into_response());
            }
            Begin::Held { same_fingerprint, lease_until } => {
                same_request(&state, &path.ns, &key, op.fingerprint, same_fingerprint).await?;
                lease_until
            }
        };
        let until_lease_ends = Duration::from_millis((lease_until.millis() - state.clock.now().millis()).max(0) as u64);
        // Woken when the holder completes or releases (on this node, or another through the
        // store's signals), or look again when its lease ends or after LOOK_AGAIN, or give up at
        // the deadline.
        let look_again = (until_lease_ends + Duration::from_millis(5)).min(LOOK_AGAIN);
        if !wait.until_next_look(armed, look_again).await {
            count(&path.ns, Counted::InProgress);
            return Err(ApiError::InProgress(until_lease_ends.as_secs().max(1)));
        }
    }
}

/// A begin retried with its `client_token` gets back the lease its first attempt took (its answer
/// lost), which has been running since that attempt: the caller counts it from its last try, as
/// the clients do. So a lease that ends before `lease` from when this begin was asked is extended
/// now, and its new end answered.
async fn renewed(
    state: &AppState,
    key: &ClaimId,
    token: LeaseToken,
    lease_until: Timestamp,
    fresh_until: Timestamp,
    lease: Duration,
) -> Result<Timestamp, ApiError> {
    if lease_until >= fresh_until {
        return Ok(lease_until);
    }
    Ok(state.stores.requests.extend_request(key, token, lease).await?.unwrap_or(lease_until))
}

/// Fails with 422 unless the begin's request matches the record's: equal fingerprints, or either
/// side without a request. The store compares for equality; "any" needs a look at the record.
async fn same_request(
    state: &AppState,
    ns: &Namespace,
    key: &ClaimId,
    asked: Fingerprint,
    same_fingerprint: bool,
) -> Result<(), ApiError> {
    if same_fingerprint || asked == ANY_REQUEST {
        return Ok(());
    }
    let stored = match state.stores.requests.peek_request(key).await? {
        Some(RequestState::Held { fingerprint, .. } | RequestState::Completed { fingerprint, .. }) => fingerprint,
        None => return Ok(()),
    };
    if operation::same_request(&asked, &stored) {
        return Ok(());
    }
    count(ns, Counted::Mismatch);
    Err(ApiError::FingerprintMismatch)
}

/// Store the result of work this token holds. A second complete by the same token answers the
/// same stored result.
#[utoipa::path(post, path = "/v1/operations/{ns}/{id}/complete", operation_id = "completeOperation", tag = "operations",
    params(NsIdParams),
    request_body(content = CompleteRequest, example = json!({"token": "5f0c2b6e9d8a4f1e8b7c6d5e4f3a2b1c", "result": {"charge_id": "ch_1042"}})),
    responses(
        (status = 200, description = "Completed: the stored result", body = Completed),
        (status = 409, description = "lease-lost: the token no longer holds the key", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "Invalid request", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn complete(
    State(state): State<AppState>,
    path: OperationPath,
    ApiJson(body): ApiJson<CompleteRequest>,
) -> Result<Json<Completed>, ApiError> {
    let (id, key) = (path.id, path.key);
    let token = token(&body.token)?;
    let result = body.result.map(|r| r.get().to_owned()).filter(|r| r != "null");
    if result.as_ref().is_some_and(|r| r.len() > MAX_DATA_BYTES) {
        return Err(Invalid::new("result", format!("must be at most {MAX_DATA_BYTES} bytes of JSON")).into());
    }
    let ttl = match held_ttl(&state, &key, token).await? {
        Some(Ok(ttl)) => ttl,
        Some(Err((result, expires_at))) => return completed_by(&path.ns, &id, &token, &result, expires_at).map(Json),
        None => return Err(lease_lost(&path.ns)),
    };
    let now = state.clock.now();
    let outcome = Outcome::new(now, &token, result);
    // The expiry as stored, which every later read (a second complete, a begin) reports too.
    if let Some(expires_at) = state.stores.requests.complete_request(&key, token, &outcome.encode(), ttl).await? {
        state.waiters.wake(&key);
        count(&path.ns, Counted::Completed);
        return completed_view(&id, outcome, expires_at).map(Json);
    }
    match state.stores.requests.peek_request(&key).await? {
        Some(RequestState::Completed { result, expires_at, .. }) => {
            completed_by(&path.ns, &id, &token, &result, expires_at).map(Json)
        }
        _ => Err(lease_lost(&path.ns)),
    }
}

/// The TTL the begin asked for, kept with the held key; `Err`: the key is completed (its result
/// and expiry); `None`: the lease is lost. A lease that ran out is still its holder's until another begin takes the key
/// (idem_core::request): it is renewed for a moment, so that its held bytes (the TTL) can be read
/// and the late result stored; a lease another begin took is lost.
async fn held_ttl(
    state: &AppState,
    key: &ClaimId,
    token: LeaseToken,
) -> Result<Option<Result<Duration, (Vec<u8>, Timestamp)>>, ApiError> {
    for _ in 0..2 {
        match state.stores.requests.peek_request(key).await? {
            Some(RequestState::Held { held, .. }) => {
                return Ok(Some(Ok(operation::decode_held(&held).unwrap_or(DEFAULT_TTL))));
            }
            Some(RequestState::Completed { result, expires_at, .. }) => return Ok(Some(Err((result, expires_at)))),
            None => {
                if state.stores.requests.extend_request(key, token, LATE_COMPLETION_LEASE).await?.is_none() {
                    break;
                }
            }
        }
    }
    Ok(None)
}

/// How long a lease that ran out is renewed for, so that its late result can be stored.
const LATE_COMPLETION_LEASE: Duration = Duration::from_secs(10);

/// The stored result, if this token is the one that completed it; else the lease was lost.
fn completed_by(
    ns: &Namespace,
    id: &ClaimId,
    token: &LeaseToken,
    result: &[u8],
    expires_at: Timestamp,
) -> Result<Completed, ApiError> {
    let outcome = decode(result)?;
    if !outcome.completed_by(token) {
        return Err(lease_lost(ns));
    }
    completed_view(id, outcome, expires_at)
}

fn lease_lost(ns: &Namespace) -> ApiError {
    count(ns, Counted::LeaseLost);
    ApiError::LeaseLost
}

/// The work failed: free the key so that it may run again.
#[utoipa::path(post, path = "/v1/operations/{ns}/{id}/release", operation_id = "releaseOperation", tag = "operations",
    params(NsIdParams),
    request_body(content = TokenRequest, example = json!({"token": "5f0c2b6e9d8a4f1e8b7c6d5e4f3a2b1c"})),
    responses(
        (status = 204, description = "Released; the record is gone"),
        (status = 409, description = "lease-lost: the token no longer holds the key", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn release(
    State(state): State<AppState>,
    path: OperationPath,
    ApiJson(body): ApiJson<TokenRequest>,
) -> Result<StatusCode, ApiError> {
    let key = path.key;
    let token = token(&body.token)?;
    if !state.stores.requests.release_request(&key, token).await? {
        return Err(lease_lost(&path.ns));
    }
    state.waiters.wake(&key);
    count(&path.ns, Counted::Released);
    Ok(StatusCode::NO_CONTENT)
}

/// A heartbeat for long work: the lease ends `lease_seconds` from now.
#[utoipa::path(post, path = "/v1/operations/{ns}/{id}/extend", operation_id = "extendOperation", tag = "operations",
    params(NsIdParams),
    request_body(content = ExtendRequest, example = json!({"token": "5f0c2b6e9d8a4f1e8b7c6d5e4f3a2b1c", "lease_seconds": 120})),
    responses(
        (status = 200, description = "Extended", body = Extended),
        (status = 409, description = "lease-lost: the token no longer holds the key", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn extend(
    State(state): State<AppState>,
    path: OperationPath,
    ApiJson(body): ApiJson<ExtendRequest>,
) -> Result<Json<Extended>, ApiError> {
    let key = path.key;
    let token = token(&body.token)?;
    let lease = seconds("lease_seconds", body.lease_seconds, 1..=MAX_LEASE_SECONDS)?.unwrap_or(DEFAULT_LEASE);
    let until = state.stores.requests.extend_request(&key, token, lease).await?.ok_or_else(|| lease_lost(&path.ns))?;
    count(&path.ns, Counted::Extended);
    Ok(Json(Extended { lease_expires_at: until.to_rfc3339() }))
}

/// Read an operation: in progress (never the token) or completed with its result.
#[utoipa::path(get, path = "/v1/operations/{ns}/{id}", operation_id = "getOperation", tag = "operations",
    params(NsIdParams),
    responses(
        (status = 200, description = "`status` is `in_progress` or `completed`", body = OperationView),
        (status = 404, description = "No live operation with this id", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn read(State(state): State<AppState>, path: OperationPath) -> Result<Json<OperationView>, ApiError> {
    let (id, key) = (path.id, path.key);
    match state.stores.requests.peek_request(&key).await? {
        Some(RequestState::Held { lease_until, .. }) => Ok(Json(OperationView::InProgress(InProgress {
            status: OperationStatus::InProgress,
            id: id.to_string(),
            lease_expires_at: lease_until.to_rfc3339(),
        }))),
        Some(RequestState::Completed { result, expires_at, .. }) => {
            Ok(Json(OperationView::Completed(completed_view(&id, decode(&result)?, expires_at)?)))
        }
        None => Err(ApiError::NotFound(format!("no operation {id} in namespace {}", path.ns))),
    }
}

/// Forget a completed result, so that the work may run again.
#[utoipa::path(delete, path = "/v1/operations/{ns}/{id}", operation_id = "deleteOperation", tag = "operations",
    params(NsIdParams),
    responses(
        (status = 204, description = "Forgotten"),
        (status = 409, description = "in-progress: someone holds the key", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64))),
        (status = 404, description = "No live operation with this id", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn delete(State(state): State<AppState>, path: OperationPath) -> Result<StatusCode, ApiError> {
    let (id, key) = (path.id, path.key);
    match state.stores.requests.forget_request(&key).await? {
        Forget::Forgotten => {
            count(&path.ns, Counted::Deleted);
            tracing::info!(token = path.caller.name(), namespace = path.ns.as_str(), operation = %id, "operation deleted");
            Ok(StatusCode::NO_CONTENT)
        }
        Forget::Held => Err(ApiError::InProgress(1)),
        Forget::Absent => Err(ApiError::NotFound(format!("no operation {id} in namespace {}", path.ns))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_serialize_as_their_names() {
        for status in [OperationStatus::Started, OperationStatus::InProgress, OperationStatus::Completed] {
            assert_eq!(serde_json::to_value(status).ok(), Some(serde_json::json!(status.as_str())));
        }
    }
}
