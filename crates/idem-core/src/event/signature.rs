//! Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`,
//! several space-separated in one header during secret rotation; secrets are `whsec_` + base64 of
//! 24 to 64 random bytes. Verification is constant-time (`Mac::verify_slice`) and rejects
//! timestamps more than the tolerance away from now.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// A signing secret's key bytes. `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret(Vec<u8>);

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret([redacted])")
    }
}

/// Config files hold a secret as its `whsec_…` text; it is parsed on load and printed redacted.
impl<'de> serde::Deserialize<'de> for SigningSecret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for SigningSecret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("[redacted]")
    }
}

impl SigningSecret {
    /// Parses `whsec_<base64>`; the error never repeats the secret.
    pub fn parse(text: &str) -> Result<Self, String> {
        let encoded = text.strip_prefix("whsec_").ok_or("a signing secret must start with whsec_")?;
        let key = STANDARD.decode(encoded).map_err(|_| "a signing secret must be whsec_ followed by base64")?;
        if !(24..=64).contains(&key.len()) {
            return Err(format!("a signing secret must hold 24 to 64 bytes, not {}", key.len()));
        }
        Ok(Self(key))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC accepts keys of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

/// The `webhook-signature` value for a message.
pub fn sign(secret: &SigningSecret, id: &str, timestamp: i64, body: &[u8]) -> String {
    format!("v1,{}", STANDARD.encode(secret.mac(id, timestamp, body).finalize().into_bytes()))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("webhook-id, webhook-timestamp and webhook-signature headers are required")]
    Missing,
    #[error("webhook-timestamp is not a Unix time in seconds")]
    BadTimestamp,
    #[error("webhook-timestamp is too far from the current time")]
    Stale,
    #[error("no signature in webhook-signature matches")]
    NoMatch,
}

/// Checks a message against every `v1,` signature in `header`.
pub fn verify(
    secret: &SigningSecret,
    id: &str,
    timestamp: &str,
    header: &str,
    body: &[u8],
    now_secs: i64,
    tolerance_secs: i64,
) -> Result<(), SignatureError> {
    let ts: i64 = timestamp.trim().parse().map_err(|_| SignatureError::BadTimestamp)?;
    if (now_secs - ts).abs() > tolerance_secs {
        return Err(SignatureError::Stale);
    }
    let matches = header
        .split(' ')
        .filter_map(|sig| sig.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .any(|raw| secret.mac(id, ts, body).verify_slice(&raw).is_ok());
    if matches { Ok(()) } else { Err(SignatureError::NoMatch) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn matches_the_specification_example() {
        let secret = SigningSecret::parse(SECRET).expect("valid secret");
        assert_eq!(sign(&secret, ID, TS, BODY), SIGNATURE);
        assert_eq!(verify(&secret, ID, &TS.to_string(), SIGNATURE, BODY, TS, 300), Ok(()));
    }

    #[test]
    fn accepts_any_of_several_signatures_and_rejects_tampering() {
        let secret = SigningSecret::parse(SECRET).expect("valid secret");
        let rotated = format!("v1,bm90LWEtc2lnbmF0dXJl {SIGNATURE}");
        assert_eq!(verify(&secret, ID, &TS.to_string(), &rotated, BODY, TS, 300), Ok(()));
        let err = |header: &str, body: &[u8], now: i64| verify(&secret, ID, &TS.to_string(), header, body, now, 300);
        assert_eq!(err(SIGNATURE, br#"{"test": 2432232315}"#, TS), Err(SignatureError::NoMatch));
        assert_eq!(err("v1,AAAA", BODY, TS), Err(SignatureError::NoMatch));
        assert_eq!(err(SIGNATURE, BODY, TS + 301), Err(SignatureError::Stale));
        assert_eq!(err(SIGNATURE, BODY, TS - 301), Err(SignatureError::Stale));
        assert_eq!(verify(&secret, ID, "soon", SIGNATURE, BODY, TS, 300), Err(SignatureError::BadTimestamp));
    }

    #[test]
    fn secrets_are_checked_and_never_printed() {
        assert!(SigningSecret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(SigningSecret::parse("whsec_c2hvcnQ=").is_err(), "5 bytes is too short");
        assert!(SigningSecret::parse("whsec_!!!").is_err());
        assert!(!format!("{:?}", SigningSecret::parse(SECRET).expect("valid")).contains("MfKQ"));
    }
}
