//! Who may do what (docs/security.md), as configured: `[auth]` (the admin `tokens` and the named
//! `[[auth.token]]` tables), `[http] allowed_hosts`, and `[tls]` / `[gateway.tls]`. Every value is
//! checked as it is read; a token's secret is kept only as its SHA-256 and never printed.

use std::path::PathBuf;
use std::time::Duration;

use idem_core::Namespace;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::value::{ConfigDuration, Secret};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Admin tokens: each may do everything. Empty, with no `[[auth.token]]` either: no auth, and
    /// only a loopback `listen` is allowed.
    pub tokens: Vec<Secret>,
    /// Named tokens, each limited to what its `can`, `namespaces` and `sources` say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub token: Vec<TokenConfig>,
}

impl AuthConfig {
    /// Whether any token is configured: then every `/v1` call needs one.
    pub fn is_on(&self) -> bool {
        !self.tokens.is_empty() || !self.token.is_empty()
    }
}

/// What a token may do, each level including the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Can {
    /// Every GET and lookup, and viewing the dashboard.
    Read,
    /// `read`, plus claims, operations (but their DELETE) and event intake.
    Write,
    /// Everything: replay, discard, bulk replay, operation DELETE, the dashboard's actions.
    Admin,
}

impl Can {
    pub fn as_str(self) -> &'static str {
        match self {
            Can::Read => "read",
            Can::Write => "write",
            Can::Admin => "admin",
        }
    }
}

/// One `[[auth.token]]` table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Shown in logs, metrics and the audit log (never the secret): 1-64 of `[A-Za-z0-9_.-]`.
    pub name: String,
    /// The hex SHA-256 of the token (preferred: the config then holds no secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<TokenDigest>,
    /// The token itself, when `sha256` is not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    pub can: Can,
    /// Claims and operations only in these namespaces; absent: in every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<Namespace>>,
    /// Receipts and events of these sources only; absent: of every one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<Namespace>>,
}

impl TokenConfig {
    /// The SHA-256 a presented token must have.
    pub fn digest(&self) -> Option<[u8; 32]> {
        match (&self.sha256, &self.token) {
            (Some(d), None) => Some(d.0),
            (None, Some(t)) => Some(token_digest(t.expose())),
            _ => None,
        }
    }

    /// The checks a single value's parse cannot make; errors name the field, relative to the table.
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        let name_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
        if self.name.is_empty() || self.name.len() > 64 || !self.name.chars().all(name_ok) {
            return Err(("name", "must be 1 to 64 of A-Z, a-z, 0-9, '_', '.' and '-'".into()));
        }
        match (&self.sha256, &self.token) {
            (Some(_), Some(_)) => Err(("token", "give either sha256 or token, not both".into())),
            (None, None) => Err(("sha256", "give sha256 (the token's hex SHA-256) or token".into())),
            (None, Some(token)) => check_secret(token.expose()).map_err(|m| ("token", m.into())),
            (Some(_), None) => Ok(()),
        }
    }
}

/// Why a configured token could never be presented, if so: a Bearer token is read trimmed.
pub(super) fn check_secret(token: &str) -> Result<(), &'static str> {
    if token.trim().is_empty() {
        return Err("must not be empty or only whitespace");
    }
    if token.trim() != token {
        return Err("must not begin or end with whitespace (it could never be presented)");
    }
    if !token.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err("must be printable ASCII (an HTTP header carries it)");
    }
    Ok(())
}

pub fn token_digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// A `sha256` that is not 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be 64 hex digits: the token's SHA-256 (`idem token new` prints it)")]
pub struct BadDigest;

/// A token's SHA-256, written as 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenDigest(pub [u8; 32]);

impl TokenDigest {
    pub fn parse(text: &str) -> Result<Self, BadDigest> {
        let text = text.trim();
        if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BadDigest);
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            // Never fails: every byte is an ASCII hex digit.
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| BadDigest)?;
        }
        Ok(Self(out))
    }
}

impl std::fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&idem_core::key::hex(&self.0))
    }
}

impl<'de> Deserialize<'de> for TokenDigest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Serialize for TokenDigest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&idem_core::key::hex(&self.0))
    }
}

/// `[http]`: what the API listener accepts from browsers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// With no tokens configured, `Host` names accepted besides IP literals and `localhost`
    /// (DNS rebinding defence). `.example.com` accepts the name and every name under it.
    pub allowed_hosts: Vec<String>,
}

impl HttpConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        for host in &self.allowed_hosts {
            let name = host.strip_prefix('.').unwrap_or(host);
            let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.');
            if name.is_empty() || !name.chars().all(ok) {
                return Err(format!("{host:?} is not a host name: give the name alone, without scheme or port"));
            }
        }
        Ok(())
    }
}

/// `[tls]`: the API listener's certificate, or a proxy in front that terminates TLS; and the extra
/// certificate authorities idem trusts for its own `https://` requests.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// The certificate chain (PEM, leaf first), e.g. `fullchain.pem`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// A proxy in front of idem terminates TLS: a non-loopback `listen` without `cert` is fine.
    pub terminated_by_proxy: bool,
    /// Certificate authorities (PEM) trusted for `https://` handlers, result webhooks and the
    /// gateway's upstream, besides the system's roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// How often `cert` and `key` are checked for changes (they are also re-read on SIGHUP).
    pub watch_interval: ConfigDuration,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert: None,
            key: None,
            terminated_by_proxy: false,
            ca_file: None,
            watch_interval: ConfigDuration(Duration::from_secs(5)),
        }
    }
}

impl TlsConfig {
    /// The listener's certificate files, when TLS is on.
    pub fn listener(&self) -> Option<ListenerTls> {
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                Some(ListenerTls { cert: cert.clone(), key: key.clone(), watch_interval: self.watch_interval })
            }
            _ => None,
        }
    }

    pub(super) fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        match (&self.cert, &self.key) {
            (Some(_), None) => Err(("key", "is needed with cert")),
            (None, Some(_)) => Err(("cert", "is needed with key")),
            _ if self.watch_interval.0.is_zero() => Err(("watch_interval", "must be longer than zero")),
            _ => Ok(()),
        }
    }
}

/// A listener's certificate and key files (`[gateway.tls]`, or `[tls]`'s `cert` and `key`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    #[serde(default = "default_watch_interval")]
    pub watch_interval: ConfigDuration,
}

fn default_watch_interval() -> ConfigDuration {
    TlsConfig::default().watch_interval
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_from_hex_only() {
        let d = TokenDigest::parse(&"aB".repeat(32)).expect("hex");
        assert_eq!(d.0[0], 0xab);
        for bad in ["", "abc", &"g".repeat(64), &"a".repeat(63)] {
            assert!(TokenDigest::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tokens_that_could_never_match_are_refused() {
        for bad in ["", "   ", "\t", " padded", "padded ", "new\nline"] {
            assert!(check_secret(bad).is_err(), "{bad:?}");
        }
        assert!(check_secret("idem_AbC-123").is_ok());
    }
}
