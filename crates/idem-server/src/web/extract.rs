//! Extractors that fail in the API's own shape: a bad body, content type or path parameter comes
//! back as problem+json naming the field, never as the framework's plain-text rejection. Every
//! body is read here, through [`RawBody`], under the one limit `limits.max_body_bytes`.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::header;
use axum::http::request::Parts as RequestParts;
use idem_core::{ClaimId, Invalid, Namespace};
use serde::de::DeserializeOwned;

use super::auth::Caller;
use super::error::ApiError;
use super::state::AppState;

/// A body as sent, of at most `limits.max_body_bytes` (413 above it).
pub struct RawBody(pub Bytes);

impl FromRequest<AppState> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        if let Some(e) = idem_gateway::declared_too_large(req.headers(), state.max_body_bytes) {
            return Err(e.into());
        }
        idem_gateway::read_limited(req.into_body(), state.max_body_bytes).await.map(RawBody).map_err(ApiError::from)
    }
}

/// A JSON body: `Content-Type: application/json` (or any `+json`), read as [`RawBody`],
/// deserialized with the path of the first bad field in the error.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        if !content_type.is_some_and(idem_core::media::is_json) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let RawBody(body) = RawBody::from_request(req, state).await?;
        parse_json(&body).map(ApiJson)
    }
}

/// Deserializes a JSON object, naming the field at fault (`items[3].ttl_seconds`) when it does not
/// fit. Anything but an object is refused: serde would read an array as a struct's fields in order.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()).is_some_and(|&b| b != b'{') {
        return Err(ApiError::Invalid(Invalid::new("body", "must be a JSON object")));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // A syntax error is the body's fault, not the field where the parser happened to stop.
        let field = if path == "." || inner.is_syntax() || inner.is_eof() { "body".to_owned() } else { path };
        ApiError::Invalid(Invalid::new(field, inner.to_string()))
    })?;
    de.end().map_err(|e| ApiError::Invalid(Invalid::new("body", e.to_string())))?;
    Ok(value)
}

/// A whole number of seconds, written as JSON allows: `60`, or `60.0` (JSON Schema counts a number
/// with no fraction as an integer, and some encoders write every number as a float). `null` is
/// absent; `60.5`, negatives and strings are refused.
pub fn whole_seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::Deserialize;
    match Option::<serde_json::Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => n
            .as_u64()
            .or_else(|| {
                n.as_f64().filter(|f| f.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(f)).map(|f| f as u64)
            })
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("must be a whole number of seconds, not {n}"))),
    }
}

/// A field that may be absent but not `null`, as the OpenAPI document states it (`nullable` is
/// false): absent is `None` (with `#[serde(default)]`), and a `null` is refused as the wrong type
/// rather than read as absent.
pub fn present<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A POST that takes no input: no body at all (what the clients send), or JSON (`{}`). Anything
/// else, a form post above all, is 415, so that a cross-site form cannot make the call.
pub struct NoInput;

impl FromRequest<AppState> for NoInput {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Nothing {}
        let json = match req.headers().get(header::CONTENT_TYPE).map(|v| v.to_str()) {
            None => false,
            Some(Ok(content_type)) if idem_core::media::is_json(content_type) => true,
            Some(_) => return Err(ApiError::UnsupportedMediaType),
        };
        let RawBody(body) = RawBody::from_request(req, state).await?;
        match (json, body.iter().all(u8::is_ascii_whitespace)) {
            (_, true) => Ok(NoInput),
            (true, false) => parse_json::<Nothing>(&body).map(|_| NoInput),
            (false, false) => Err(ApiError::UnsupportedMediaType),
        }
    }
}

/// `{ns}`, validated, and the caller, who may use it.
pub struct NsPath {
    pub ns: Namespace,
    pub caller: Caller,
}

/// `{ns}/{id}` of a claim, validated, and the caller, who may use `ns`.
pub struct ClaimKeyPath {
    pub ns: Namespace,
    pub id: ClaimId,
    pub caller: Caller,
}

/// `{ns}/{id}` of an operation, validated, and where it lives in the store (operations are kept
/// under a hash of namespace and id), and the caller, who may use `ns`.
pub struct OperationPath {
    pub ns: Namespace,
    pub id: ClaimId,
    pub key: ClaimId,
    pub caller: Caller,
}

/// `{ns}` as the OpenAPI document states it ([`NsPath`] is what reads it).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "only its IntoParams is used, to describe the path")]
pub struct NsParam {
    /// Namespace: 1-64 of [a-z0-9_.-]
    #[param(pattern = "^[a-z0-9_.-]{1,64}$")]
    pub ns: String,
}

/// `{ns}/{id}` as the OpenAPI document states it ([`ClaimKeyPath`] and [`OperationPath`] read it).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code, reason = "only its IntoParams is used, to describe the path")]
pub struct NsIdParams {
    /// Namespace: 1-64 of [a-z0-9_.-]
    #[param(pattern = "^[a-z0-9_.-]{1,64}$")]
    pub ns: String,
    /// 64 hex digits: the lowercase hex SHA-256 of the key's parts joined by NUL
    #[param(pattern = "^[0-9a-f]{64}$")]
    pub id: String,
}

/// A route's path parameters by name (`ns`, `id`).
type PathParams = HashMap<String, String>;

/// The path's parameters, its namespace (one the caller may use and the server admits) and the
/// caller.
async fn namespace(parts: &mut RequestParts, state: &AppState) -> Result<(PathParams, Namespace, Caller), ApiError> {
    let Path(params) = Path::<PathParams>::from_request_parts(parts, state)
        .await
        .map_err(|_| Invalid::new("path", "the path is not valid UTF-8"))?;
    let ns = Namespace::new(params.get("ns").map_or("", String::as_str))?;
    let caller = parts.extensions.get::<Caller>().cloned().unwrap_or(Caller::Anonymous);
    caller.require_namespace(ns.as_str())?;
    if !state.admits(&ns) {
        return Err(ApiError::NotFound(format!(
            "no namespace {ns}: [namespaces] strict = true refuses namespaces without a [namespaces.{ns}] table"
        )));
    }
    Ok((params, ns, caller))
}

/// `{id}`, required: a route without one is refused as a bad request, never a 500.
fn id(params: &PathParams) -> Result<ClaimId, Invalid> {
    let id = params.get("id").ok_or_else(|| Invalid::new("id", "this path names no id"))?;
    ClaimId::parse(id)
}

impl FromRequestParts<AppState> for NsPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut RequestParts, state: &AppState) -> Result<Self, ApiError> {
        let (_, ns, caller) = namespace(parts, state).await?;
        Ok(NsPath { ns, caller })
    }
}

impl FromRequestParts<AppState> for ClaimKeyPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut RequestParts, state: &AppState) -> Result<Self, ApiError> {
        let (params, ns, caller) = namespace(parts, state).await?;
        Ok(ClaimKeyPath { id: id(&params)?, ns, caller })
    }
}

impl FromRequestParts<AppState> for OperationPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut RequestParts, state: &AppState) -> Result<Self, ApiError> {
        let (params, ns, caller) = namespace(parts, state).await?;
        let id = id(&params)?;
        let key = idem_core::operation::store_id(&ns, &id);
        Ok(OperationPath { ns, id, key, caller })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Item {
            #[allow(dead_code)]
            ttl_seconds: u64,
        }
        #[derive(Debug, serde::Deserialize)]
        struct Body {
            #[allow(dead_code)]
            items: Vec<Item>,
        }
        let err = parse_json::<Body>(br#"{"items":[{"ttl_seconds":1},{"ttl_seconds":"x"}]}"#).unwrap_err();
        let ApiError::Invalid(invalid) = err else { panic!("expected invalid") };
        assert_eq!(invalid.field, "items[1].ttl_seconds");
        assert!(parse_json::<Body>(br#"{"items":[]} trailing"#).is_err());
        #[derive(Debug, serde::Deserialize)]
        struct Seconds {
            #[serde(default, deserialize_with = "whole_seconds")]
            s: Option<u64>,
        }
        let read = |json: &str| parse_json::<Seconds>(json.as_bytes()).map(|v| v.s).map_err(|_| ());
        assert_eq!(read(r#"{"s":60}"#), Ok(Some(60)));
        assert_eq!(read(r#"{"s":60.0}"#), Ok(Some(60)), "a float with no fraction is an integer");
        assert_eq!(read(r#"{"s":null}"#), Ok(None));
        assert_eq!(read(r#"{}"#), Ok(None));
        for bad in [r#"{"s":60.5}"#, r#"{"s":-1}"#, r#"{"s":"60"}"#] {
            assert_eq!(read(bad), Err(()), "{bad}");
        }
        let ApiError::Invalid(array) = parse_json::<Body>(br#"[[{"ttl_seconds":1}]]"#).unwrap_err() else {
            panic!("expected invalid")
        };
        assert_eq!((array.field.as_str(), array.message.as_str()), ("body", "must be a JSON object"));
    }
}
