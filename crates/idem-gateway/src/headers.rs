//! Hop-by-hop headers (RFC 9110 §7.6.1) describe one connection, not the message: they are never
//! forwarded, stored or replayed.

use http::HeaderMap;
use http::header::{self, HeaderName};

const HOP_BY_HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, including any that `Connection` names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().chain(named.iter()) {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_standard_and_connection_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, x-secret-hop".parse().expect("valid"));
        h.insert("keep-alive", "timeout=5".parse().expect("valid"));
        h.insert("x-secret-hop", "1".parse().expect("valid"));
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().expect("valid"));
        h.insert(header::CONTENT_TYPE, "application/json".parse().expect("valid"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key(header::CONTENT_TYPE));
    }
}
