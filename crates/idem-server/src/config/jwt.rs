//! `[gateway.jwt]`: how the gateway verifies the bearer JWTs that `jwt:CLAIM` scope parts read
//! (docs/reference/config.md#gatewayjwt). Exactly one key source: `jwks_url` (the identity
//! provider's published keys), `public_key_file` (one PEM public key) or `secret` (HS256); then
//! `issuer` and `audience`, checked when given. The secret is a [`Secret`]: never printed, and no
//! error message quotes it.

use std::path::PathBuf;

use idem_gateway::jwt::MIN_SECRET_BYTES;
use serde::{Deserialize, Serialize};

use super::value::{HttpUrl, Secret};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// The identity provider's JWKS (`…/.well-known/jwks.json`): fetched on first use, again for
    /// a token naming a key it does not hold, and hourly; never per request. `https://` (or
    /// `http://` to a loopback address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_url: Option<HttpUrl>,
    /// A PEM public key (`BEGIN PUBLIC KEY`: RSA for RS256, P-256 for ES256, Ed25519 for EdDSA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key_file: Option<PathBuf>,
    /// The HS256 shared secret, at least 32 bytes; never printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Secret>,
    /// The `iss` every token must carry; absent: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The `aud` every token must be meant for; absent: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
}

impl JwtConfig {
    /// Every mistake, each as (field, message); the field is under `gateway.jwt`, or empty for the
    /// table itself.
    pub(super) fn validate(&self) -> Vec<(&'static str, String)> {
        let mut errors = Vec::new();
        let sources = [self.jwks_url.is_some(), self.public_key_file.is_some(), self.secret.is_some()];
        if sources.iter().filter(|given| **given).count() != 1 {
            let message = "give exactly one of jwks_url, public_key_file or secret: where the keys that sign the \
                           tokens come from";
            errors.push(("", message.to_owned()));
        }
        if let Some(url) = &self.jwks_url
            && !secure_or_loopback(url.uri())
        {
            let message = "must be https:// (keys fetched in clear could be swapped for an attacker's); http:// \
                           only to a loopback address";
            errors.push(("jwks_url", message.to_owned()));
        }
        if let Some(secret) = &self.secret
            && secret.expose().len() < MIN_SECRET_BYTES
        {
            let message = format!(
                "must be at least {MIN_SECRET_BYTES} bytes for HS256 (RFC 7518 §3.2): the same secret the \
                 application signs its tokens with"
            );
            errors.push(("secret", message));
        }
        for (field, value) in [("issuer", &self.issuer), ("audience", &self.audience)] {
            if value.as_ref().is_some_and(|v| v.trim().is_empty()) {
                errors.push((field, "must not be empty: leave it out to accept any".to_owned()));
            }
        }
        errors
    }
}

fn secure_or_loopback(uri: &http::Uri) -> bool {
    if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
        return true;
    }
    let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mistakes(toml: &str) -> Vec<String> {
        let config: JwtConfig = toml::from_str(toml).expect("reads");
        config.validate().into_iter().map(|(field, message)| format!("{field}: {message}")).collect()
    }

    #[test]
    fn one_key_source_a_long_secret_and_no_jwks_in_clear() {
        assert!(mistakes("secret = \"0123456789abcdef0123456789abcdef\"\nissuer = \"https://login\"").is_empty());
        assert!(mistakes("jwks_url = \"https://login.example/jwks.json\"").is_empty());
        assert!(mistakes("jwks_url = \"http://127.0.0.1:9/jwks.json\"").is_empty());
        assert!(mistakes("").iter().any(|m| m.starts_with(": give exactly one")));
        let both = mistakes("public_key_file = \"/k.pem\"\nsecret = \"0123456789abcdef0123456789abcdef\"");
        assert!(both.iter().any(|m| m.starts_with(": give exactly one")), "{both:?}");
        let clear = mistakes("jwks_url = \"http://login.example/jwks.json\"");
        assert!(clear.iter().any(|m| m.starts_with("jwks_url: must be https://")), "{clear:?}");
        let short = mistakes("secret = \"hunter2-is-short\"\nissuer = \" \"");
        assert!(short.iter().any(|m| m.starts_with("secret: must be at least 32 bytes")), "{short:?}");
        assert!(short.iter().any(|m| m.starts_with("issuer: must not be empty")), "{short:?}");
        assert!(short.iter().all(|m| !m.contains("hunter2")), "the secret is never quoted: {short:?}");
    }
}
