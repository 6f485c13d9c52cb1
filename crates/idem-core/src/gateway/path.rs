//! Request paths as the upstream's router sees them, so that another spelling of a path cannot
//! slip past a route (`/orders/`, `//orders`, `/x/../orders` and `/%6Frders` are all `/orders`).
//!
//! [`normalize`] applies RFC 3986 §6.2.2 and what common routers add to it: percent-encoded
//! unreserved characters are decoded (other percent-encodings keep their meaning, with uppercase
//! hex; a stray `%` is written `%25`), `.` and `..` segments are removed (§5.2.4; `..` never climbs above the root), repeated
//! slashes collapse, and a trailing slash goes. Route matching and the fingerprint use the
//! normalised path; the path forwarded upstream is always the client's own.
//!
//! The invariant: `normalize(normalize(p)) == normalize(p)`, and a path already in normal form
//! comes back borrowed (no allocation), which is every path a well-behaved client sends.

use std::borrow::Cow;

/// The normal form of an absolute request path (`/…`). Anything else (`*`, an empty path) comes
/// back as it is.
pub fn normalize(path: &str) -> Cow<'_, str> {
    if !path.starts_with('/') || is_normal(path.as_bytes()) {
        return Cow::Borrowed(path);
    }
    let decoded = decode_unreserved(path);
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut normal = String::with_capacity(decoded.len());
    for segment in &segments {
        normal.push('/');
        normal.push_str(segment);
    }
    if normal.is_empty() {
        normal.push('/');
    }
    Cow::Owned(normal)
}

/// Already normal: every `%XX` is uppercase and stands for a reserved character, and no segment
/// is empty (`//`, a trailing `/`), `.` or `..`.
fn is_normal(path: &[u8]) -> bool {
    if path == b"/" {
        return true;
    }
    if path.ends_with(b"/") {
        return false;
    }
    let escapes_normal = path.iter().enumerate().filter(|(_, b)| **b == b'%').all(|(i, _)| {
        match (path.get(i + 1).copied().and_then(hex), path.get(i + 2).copied().and_then(hex)) {
            (Some(high), Some(low)) => {
                !is_unreserved(high << 4 | low) && !path[i + 1..i + 3].iter().any(u8::is_ascii_lowercase)
            }
            _ => false,
        }
    });
    escapes_normal && path.split(|b| *b == b'/').skip(1).all(|segment| !matches!(segment, b"" | b"." | b".."))
}

/// Decodes `%XX` where it stands for an unreserved character (ALPHA, DIGIT, `-`, `.`, `_`, `~`),
/// and writes every other `%XX` with uppercase hex. A `%` not followed by two hex digits is written
/// `%25`, so that decoding never makes a new escape of it (`%%41` would turn into `%A`, then `%A4`
/// into a reserved escape on a second pass).
fn decode_unreserved(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%').then(|| Some((hex(*bytes.get(i + 1)?)?, hex(*bytes.get(i + 2)?)?))).flatten();
        match escaped {
            Some((high, low)) => {
                let byte = high << 4 | low;
                if is_unreserved(byte) {
                    out.push(char::from(byte));
                } else {
                    out.push('%');
                    out.push(char::from(HEX[usize::from(high)]));
                    out.push(char::from(HEX[usize::from(low)]));
                }
                i += 3;
            }
            None if bytes[i] == b'%' => {
                out.push_str("%25");
                i += 1;
            }
            None => {
                // Paths are ASCII in a URI; a stray non-ASCII char is copied whole.
                let ch = path[i..].chars().next().unwrap_or('\u{fffd}');
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn hex(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn other_spellings_of_a_path_are_that_path() {
        for spelling in [
            "/orders",
            "/orders/",
            "//orders",
            "/orders//",
            "/x/../orders",
            "/./orders",
            "/%6Frders",
            "/%6frders",
            "/x/%2e%2E/orders",
            "/../orders",
            "///x/y/../../orders/.",
        ] {
            assert_eq!(normalize(spelling), "/orders", "{spelling:?}");
        }
    }

    #[test]
    fn reserved_escapes_keep_their_meaning() {
        assert_eq!(normalize("/a%2fb"), "/a%2Fb", "an encoded slash is not a separator");
        assert_eq!(normalize("/a%20b/"), "/a%20b");
        assert_eq!(normalize("/100%"), "/100%25", "a stray % is written as an escape");
        assert_eq!(normalize("/%zz"), "/%25zz");
        assert_eq!(normalize("/%%41"), "/%25A");
        assert_eq!(normalize("/orders/%34%32/refund"), "/orders/42/refund");
    }

    #[test]
    fn the_root_and_non_paths() {
        for root in ["/", "//", "/.", "/..", "/x/.."] {
            assert_eq!(normalize(root), "/", "{root:?}");
        }
        assert_eq!(normalize("*"), "*");
        assert_eq!(normalize(""), "");
    }

    #[test]
    fn normal_paths_are_borrowed() {
        for path in ["/", "/orders", "/orders/42/refund", "/a.b/..c/.d", "/v1/x-y_z~", "/a%2Fb", "/100%25"] {
            assert!(matches!(normalize(path), Cow::Borrowed(_)), "{path:?}");
        }
        for path in ["/orders/", "/%6Frders", "/a%2fb", "/a//b", "/a/./b"] {
            assert!(matches!(normalize(path), Cow::Owned(_)), "{path:?}");
        }
    }

    proptest! {
        #[test]
        fn normalising_twice_changes_nothing(path in "/[a-zA-Z0-9./%~_-]{0,24}") {
            let once = normalize(&path).into_owned();
            let twice = normalize(&once);
            prop_assert_eq!(&once, &twice);
            prop_assert!(matches!(twice, Cow::Borrowed(_)), "{:?} is normal, so it is borrowed", once);
        }

        #[test]
        fn decoding_unreserved_characters_changes_nothing(path in "/[a-z0-9]{1,8}(/[a-z0-9._~-]{1,8}){0,3}") {
            let encoded: String = path
                .bytes()
                .map(|b| if b == b'/' { "/".to_owned() } else { format!("%{b:02x}") })
                .collect();
            prop_assert_eq!(normalize(&encoded), normalize(&path));
        }
    }
}
