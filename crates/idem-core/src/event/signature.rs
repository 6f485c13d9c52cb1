//! Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`,
//! several space-separated in one header during secret rotation; secrets are `whsec_` + base64 of
//! 24 to 64 random bytes. Verification is constant-time (`Mac::verify_slice`) and rejects
//! timestamps more than the tolerance away from now.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Why a signing secret, or a set of them, is refused. Never repeats a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadSecret {
    #[error("a signing secret must start with whsec_")]
    Prefix,
    #[error("a signing secret must be whsec_ followed by base64")]
    NotBase64,
    /// The key's length in bytes, outside 24 to 64.
    #[error("a signing secret must hold 24 to 64 bytes, not {0}")]
    Length(usize),
    #[error("give at least one secret")]
    NoSecret,
    /// More than [`SigningSecrets::MAX`] at once.
    #[error("at most {max} secrets at once (rotation needs two), not {given}", max = SigningSecrets::MAX)]
    TooMany { given: usize },
}

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
    pub fn parse(text: &str) -> Result<Self, BadSecret> {
        let encoded = text.strip_prefix("whsec_").ok_or(BadSecret::Prefix)?;
        let key = STANDARD.decode(encoded).map_err(|_| BadSecret::NotBase64)?;
        if !(24..=64).contains(&key.len()) {
            return Err(BadSecret::Length(key.len()));
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

/// The secrets of one side of a source, for rotating them without a failed message: `"whsec_…"` or
/// `["whsec_new…", "whsec_old…"]` in a config file, at most [`SigningSecrets::MAX`]. Messages are
/// signed with every one (one `v1,` signature each, the header's space-separated form, so a receiver
/// that knows either accepts them), and a message signed with any one of them is accepted.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecrets(Vec<SigningSecret>);

impl std::fmt::Debug for SigningSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningSecrets([{} redacted])", self.0.len())
    }
}

impl SigningSecrets {
    /// More would only be forgotten old ones: each one costs every message an HMAC.
    pub const MAX: usize = 4;

    pub fn new(secrets: Vec<SigningSecret>) -> Result<Self, BadSecret> {
        match secrets.len() {
            0 => Err(BadSecret::NoSecret),
            given if given > Self::MAX => Err(BadSecret::TooMany { given }),
            _ => Ok(Self(secrets)),
        }
    }

    pub fn one(secret: SigningSecret) -> Self {
        Self(vec![secret])
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `webhook-signature` value: one signature per secret, space-separated.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        self.0.iter().map(|secret| sign(secret, id, timestamp, body)).collect::<Vec<_>>().join(" ")
    }

    /// Checks a message as [`verify`] does, accepting a signature made with any of these secrets.
    pub fn verify(
        &self,
        id: &str,
        timestamp: &str,
        header: &str,
        body: &[u8],
        now_secs: i64,
        tolerance_secs: i64,
    ) -> Result<(), SignatureError> {
        verify_any(&self.0, id, timestamp, header, body, now_secs, tolerance_secs)
    }
}

impl<'de> serde::Deserialize<'de> for SigningSecrets {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct OneOrMany;
        impl<'de> serde::de::Visitor<'de> for OneOrMany {
            type Value = SigningSecrets;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a secret \"whsec_…\", or a list of them while rotating")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
                SigningSecret::parse(text).map(SigningSecrets::one).map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut secrets = Vec::new();
                while let Some(secret) = seq.next_element::<SigningSecret>()? {
                    secrets.push(secret);
                }
                SigningSecrets::new(secrets).map_err(serde::de::Error::custom)
            }
        }
        d.deserialize_any(OneOrMany)
    }
}

impl serde::Serialize for SigningSecrets {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => one.serialize(s),
            many => s.collect_seq(many),
        }
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
    verify_any(std::slice::from_ref(secret), id, timestamp, header, body, now_secs, tolerance_secs)
}

/// The one check behind [`verify`] and [`SigningSecrets::verify`]: the timestamp read and the
/// header's signatures decoded once, then each secret's MAC compared (in constant time) with each.
fn verify_any(
    secrets: &[SigningSecret],
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
    let signatures: Vec<Vec<u8>> = header
        .split(' ')
        .filter_map(|sig| sig.strip_prefix("v1,"))
        .filter_map(|b64| STANDARD.decode(b64).ok())
        .collect();
    let matches = secrets.iter().any(|secret| {
        let mac = secret.mac(id, ts, body);
        signatures.iter().any(|raw| mac.clone().verify_slice(raw).is_ok())
    });
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
    fn rotating_secrets_sign_with_each_and_accept_either() {
        let old = SigningSecret::parse(SECRET).expect("valid secret");
        let new = SigningSecret::parse("whsec_bmV3LXNlY3JldC1mb3Itcm90YXRpb24tMDEyMzQ1").expect("valid secret");
        let both = SigningSecrets::new(vec![new.clone(), old.clone()]).expect("two");
        let header = both.sign(ID, TS, BODY);
        assert_eq!(header, format!("{} {SIGNATURE}", sign(&new, ID, TS, BODY)), "new first, then the old one");
        let ts = TS.to_string();
        for alone in [&old, &new] {
            assert!(verify(alone, ID, &ts, &header, BODY, TS, 300).is_ok(), "a receiver with either accepts");
            let by_one = sign(alone, ID, TS, BODY);
            assert!(both.verify(ID, &ts, &by_one, BODY, TS, 300).is_ok(), "a sender with either is accepted");
        }
        let other = SigningSecret::parse("whsec_b3RoZXItc2VjcmV0LW5vdC1yb3RhdGVkLTAxMjM0").expect("valid secret");
        assert_eq!(both.verify(ID, &ts, &sign(&other, ID, TS, BODY), BODY, TS, 300), Err(SignatureError::NoMatch));
        assert_eq!(both.verify(ID, &ts, &header, BODY, TS + 301, 300), Err(SignatureError::Stale));
        assert!(SigningSecrets::new(Vec::new()).is_err() && SigningSecrets::new(vec![old.clone(); 5]).is_err());
        assert!(!format!("{both:?}").contains("MfKQ"), "{both:?}");
    }

    #[test]
    fn secrets_are_checked_and_never_printed() {
        assert!(SigningSecret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(SigningSecret::parse("whsec_c2hvcnQ=").is_err(), "5 bytes is too short");
        assert!(SigningSecret::parse("whsec_!!!").is_err());
        assert!(!format!("{:?}", SigningSecret::parse(SECRET).expect("valid")).contains("MfKQ"));
    }
}
