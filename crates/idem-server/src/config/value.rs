//! Config values that are parsed as they are read, so that nothing downstream parses them again:
//! durations, secrets that never print, and `http://` or `https://` URLs.

use std::time::Duration;

use idem_core::{format_duration, parse_duration};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a text is not the URL a key wants; each names the text as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadUrl {
    #[error("{0:?} is not a URL")]
    NotUrl(String),
    #[error("{0:?} must be an http:// or https:// URL with a host")]
    NotHttp(String),
    /// A host that cannot be a `Host` header's value.
    #[error("{0:?} has an unusable host")]
    UnusableHost(String),
}

/// A text that is not an address to listen on (a host name, or no port).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is not an address to listen on: give an IP address and a port, such as 127.0.0.1:7070 or 0.0.0.0:7070"
)]
pub struct BadListen {
    pub text: String,
}

/// A duration written as `"250ms"`, `"10s"`, `"5m"`, `"24h"` or `"90d"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

impl Serialize for ConfigDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map(ConfigDuration).map_err(serde::de::Error::custom)
    }
}

/// A value that must never be printed (a bearer token, a database URL with its password):
/// `Debug` and `Serialize` show `[redacted]`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("[redacted]")
    }
}

/// An `http://` or `https://HOST[:PORT][/path]` URL, checked when the config is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl(http::Uri);

impl HttpUrl {
    pub fn parse(text: &str) -> Result<Self, BadUrl> {
        let uri: http::Uri = text.parse().map_err(|_| BadUrl::NotUrl(text.to_owned()))?;
        let scheme = uri.scheme();
        let web = scheme == Some(&http::uri::Scheme::HTTP) || scheme == Some(&http::uri::Scheme::HTTPS);
        if !web || uri.authority().is_none() {
            return Err(BadUrl::NotHttp(text.to_owned()));
        }
        Ok(Self(uri))
    }

    pub fn uri(&self) -> &http::Uri {
        &self.0
    }
}

impl std::fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for HttpUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_string())
    }
}

/// A listen address: `IP:PORT`, or `localhost:PORT` (read as 127.0.0.1). Host names are not
/// resolved: the message says to use an IP address.
pub fn listen_addr<'de, D: Deserializer<'de>>(d: D) -> Result<std::net::SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    parse_listen(&text).map_err(serde::de::Error::custom)
}

pub fn parse_listen(text: &str) -> Result<std::net::SocketAddr, BadListen> {
    let text = text.trim();
    let spelled = match text.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => text.to_owned(),
    };
    spelled.parse().map_err(|_| BadListen { text: text.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_are_ip_and_port_or_localhost() {
        assert_eq!(parse_listen("localhost:7070").map(|a| a.to_string()), Ok("127.0.0.1:7070".into()));
        assert_eq!(parse_listen("[::1]:7070").map(|a| a.to_string()), Ok("[::1]:7070".into()));
        let err = parse_listen("example.com:7070").unwrap_err().to_string();
        assert!(err.contains("give an IP address and a port"), "{err}");
    }

    #[test]
    fn only_web_urls_with_a_host() {
        assert_eq!(
            HttpUrl::parse("http://127.0.0.1:9000/handle").map(|u| u.to_string()),
            Ok("http://127.0.0.1:9000/handle".into())
        );
        assert!(HttpUrl::parse("https://handler.example.com/hook").is_ok());
        for bad in ["ftp://x", "/relative", "not a url", "http://", "https://"] {
            assert!(HttpUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
