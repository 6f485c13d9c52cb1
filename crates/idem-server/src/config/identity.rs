//! `[gateway.identity]`: the app's own endpoint that names the caller, for the `identity` scope
//! part (docs/reference/config.md#gatewayidentity; idem_gateway::identity says why and how it is
//! asked). `url` is absolute, or a path on `[gateway] upstream`; the caller's id comes from a
//! response header (`id_header`) or a top-level JSON field (`id_field`): exactly one of the two.

use http::HeaderName;
use serde::{Deserialize, Serialize};

use super::value::{ConfigDuration, HttpUrl};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    /// The endpoint asked with `GET`: `http(s)://…`, or a path on the upstream (`/whoami`).
    pub url: String,
    /// The request headers sent with the question (the credentials).
    #[serde(default = "defaults::forward")]
    pub forward: Vec<String>,
    /// The response header that names the caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_header: Option<String>,
    /// The top-level field of a JSON answer that names the caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_field: Option<String>,
    /// How long an answer is kept for the same credential (`0s`: asked every time).
    #[serde(default = "defaults::cache")]
    pub cache: ConfigDuration,
    /// How long the endpoint may take to answer; past it, `503`.
    #[serde(default = "defaults::timeout")]
    pub timeout: ConfigDuration,
}

mod defaults {
    use std::time::Duration;

    use super::ConfigDuration;

    pub fn forward() -> Vec<String> {
        vec!["cookie".into(), "authorization".into()]
    }
    pub fn cache() -> ConfigDuration {
        ConfigDuration(Duration::from_secs(60))
    }
    pub fn timeout() -> ConfigDuration {
        ConfigDuration(Duration::from_secs(5))
    }
}

impl IdentityConfig {
    /// Every mistake, each as (field under `gateway.identity`, message).
    pub(super) fn validate(&self) -> Vec<(&'static str, String)> {
        let mut errors = Vec::new();
        if !self.url.starts_with('/') && HttpUrl::parse(&self.url).is_err() {
            errors.push(("url", "an http:// or https:// URL, or a path on the upstream such as \"/whoami\"".into()));
        }
        if self.forward.is_empty() {
            errors.push(("forward", "name the request headers that carry the caller's credentials".into()));
        }
        if let Some(bad) = self.forward.iter().find(|h| HeaderName::from_bytes(h.as_bytes()).is_err()) {
            errors.push(("forward", format!("{bad:?} is not a header name")));
        }
        match (&self.id_header, &self.id_field) {
            (Some(_), Some(_)) | (None, None) => {
                errors
                    .push(("", "give exactly one of id_header or id_field: where the answer names the caller".into()));
            }
            (Some(h), None) if HeaderName::from_bytes(h.as_bytes()).is_err() => {
                errors.push(("id_header", format!("{h:?} is not a header name")));
            }
            (None, Some(f)) if f.is_empty() => errors.push(("id_field", "must not be empty".into())),
            _ => {}
        }
        if self.timeout.0.is_zero() {
            errors.push(("timeout", "must be longer than zero".into()));
        }
        errors
    }

    /// The endpoint, a path resolved against the upstream's base URL.
    pub fn url(&self, upstream: &str) -> String {
        match self.url.starts_with('/') {
            true => format!("{}{}", upstream.trim_end_matches('/'), self.url),
            false => self.url.clone(),
        }
    }

    /// The headers sent with the question (validated at load).
    pub fn forward(&self) -> Vec<HeaderName> {
        self.forward.iter().filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok()).collect()
    }

    /// Where the answer names the caller (validated at load: exactly one is given).
    pub fn id_from(&self) -> idem_gateway::IdFrom {
        match (&self.id_header, &self.id_field) {
            (Some(h), _) => HeaderName::from_bytes(h.as_bytes())
                .map(idem_gateway::IdFrom::Header)
                .unwrap_or_else(|_| idem_gateway::IdFrom::Field(h.clone())),
            (None, Some(f)) => idem_gateway::IdFrom::Field(f.clone()),
            (None, None) => idem_gateway::IdFrom::Field("id".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<IdentityConfig, String> {
        let config: IdentityConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        match config.validate().first() {
            Some((field, message)) => Err(format!("{field}: {message}")),
            None => Ok(config),
        }
    }

    #[test]
    fn an_endpoint_and_where_it_names_the_caller() {
        let config = parse("url = \"/whoami\"\nid_field = \"id\"").expect("valid");
        assert_eq!(config.url("http://127.0.0.1:3000/"), "http://127.0.0.1:3000/whoami");
        assert_eq!(config.forward(), vec![http::header::COOKIE, http::header::AUTHORIZATION], "the default");
        assert_eq!(config.cache.0, std::time::Duration::from_secs(60));
        let config =
            parse("url = \"https://app.example/me\"\nid_header = \"X-User-Id\"\ncache = \"0s\"").expect("valid");
        assert_eq!(config.id_from(), idem_gateway::IdFrom::Header(HeaderName::from_static("x-user-id")));
        for (bad, says) in [
            ("url = \"whoami\"\nid_field = \"id\"", "url:"),
            ("url = \"/me\"", "exactly one of id_header or id_field"),
            ("url = \"/me\"\nid_field = \"id\"\nid_header = \"x\"", "exactly one"),
            ("url = \"/me\"\nid_header = \"bad name\"", "id_header:"),
            ("url = \"/me\"\nid_field = \"id\"\nforward = []", "forward:"),
            ("url = \"/me\"\nid_field = \"id\"\ntimeout = \"0s\"", "timeout:"),
            ("url = \"/me\"\nid_field = \"id\"\nforwrd = [\"cookie\"]", "unknown field"),
        ] {
            let error = parse(bad).expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
        }
    }
}
