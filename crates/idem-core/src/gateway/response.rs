//! A stored upstream response and its compact binary form, the opaque result the gateway keeps in
//! a `RequestStore`:
//! `1 | status u16 | count u16 | (name-len u16, name, value-len u32, value)* | body`.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    /// End-to-end headers only; hop-by-hop headers are dropped before storing.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

const VERSION: u8 = 1;

/// Why stored bytes do not read as a [`StoredResponse`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("unknown stored response version")]
    Version,
    #[error("stored response is truncated")]
    Truncated,
    /// A header name that is not UTF-8.
    #[error(transparent)]
    NotUtf8(#[from] std::str::Utf8Error),
}

impl StoredResponse {
    /// The size the response holds in memory and in the store.
    pub fn weight(&self) -> usize {
        self.body.len() + self.headers.iter().map(|(n, v)| n.len() + v.len() + 8).sum::<usize>() + 16
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.weight());
        out.push(VERSION);
        out.extend_from_slice(&self.status.to_be_bytes());
        out.extend_from_slice(&(self.headers.len().min(u16::MAX as usize) as u16).to_be_bytes());
        for (name, value) in self.headers.iter().take(u16::MAX as usize) {
            out.extend_from_slice(&(name.len() as u16).to_be_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(value.len() as u32).to_be_bytes());
            out.extend_from_slice(value);
        }
        out.extend_from_slice(&self.body);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, Malformed> {
        let mut r = Reader(bytes);
        if r.take(1)? != [VERSION] {
            return Err(Malformed::Version);
        }
        let status = u16::from_be_bytes(r.array()?);
        let count = u16::from_be_bytes(r.array()?);
        let mut headers = Vec::with_capacity(count.into());
        for _ in 0..count {
            let name_len = u16::from_be_bytes(r.array()?);
            let name = std::str::from_utf8(r.take(name_len.into())?)?.to_owned();
            let value_len = u32::from_be_bytes(r.array()?);
            headers.push((name, r.take(value_len as usize)?.to_vec()));
        }
        Ok(Self { status, headers, body: r.0.to_vec() })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        self.take(N)?.try_into().map_err(|_| Malformed::Truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(
            status in 100u16..600,
            headers in prop::collection::vec(("[a-z-]{1,12}", prop::collection::vec(any::<u8>(), 0..20)), 0..6),
            body in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let response = StoredResponse { status, headers, body };
            prop_assert_eq!(StoredResponse::decode(&response.encode()).expect("decodes"), response);
        }
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let encoded = StoredResponse { status: 201, headers: vec![("a".into(), b"b".to_vec())], body: vec![] }.encode();
        for cut in 0..encoded.len() - 1 {
            assert!(StoredResponse::decode(&encoded[..cut]).is_err() || cut >= encoded.len());
        }
    }
}
