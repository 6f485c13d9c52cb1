//! What every request on the API listener is checked for before a handler runs, so that idem, not
//! the HTTP library, answers in problem+json: an `Expect` other than `100-continue` (417), headers
//! larger than `limits.max_header_bytes` (431), and a `Content-Length` over
//! `limits.max_body_bytes` (413, before the body is read, so `Expect: 100-continue` uploads are
//! never invited to send it). What the HTTP library refuses on its own (a header block past its
//! buffer, a malformed `Content-Length`) it answers itself, with an empty body.
//!
//! With no tokens configured (loopback use), two more checks keep browsers out (docs/security.md):
//! a `Host` that is neither an IP literal, `localhost`, nor in `[http] allowed_hosts` is 403 (a web
//! page that rebinds its own name to 127.0.0.1 sends its own name as `Host`), and so is a request
//! that may change something (any method but GET, HEAD, OPTIONS) carrying an `Origin` other than
//! the one `Host` names (a cross-site form or `fetch`). A request with no `Host` at all is not a
//! browser's. With tokens configured a browser cannot send one on its own, so neither check runs.

use std::net::{Ipv4Addr, Ipv6Addr};

use axum::extract::Request;
use axum::http::{Method, header};

use super::error::ApiError;
use super::state::AppState;

/// Why `request` is refused before any handler runs, if it is.
pub fn refuse(state: &AppState, request: &Request) -> Option<ApiError> {
    let headers = request.headers();
    if let Some(expect) = headers.get(header::EXPECT)
        && !expect.as_bytes().eq_ignore_ascii_case(b"100-continue")
    {
        return Some(ApiError::ExpectationFailed);
    }
    let header_bytes: usize = headers.iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum();
    let max_header_bytes = state.config.limits.max_header_bytes;
    if header_bytes > max_header_bytes {
        return Some(ApiError::HeadersTooLarge(max_header_bytes));
    }
    if let Some(e) = idem_gateway::declared_too_large(headers, state.max_body_bytes) {
        return Some(e.into());
    }
    if state.tokens.is_empty() { browser(&state.config.http.allowed_hosts, request) } else { None }
}

/// The `Host` and `Origin` checks, for a server with no tokens.
fn browser(allowed_hosts: &[String], request: &Request) -> Option<ApiError> {
    let headers = request.headers();
    let host =
        headers.get(header::HOST).and_then(|v| v.to_str().ok()).or(request.uri().authority().map(|a| a.as_str()));
    if let Some(host) = host
        && !host_allowed(host, allowed_hosts)
    {
        return Some(ApiError::ForbiddenHost(format!(
            "Host {host:?} is not this idem's name: with no [auth] tokens configured, idem answers only \
             requests addressed to an IP address, localhost, or a name in [http] allowed_hosts"
        )));
    }
    let safe = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    match headers.get(header::ORIGIN) {
        Some(origin) if !safe && !host.is_some_and(|h| same_origin(origin.as_bytes(), h)) => {
            Some(ApiError::ForbiddenHost(format!(
                "Origin {:?} is another site: with no [auth] tokens configured, idem refuses requests \
                 that change something when a browser sends them from another site",
                String::from_utf8_lossy(origin.as_bytes())
            )))
        }
        _ => None,
    }
}

/// Splits `host[:port]` (or `[v6]:port`) into the name and the port, if any.
fn split_host(host: &str) -> (&str, Option<&str>) {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((v6, port)) => (v6, port.strip_prefix(':')),
            None => (host, None),
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => (name, Some(port)),
        _ => (host, None),
    }
}

/// An IP literal, `localhost`, or a name `allowed` lists (`.example.com`: it and every name under it).
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let bracketed = host.starts_with('[');
    let (name, _) = split_host(host.trim());
    if bracketed {
        return name.parse::<Ipv6Addr>().is_ok();
    }
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.parse::<Ipv4Addr>().is_ok() || name == "localhost" {
        return true;
    }
    allowed.iter().any(|a| match a.strip_prefix('.') {
        Some(domain) => {
            name.eq_ignore_ascii_case(domain)
                || name.len() > domain.len() + 1
                    && name.ends_with(&domain.to_ascii_lowercase())
                    && name.as_bytes()[name.len() - domain.len() - 1] == b'.'
        }
        None => name.eq_ignore_ascii_case(a),
    })
}

/// Whether `origin` (`scheme://host[:port]`) names the same host and port as the `Host` header.
pub fn same_origin(origin: &[u8], host: &str) -> bool {
    let Ok(origin) = std::str::from_utf8(origin) else { return false };
    let Some((scheme, authority)) = origin.trim().split_once("://") else { return false };
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => "80",
        "https" => "443",
        _ => return false,
    };
    let (origin_name, origin_port) = split_host(authority);
    let (host_name, host_port) = split_host(host.trim());
    origin_name.eq_ignore_ascii_case(host_name)
        && origin_port.unwrap_or(default_port) == host_port.unwrap_or(default_port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_ip_literals_localhost_or_listed() {
        let allowed = vec!["idem.internal".to_owned(), ".corp.example".to_owned()];
        for ok in [
            "127.0.0.1:7070",
            "10.1.2.3",
            "[::1]:7070",
            "localhost:7070",
            "LOCALHOST",
            "idem.internal:7070",
            "corp.example",
            "a.b.corp.example:1",
        ] {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for bad in [
            "rebind.evil.example",
            "rebind.evil.example:7070",
            "localhost.evil.example",
            "xcorp.example",
            "[evil]:1",
            "idem.internal.evil",
        ] {
            assert!(!host_allowed(bad, &allowed), "{bad}");
        }
    }

    #[test]
    fn origins_match_the_host_they_were_sent_to() {
        assert!(same_origin(b"http://127.0.0.1:7070", "127.0.0.1:7070"));
        assert!(same_origin(b"http://LocalHost:7070", "localhost:7070"));
        assert!(same_origin(b"https://idem.internal", "idem.internal:443"));
        assert!(same_origin(b"http://[::1]:7070", "[::1]:7070"));
        for (origin, host) in [
            ("https://evil.example", "127.0.0.1:7070"),
            ("null", "127.0.0.1:7070"),
            ("http://127.0.0.1:7071", "127.0.0.1:7070"),
            ("http://127.0.0.1", "127.0.0.1:7070"),
            ("file://", "localhost"),
        ] {
            assert!(!same_origin(origin.as_bytes(), host), "{origin} vs {host}");
        }
    }
}
