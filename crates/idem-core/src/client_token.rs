//! A caller's token for one logical request (docs/faults.md#the-rules, "An unknown outcome can be
//! learned"; docs/reference/api.md#common-rules, "Client tokens"): chosen by the caller, sent with a
//! claim or an operation's begin, and sent again, unchanged, with every retry of that same request.
//! When the connection to the store broke after the write was sent, nobody knows whether it was
//! applied; the retry carries the same token, and the store tells the caller that the claim (or the
//! lease) it finds is its own.
//!
//! Stores keep a digest, never the token: what a caller chose is not echoed to anyone else.

use sha2::{Digest, Sha256};

use crate::Invalid;

/// The digest of a valid client token: 16 bytes of SHA-256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientToken(pub [u8; 16]);

impl ClientToken {
    /// The longest token accepted, in bytes.
    pub const MAX_LEN: usize = 255;

    /// Validates a token (1 to 255 printable ASCII characters, as an `Idempotency-Key`) and keeps
    /// its digest.
    pub fn parse(text: &str) -> Result<Self, Invalid> {
        if text.is_empty() || text.len() > Self::MAX_LEN {
            return Err(Invalid::new("client_token", format!("must be 1 to {} characters", Self::MAX_LEN)));
        }
        if !text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(Invalid::new("client_token", "may contain only printable ASCII"));
        }
        let digest = Sha256::new().chain_update(b"client-token\0").chain_update(text.as_bytes()).finalize();
        let mut out = [0; 16];
        out.copy_from_slice(&digest[..16]);
        Ok(Self(out))
    }

    /// A token made here (the gateway's own, for retrying its begin), never equal to another.
    pub fn generate() -> Self {
        Self(crate::request::LeaseToken::generate().0)
    }

    /// The token of item `index` of a batch sent with this token: each item its own, so that of two
    /// equal keys in one batch only the first is told it won, on a retry too.
    pub fn item(self, index: usize) -> Self {
        let digest = Sha256::new().chain_update(self.0).chain_update((index as u64).to_be_bytes()).finalize();
        let mut out = [0; 16];
        out.copy_from_slice(&digest[..16]);
        Self(out)
    }

    /// Does a stored record belong to the request that sent `asked`? Only when both carry a
    /// token and the tokens are the same: a request without one is never told it won before.
    pub fn same(stored: Option<ClientToken>, asked: Option<ClientToken>) -> bool {
        matches!((stored, asked), (Some(a), Some(b)) if a == b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_printable_ascii_of_1_to_255() {
        assert!(ClientToken::parse("c7a1e5f0-retry-safe").is_ok());
        assert!(ClientToken::parse(&"x".repeat(255)).is_ok());
        for bad in ["", "naïve", "tab\there", &"x".repeat(256)] {
            let e = ClientToken::parse(bad).expect_err(bad);
            assert_eq!(e.field, "client_token");
        }
    }

    #[test]
    fn only_the_same_token_is_the_same_request() {
        let a = ClientToken::parse("a").expect("valid");
        let b = ClientToken::parse("b").expect("valid");
        assert_eq!(Some(a), ClientToken::parse("a").ok());
        assert!(ClientToken::same(Some(a), Some(a)));
        assert!(!ClientToken::same(Some(a), Some(b)));
        assert!(!ClientToken::same(None, None), "no token never matches");
        assert!(!ClientToken::same(Some(a), None) && !ClientToken::same(None, Some(a)));
        assert_ne!(a.item(0), a.item(1), "a batch's items are told apart");
        assert_eq!(a.item(3), a.item(3));
        assert_ne!(a.item(0), a, "and from a single claim's");
    }
}
