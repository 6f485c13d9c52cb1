//! The Claims API (docs/reference/api.md#claims): claim, batch claim, lookup by ids, ask whether a
//! prefix exists, get and delete. Requests are validated whole before the store is touched, so bad
//! input changes nothing.

use std::time::Duration;

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem_core::claim::MAX_DATA_BYTES;
use idem_core::{ClaimId, ClaimOutcome, ClaimRecord, ClientToken, Invalid, Namespace, NewClaim, Parts, Timestamp};
use idem_metrics::claims::Lookup;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::web::error::{ApiError, Problem};
use crate::web::extract::{ApiJson, ClaimKeyPath, NsIdParams, NsParam, NsPath};
use crate::web::state::AppState;

/// Items in one batch claim or lookup, at most.
pub const MAX_ITEMS: usize = 10_000;
/// The longest `ttl_seconds` accepted: 100 years.
pub const MAX_TTL_SECONDS: u64 = 100 * 365 * 86_400;

/// A key, given as `key` (one part) or `parts`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyRef {
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
}

impl KeyRef {
    pub fn resolve(self) -> Result<Parts, Invalid> {
        match (self.key, self.parts) {
            (Some(key), None) => Parts::single(key).map_err(|e| e.within("key")),
            (None, Some(parts)) => Parts::new(parts).map_err(|e| e.within("parts")),
            (Some(_), Some(_)) => Err(Invalid::new("key", "give either key or parts, not both")),
            (None, None) => Err(Invalid::new("key", "a key or parts is required")),
        }
    }
}

/// One claim to make.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
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
    /// Any JSON, at most 64 KiB, stored with the claim and returned unchanged.
    #[schema(value_type = Option<Value>)]
    pub data: Option<Box<RawValue>>,
    /// Seconds until the claim expires; default: the namespace's `default_ttl`, else never.
    #[serde(default, deserialize_with = "crate::web::extract::whole_seconds")]
    #[schema(minimum = 1, maximum = 3_153_600_000_u64)]
    pub ttl_seconds: Option<u64>,
    /// Chosen by the caller for this one logical claim and sent again, unchanged, with each retry
    /// of it: a retry of a claim that was stored (its first answer lost) is told `claimed: true`
    /// again. 1 to 255 printable ASCII characters; a UUID is a good choice.
    #[serde(default, deserialize_with = "crate::web::extract::present")]
    #[schema(nullable = false, min_length = 1, max_length = 255, pattern = "^[ -~]+$")]
    pub client_token: Option<String>,
    /// For a record imported from another store (`idem import`): when it was first made, RFC 3339,
    /// not in the future. Its TTL counts from then (an import of a record whose TTL has run out is
    /// absent at once). Default: now.
    #[serde(default, deserialize_with = "crate::web::extract::present")]
    #[schema(nullable = false, format = DateTime)]
    pub created_at: Option<String>,
}

/// A `client_token` as given, validated.
pub fn client_token(text: Option<&str>) -> Result<Option<ClientToken>, Invalid> {
    text.map(ClientToken::parse).transpose()
}

impl ClaimRequest {
    /// Validates the request (at `now`) and resolves its TTL against the namespace default.
    pub fn into_new_claim(self, default_ttl: Option<Duration>, now: Timestamp) -> Result<NewClaim, Invalid> {
        let parts = KeyRef { key: self.key, parts: self.parts }.resolve()?;
        if let Some(data) = &self.data
            && data.get().len() > MAX_DATA_BYTES
        {
            return Err(Invalid::new("data", format!("must be at most {MAX_DATA_BYTES} bytes of JSON")));
        }
        let ttl = match self.ttl_seconds {
            Some(0) => return Err(Invalid::new("ttl_seconds", "must be at least 1")),
            Some(s) if s > MAX_TTL_SECONDS => {
                return Err(Invalid::new("ttl_seconds", format!("must be at most {MAX_TTL_SECONDS}")));
            }
            Some(s) => Some(Duration::from_secs(s)),
            None => default_ttl,
        };
        let data = self.data.filter(|d| d.get() != "null");
        let client = client_token(self.client_token.as_deref())?;
        let created_at = self
            .created_at
            .as_deref()
            .map(|text| {
                let at = Timestamp::parse_rfc3339(text).ok_or_else(|| {
                    Invalid::new("created_at", "must be an RFC 3339 time such as 2026-01-31T12:00:00Z")
                })?;
                // A minute of clock skew between the importer and idem is no error.
                if at.millis() > now.millis() + 60_000 {
                    return Err(Invalid::new("created_at", "must not be in the future"));
                }
                Ok(at)
            })
            .transpose()?;
        Ok(NewClaim { parts, data, ttl, client, created_at })
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// 1 to 10,000 claims, answered in this order.
    #[schema(min_items = 1, max_items = 10_000)]
    pub items: Vec<ClaimRequest>,
    /// As a single claim's, for the whole batch: a retry of the same batch (the same items in the
    /// same order) is told, item by item, which it won. An item's own `client_token` wins.
    #[serde(default, deserialize_with = "crate::web::extract::present")]
    #[schema(nullable = false, min_length = 1, max_length = 255, pattern = "^[ -~]+$")]
    pub client_token: Option<String>,
}

/// The keys to look up. (A body `{"prefix": [...]}` is still answered here as `POST
/// /v1/claims/{ns}/prefix` answers it, for clients written before that route; the document states
/// only `items`, so that every operation has one answer shape.)
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LookupRequest {
    /// 1 to 10,000 keys, answered in this order.
    #[schema(required, nullable = false, min_items = 1, max_items = 10_000)]
    pub items: Option<Vec<KeyRef>>,
    #[schema(ignore)]
    pub prefix: Option<Vec<String>>,
}

/// Does any live claim begin with these parts?
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PrefixRequest {
    /// 1 to 16 parts: the leading parts of the keys asked about.
    #[schema(min_items = 1, max_items = 16, min_length = 1, max_length = 1024, pattern = "^[^\\u0000]+$")]
    pub prefix: Vec<String>,
}

/// A stored claim.
#[derive(Debug, Serialize, ToSchema)]
pub struct Record {
    pub namespace: String,
    /// Lowercase hex SHA-256 of the parts joined by NUL.
    pub id: String,
    pub parts: Vec<String>,
    #[schema(value_type = Option<Value>, required)]
    pub data: Option<Box<RawValue>>,
    /// RFC 3339, UTC.
    #[schema(format = DateTime)]
    pub created_at: String,
    /// RFC 3339, UTC; null: never expires.
    #[schema(format = DateTime, required)]
    pub expires_at: Option<String>,
}

impl From<ClaimRecord> for Record {
    fn from(r: ClaimRecord) -> Self {
        Record {
            namespace: r.namespace.as_str().to_owned(),
            id: r.id.to_string(),
            parts: r.parts.into_vec(),
            data: r.data,
            created_at: r.created_at.to_rfc3339(),
            expires_at: r.expires_at.map(|t| t.to_rfc3339()),
        }
    }
}

/// The answer to one claim: `claimed` and the record (the new one, or the existing one unchanged).
#[derive(Debug, Serialize, ToSchema)]
pub struct ClaimResponse {
    pub claimed: bool,
    #[serde(flatten)]
    pub record: Record,
}

impl From<ClaimOutcome> for ClaimResponse {
    fn from(o: ClaimOutcome) -> Self {
        ClaimResponse { claimed: o.claimed, record: o.record.into() }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchResponse {
    pub results: Vec<ClaimResponse>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LookupResult {
    pub id: String,
    pub exists: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub record: Option<Record>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LookupResponse {
    pub results: Vec<LookupResult>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PrefixResponse {
    pub exists: bool,
}

fn count_claims(ns: &Namespace, outcomes: &[ClaimOutcome]) {
    let claimed = outcomes.iter().filter(|o| o.claimed).count() as u64;
    idem_metrics::claims::claimed(ns.as_str(), claimed, outcomes.len() as u64 - claimed);
}

fn count_lookup(ns: &Namespace, how: Lookup, keys: usize) {
    idem_metrics::claims::looked_up(ns.as_str(), how, keys as u64);
}

fn check_item_count(len: usize) -> Result<(), Invalid> {
    if len == 0 || len > MAX_ITEMS {
        return Err(Invalid::new("items", format!("must hold 1 to {MAX_ITEMS} items, not {len}")));
    }
    Ok(())
}

/// Claim a key: `201` when new, `200` with the existing record when it exists.
#[utoipa::path(post, path = "/v1/claims/{ns}", operation_id = "claim", tag = "claims",
    params(NsParam),
    request_body(content = ClaimRequest, example = json!({"parts": ["scenario-1", "user-3", "node-2"], "data": {"answer": "A"}, "ttl_seconds": 86400})),
    responses(
        (status = 201, description = "Claimed: this request was first", body = ClaimResponse),
        (status = 200, description = "Already claimed: the existing record, unchanged", body = ClaimResponse),
        (status = 400, description = "Invalid request", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store-unavailable`: nothing changed; or `outcome-unknown`: the store's answer was lost, retry with the same client_token", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64))),
    ))]
pub async fn create(
    State(state): State<AppState>,
    path: NsPath,
    ApiJson(body): ApiJson<ClaimRequest>,
) -> Result<Response, ApiError> {
    let claim = body.into_new_claim(state.config.default_ttl(path.ns.as_str()), state.clock.now())?;
    let mut outcomes = state.stores.claims.claim(&path.ns, vec![claim]).await?;
    count_claims(&path.ns, &outcomes);
    let outcome = outcomes.pop().ok_or(ApiError::Internal)?;
    let status = if outcome.claimed { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(ClaimResponse::from(outcome))).into_response())
}

/// Claim up to 10,000 keys in one request; results come in request order and the first of two
/// equal keys wins.
#[utoipa::path(post, path = "/v1/claims/{ns}/batch", operation_id = "claimBatch", tag = "claims",
    params(NsParam),
    request_body(content = BatchRequest, example = json!({"items": [{"key": "https://example.org/a"}, {"key": "https://example.org/b"}]})),
    responses(
        (status = 200, description = "One result per item, in request order", body = BatchResponse),
        (status = 400, description = "Invalid request; nothing was claimed", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn batch(
    State(state): State<AppState>,
    path: NsPath,
    ApiJson(body): ApiJson<BatchRequest>,
) -> Result<Json<BatchResponse>, ApiError> {
    check_item_count(body.items.len())?;
    let (default_ttl, now) = (state.config.default_ttl(path.ns.as_str()), state.clock.now());
    let batch_token = client_token(body.client_token.as_deref())?;
    let claims = body
        .items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let claim = item.into_new_claim(default_ttl, now).map_err(|e| e.within(&format!("items[{i}]")))?;
            Ok(NewClaim { client: claim.client.or(batch_token.map(|t| t.item(i))), ..claim })
        })
        .collect::<Result<Vec<_>, Invalid>>()?;
    let outcomes = state.stores.claims.claim(&path.ns, claims).await?;
    count_claims(&path.ns, &outcomes);
    Ok(Json(BatchResponse { results: outcomes.into_iter().map(ClaimResponse::from).collect() }))
}

/// Look up keys by `items`, answered in request order.
#[utoipa::path(post, path = "/v1/claims/{ns}/lookup", operation_id = "lookupClaims", tag = "claims",
    params(NsParam),
    request_body(content = LookupRequest, example = json!({"items": [{"key": "https://example.org/a"}, {"parts": ["scenario-1", "user-3", "node-2"]}]})),
    responses(
        (status = 200, description = "One result per item, in request order", body = LookupResponse),
        (status = 400, description = "Invalid request", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn lookup(
    State(state): State<AppState>,
    path: NsPath,
    ApiJson(body): ApiJson<LookupRequest>,
) -> Result<Response, ApiError> {
    match (body.items, body.prefix) {
        (Some(items), None) => Ok(Json(lookup_items(&state, &path.ns, items).await?).into_response()),
        // The body `POST /prefix` takes, from before that route existed: answered as it answers.
        (None, Some(prefix)) => Ok(Json(prefix_exists(&state, &path.ns, prefix).await?).into_response()),
        (Some(_), Some(_)) => Err(Invalid::new("items", "give either items or prefix, not both").into()),
        (None, None) => Err(Invalid::new("items", "items is required").into()),
    }
}

async fn lookup_items(state: &AppState, ns: &Namespace, items: Vec<KeyRef>) -> Result<LookupResponse, ApiError> {
    check_item_count(items.len())?;
    let ids = items
        .into_iter()
        .enumerate()
        .map(|(i, key)| key.resolve().map(|p| p.id()).map_err(|e| e.within(&format!("items[{i}]"))))
        .collect::<Result<Vec<ClaimId>, _>>()?;
    let found = state.stores.claims.lookup(ns, &ids).await?;
    count_lookup(ns, Lookup::Ids, ids.len());
    let results = ids
        .iter()
        .zip(found)
        .map(|(id, record)| LookupResult {
            id: id.to_string(),
            exists: record.is_some(),
            record: record.map(Record::from),
        })
        .collect();
    Ok(LookupResponse { results })
}

async fn prefix_exists(state: &AppState, ns: &Namespace, prefix: Vec<String>) -> Result<PrefixResponse, ApiError> {
    let prefix = Parts::new(prefix).map_err(|e| e.within("prefix"))?;
    let exists = state.stores.claims.prefix_exists(ns, &prefix).await?;
    count_lookup(ns, Lookup::Prefix, 1);
    Ok(PrefixResponse { exists })
}

/// Is there a live claim whose parts begin with `prefix`? Indexed, not a scan.
#[utoipa::path(post, path = "/v1/claims/{ns}/prefix", operation_id = "claimPrefixExists", tag = "claims",
    params(NsParam),
    request_body(content = PrefixRequest, example = json!({"prefix": ["scenario-1", "user-3"]})),
    responses(
        (status = 200, description = "Whether a live claim begins with these parts", body = PrefixResponse),
        (status = 400, description = "Invalid request", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn prefix(
    State(state): State<AppState>,
    path: NsPath,
    ApiJson(body): ApiJson<PrefixRequest>,
) -> Result<Json<PrefixResponse>, ApiError> {
    Ok(Json(prefix_exists(&state, &path.ns, body.prefix).await?))
}

/// Read one claim by id.
#[utoipa::path(get, path = "/v1/claims/{ns}/{id}", operation_id = "getClaim", tag = "claims",
    params(NsIdParams),
    responses(
        (status = 200, description = "The live claim", body = Record),
        (status = 404, description = "No live claim with this id", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn read(State(state): State<AppState>, path: ClaimKeyPath) -> Result<Json<Record>, ApiError> {
    let id = path.id;
    count_lookup(&path.ns, Lookup::Get, 1);
    match state.stores.claims.get(&path.ns, &id).await? {
        Some(record) => Ok(Json(record.into())),
        None => Err(ApiError::NotFound(format!("no claim {id} in namespace {}", path.ns))),
    }
}

/// Delete one claim by id.
#[utoipa::path(delete, path = "/v1/claims/{ns}/{id}", operation_id = "deleteClaim", tag = "claims",
    params(NsIdParams),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No live claim with this id", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn delete(State(state): State<AppState>, path: ClaimKeyPath) -> Result<StatusCode, ApiError> {
    let id = path.id;
    if state.stores.claims.delete(&path.ns, &id).await? {
        idem_metrics::claims::deleted(path.ns.as_str(), 1);
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no claim {id} in namespace {}", path.ns)))
    }
}

/// Claims listed at most per page.
pub const MAX_PAGE: usize = 1000;
/// A listing's page when `limit` is not given.
const DEFAULT_PAGE: usize = 100;
/// Claims one prefix delete removes at most; `more` says when some remain.
pub const MAX_DELETE: usize = 100_000;
/// Claims deleted per store call (each call within its own time limit).
const DELETE_STEP: usize = 1000;

/// The prefix in the query of a listing (`GET`) or a prefix delete (`DELETE`) of `/v1/claims/{ns}`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "only its IntoParams is used, to describe the query; `list_query` reads it")]
pub struct PrefixParams {
    /// One part of the prefix, repeated for each part in order (`?prefix=scenario-1&prefix=user-3`):
    /// 1 to 16 parts, each non-empty, at most 1 KiB, without NUL.
    #[param(style = Form, explode, min_items = 1, max_items = 16, min_length = 1, max_length = 1024, pattern = "^[^\\u0000]+$")]
    pub prefix: Vec<String>,
}

/// A listing's page in its query (a prefix delete takes neither: it is refused there).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, reason = "only its IntoParams is used, to describe the query; `list_query` reads it")]
pub struct PageParams {
    /// 1 to 1000; default 100.
    #[param(nullable = false, minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// The `next` of the previous page (`parts_…`); any other text is `400`.
    #[param(
        nullable = false,
        min_length = 8,
        max_length = 21_873,
        pattern = "^parts_(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$"
    )]
    pub after: Option<String>,
}

/// The longest cursor, decoded: 16 parts of 1 KiB, each with its separator.
pub const MAX_CURSOR_BYTES: usize = Parts::MAX_PARTS * (Parts::MAX_PART_BYTES + 1);

/// What every cursor begins with, so that a text that is no cursor (`after=garbage`, a receipt's
/// cursor) is told so (`400`) rather than read as a position and answered with an empty page.
pub const CURSOR_TAG: &str = "parts_";

/// A page's cursor, after [`CURSOR_TAG`]: the parts of its last claim, encoded, in unpadded
/// base64url. Read back with any trailing bits, so that every text of the document's pattern (no
/// length of 4n + 1 after the tag) is a position in parts order: the pattern says exactly which
/// texts are cursors.
const CURSOR: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    base64::engine::GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// A listing's query, read: the prefix, the page size, where the page starts.
struct ListQuery {
    prefix: Parts,
    limit: usize,
    after: Option<Vec<u8>>,
}

/// Reads `prefix` (repeated), `limit` and `after`; `listing`: whether the last two are allowed.
fn list_query(raw: Option<&str>, listing: bool) -> Result<ListQuery, Invalid> {
    use base64::Engine;
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|_| Invalid::new("query", "is not a valid query string"))?;
    let (mut prefix, mut limit, mut after) = (Vec::new(), None, None);
    for (name, value) in pairs {
        match name.as_str() {
            "prefix" => prefix.push(value),
            "limit" if listing => {
                let n = value.parse::<usize>().ok().filter(|n| (1..=MAX_PAGE).contains(n));
                limit = Some(n.ok_or_else(|| Invalid::new("limit", format!("must be 1 to {MAX_PAGE}")))?);
            }
            "after" if listing => {
                let bytes = value.strip_prefix(CURSOR_TAG).and_then(|v| CURSOR.decode(v.as_bytes()).ok());
                let bytes = bytes.filter(|b| !b.is_empty() && b.len() <= MAX_CURSOR_BYTES);
                after = Some(bytes.ok_or_else(|| Invalid::new("after", "is not a cursor from this API"))?);
            }
            other => {
                let allowed = if listing { "prefix, limit and after" } else { "prefix" };
                return Err(Invalid::new(other, format!("is not a parameter here: give {allowed}")));
            }
        }
    }
    if prefix.is_empty() {
        return Err(Invalid::new(
            "prefix",
            "at least one part is required, repeated for each part in order: ?prefix=scenario-1&prefix=user-3",
        ));
    }
    let prefix = Parts::new(prefix).map_err(|e| e.within("prefix"))?;
    Ok(ListQuery { prefix, limit: limit.unwrap_or(DEFAULT_PAGE), after })
}

/// A page of claims, in the order of their parts.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClaimPage {
    pub items: Vec<Record>,
    /// Give it as `after` for the next page; null: this is the last.
    #[schema(required)]
    pub next: Option<String>,
}

/// What a prefix delete did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    /// Live claims deleted.
    pub deleted: u64,
    /// Some remain (a call deletes at most 100,000): call again.
    pub more: bool,
}

/// List the live claims whose parts begin with a prefix, in parts order, a page at a time.
#[utoipa::path(get, path = "/v1/claims/{ns}", operation_id = "listClaims", tag = "claims",
    params(NsParam, PrefixParams, PageParams),
    responses(
        (status = 200, description = "A page of claims in parts order, and the cursor of the next", body = ClaimPage),
        (status = 400, description = "Invalid request", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn list(
    State(state): State<AppState>,
    path: NsPath,
    RawQuery(raw): RawQuery,
) -> Result<Json<ClaimPage>, ApiError> {
    use base64::Engine;
    let q = list_query(raw.as_deref(), true)?;
    // One more than asked: whether there is a next page, without an empty last one.
    let mut found = state.stores.claims.list(&path.ns, &q.prefix, q.after.as_deref(), q.limit + 1).await?;
    let more = found.len() > q.limit;
    found.truncate(q.limit);
    count_lookup(&path.ns, Lookup::List, found.len());
    let next = more.then(|| found.last().map(|r| format!("{CURSOR_TAG}{}", CURSOR.encode(r.parts.encode())))).flatten();
    Ok(Json(ClaimPage { items: found.into_iter().map(Record::from).collect(), next }))
}

/// Delete every live claim whose parts begin with a prefix (at least one part): up to 100,000 a
/// call, and `more` says when some remain.
#[utoipa::path(delete, path = "/v1/claims/{ns}", operation_id = "deleteClaimsByPrefix", tag = "claims",
    params(NsParam, PrefixParams),
    responses(
        (status = 200, description = "How many were deleted", body = Deleted),
        (status = 400, description = "Invalid request: a prefix of at least one part is required", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn delete_prefix(
    State(state): State<AppState>,
    path: NsPath,
    RawQuery(raw): RawQuery,
) -> Result<Json<Deleted>, ApiError> {
    let q = list_query(raw.as_deref(), false)?;
    let mut deleted = 0;
    let more = loop {
        let gone = state.stores.claims.delete_prefix(&path.ns, &q.prefix, DELETE_STEP).await?;
        deleted += gone;
        if gone < DELETE_STEP {
            break false;
        }
        if deleted >= MAX_DELETE {
            break true;
        }
    };
    idem_metrics::claims::deleted(path.ns.as_str(), deleted as u64);
    tracing::info!(token = path.caller.name(), namespace = path.ns.as_str(), deleted, "claims deleted by prefix");
    Ok(Json(Deleted { deleted: deleted as u64, more }))
}
