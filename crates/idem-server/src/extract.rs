//! Extractors that fail in the API's own shape: a bad body, content type or path parameter comes
//! back as problem+json naming the field, never as the framework's plain-text rejection.

use std::collections::HashMap;

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::header;
use axum::http::request::Parts as RequestParts;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use idem_core::{ClaimId, Invalid, Namespace};
use serde::de::DeserializeOwned;

use crate::app::AppState;
use crate::error::ApiError;

/// A JSON body: `Content-Type: application/json` (or any `+json`), at most the configured size,
/// deserialized with the path of the first bad field in the error.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        if !is_json(req.headers().get(header::CONTENT_TYPE)) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let limit = state.max_body_bytes;
        let body = Limited::new(req.into_body(), limit).collect().await.map_err(|e| {
            if e.downcast_ref::<LengthLimitError>().is_some() {
                ApiError::PayloadTooLarge(limit)
            } else {
                ApiError::Invalid(Invalid::new("body", "the request body could not be read"))
            }
        })?;
        parse_json(&body.to_bytes()).map(ApiJson)
    }
}

/// Deserializes JSON, naming the field at fault (`items[3].ttl_seconds`) when it does not fit.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
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

fn is_json(content_type: Option<&header::HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|v| v.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// `{ns}` and, where the route has one, `{id}`, validated.
pub struct ClaimPath {
    pub ns: Namespace,
    pub id: Option<ClaimId>,
}

impl FromRequestParts<AppState> for ClaimPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut RequestParts, state: &AppState) -> Result<Self, ApiError> {
        let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|_| Invalid::new("path", "the path is not valid UTF-8"))?;
        let ns = Namespace::new(params.get("ns").map_or("", String::as_str))?;
        let id = params.get("id").map(|id| ClaimId::parse(id)).transpose()?;
        Ok(ClaimPath { ns, id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        let ok =
            ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/merge-patch+json"];
        for ct in ok {
            assert!(is_json(Some(&header::HeaderValue::from_static(ct))), "{ct}");
        }
        for ct in ["text/plain", "application/x-www-form-urlencoded", "json"] {
            assert!(!is_json(Some(&header::HeaderValue::from_static(ct))), "{ct}");
        }
        assert!(!is_json(None));
    }

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
    }
}
