//! Composite keys and their ids.
//!
//! A key is a list of 1 to 16 parts (a single `key` is the one-part form). Its id is the lowercase
//! hex SHA-256 of the parts joined by a NUL byte; since no part may contain NUL, two different part
//! lists can never be joined into the same bytes, so `["a_b","c"]` and `["a","b_c"]` never collide.
//!
//! For prefix lookups the store keeps the *encoded* parts: every part followed by a NUL. In that
//! encoding "begins with these parts" is "begins with these bytes", which an ordered index answers
//! as a range scan: `[encode(prefix), prefix_upper_bound(prefix))`.

use sha2::{Digest, Sha256};

use crate::Invalid;

/// Why stored bytes do not read as encoded parts ([`Parts::encode`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadEncoding {
    #[error("encoded parts must end with NUL")]
    Unterminated,
    #[error(transparent)]
    NotUtf8(#[from] std::str::Utf8Error),
}

/// A validated list of key parts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Parts(Vec<String>);

impl Parts {
    pub const MAX_PARTS: usize = 16;
    pub const MAX_PART_BYTES: usize = 1024;

    /// Validates parts; errors name the offending element as `[i]`.
    pub fn new(parts: Vec<String>) -> Result<Self, Invalid> {
        if parts.is_empty() {
            return Err(Invalid::new("", "must have at least one part"));
        }
        if parts.len() > Self::MAX_PARTS {
            return Err(Invalid::new("", format!("must have at most {} parts", Self::MAX_PARTS)));
        }
        for (i, part) in parts.iter().enumerate() {
            check_part(part).map_err(|e| e.within(&format!("[{i}]")))?;
        }
        Ok(Self(parts))
    }

    /// The one-part form, as given by `"key": "..."`.
    pub fn single(key: String) -> Result<Self, Invalid> {
        check_part(&key)?;
        Ok(Self(vec![key]))
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    pub fn into_vec(self) -> Vec<String> {
        self.0
    }

    /// The claim id: SHA-256 of the parts joined by NUL.
    pub fn id(&self) -> ClaimId {
        let mut hasher = Sha256::new();
        for (i, part) in self.0.iter().enumerate() {
            if i > 0 {
                hasher.update([0u8]);
            }
            hasher.update(part.as_bytes());
        }
        ClaimId(hasher.finalize().into())
    }

    /// Every part followed by a NUL byte: the order-preserving form stored for prefix lookups.
    pub fn encode(&self) -> Vec<u8> {
        let len = self.0.iter().map(|p| p.len() + 1).sum();
        let mut out = Vec::with_capacity(len);
        for part in &self.0 {
            out.extend_from_slice(part.as_bytes());
            out.push(0);
        }
        out
    }

    /// The inverse of [`Parts::encode`], for rows read back from a store.
    pub fn decode(encoded: &[u8]) -> Result<Self, BadEncoding> {
        let body = encoded.strip_suffix(&[0]).ok_or(BadEncoding::Unterminated)?;
        let parts = body
            .split(|b| *b == 0)
            .map(|p| std::str::from_utf8(p).map(str::to_owned))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self(parts))
    }

    /// The exclusive upper bound of the encoded keys that begin with these parts: the encoding
    /// with its final NUL raised to 0x01. Every extension of the prefix sorts below it, and every
    /// key that does not begin with the prefix sorts outside `[encode(), bound)`.
    pub fn prefix_upper_bound(&self) -> Vec<u8> {
        let mut bound = self.encode();
        if let Some(last) = bound.last_mut() {
            *last = 1;
        }
        bound
    }
}

/// A part, checked; the error names no field (the caller places it).
fn check_part(part: &str) -> Result<(), Invalid> {
    if part.is_empty() {
        return Err(Invalid::new("", "must not be empty"));
    }
    if part.len() > Parts::MAX_PART_BYTES {
        return Err(Invalid::new("", format!("must be at most {} bytes", Parts::MAX_PART_BYTES)));
    }
    if part.contains('\0') {
        return Err(Invalid::new("", "must not contain NUL"));
    }
    Ok(())
}

/// A claim id: 32 bytes, shown as 64 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimId(pub [u8; 32]);

impl ClaimId {
    pub fn parse(hex: &str) -> Result<Self, Invalid> {
        let invalid = || Invalid::new("id", "must be 64 hexadecimal digits");
        if hex.len() != 64 {
            return Err(invalid());
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
            let hi = hex_value(pair[0]).ok_or_else(invalid)?;
            let lo = hex_value(pair[1]).ok_or_else(invalid)?;
            out[i] = hi << 4 | lo;
        }
        Ok(Self(out))
    }

    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        Some(Self(bytes.try_into().ok()?))
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl std::fmt::Display for ClaimId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = [0u8; 64];
        f.write_str(hex_into(&self.0, &mut out))
    }
}

/// `bytes` as lowercase hex digits. Ids are written in every lookup result, where formatting byte
/// by byte through `fmt` showed up in profiles.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    hex_into(bytes, &mut out).to_owned()
}

fn hex_into<'a>(bytes: &[u8], out: &'a mut [u8]) -> &'a str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
    std::str::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parts(p: &[&str]) -> Parts {
        Parts::new(p.iter().map(|s| s.to_string()).collect()).expect("valid parts")
    }

    #[test]
    fn id_is_sha256_of_nul_joined_parts() {
        // sha256("a\0b"), computed independently with `printf 'a\0b' | sha256sum`.
        assert_eq!(
            parts(&["a", "b"]).id().to_string(),
            "59b271ae1bbcb1d31d41929817f4b16fb439eb4f31520b5ad1d5ce98920a7138"
        );
        assert_eq!(Parts::single("a".into()).expect("valid").id(), parts(&["a"]).id());
    }

    #[test]
    fn joining_cannot_collide() {
        assert_ne!(parts(&["a_b", "c"]).id(), parts(&["a", "b_c"]).id());
        assert_ne!(parts(&["ab", "c"]).id(), parts(&["a", "bc"]).id());
    }

    #[test]
    fn rules_name_the_element() {
        let err = Parts::new(vec!["ok".into(), "".into()]).unwrap_err();
        assert_eq!(err.field, "[1]");
        assert!(Parts::new(vec![]).is_err());
        assert!(Parts::new(vec!["x".into(); 17]).is_err());
        assert!(Parts::new(vec!["a\0b".into()]).is_err());
        assert!(Parts::new(vec!["x".repeat(1025)]).is_err());
        assert!(Parts::new(vec!["x".repeat(1024)]).is_ok());
    }

    #[test]
    fn hex_is_lowercase_and_two_digits_per_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn ids_round_trip_through_hex() {
        let id = parts(&["scenario-1", "user-3"]).id();
        assert_eq!(ClaimId::parse(&id.to_string()).expect("hex"), id);
        assert!(ClaimId::parse("zz").is_err());
        assert!(ClaimId::parse(&"g".repeat(64)).is_err());
    }

    proptest! {
        #[test]
        fn encode_round_trips(p in prop::collection::vec("[^\u{0}]{1,12}", 1..6)) {
            let parts = Parts::new(p).expect("generated parts are valid");
            prop_assert_eq!(Parts::decode(&parts.encode()).expect("decodes"), parts);
        }

        #[test]
        fn prefix_range_holds_exactly_the_extensions(
            prefix in prop::collection::vec("[a-c\u{1}]{1,3}", 1..3),
            key in prop::collection::vec("[a-c\u{1}]{1,3}", 1..5),
        ) {
            let prefix = Parts::new(prefix).expect("valid");
            let key = Parts::new(key).expect("valid");
            let begins = key.as_slice().starts_with(prefix.as_slice());
            let encoded = key.encode();
            let in_range = encoded >= prefix.encode() && encoded < prefix.prefix_upper_bound();
            prop_assert_eq!(begins, in_range);
        }

        #[test]
        fn distinct_parts_have_distinct_ids(
            a in prop::collection::vec("[ab_]{1,4}", 1..4),
            b in prop::collection::vec("[ab_]{1,4}", 1..4),
        ) {
            let (a, b) = (Parts::new(a).expect("valid"), Parts::new(b).expect("valid"));
            prop_assert_eq!(a == b, a.id() == b.id());
        }
    }
}
