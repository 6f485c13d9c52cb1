//! Bearer JWTs, verified before a `jwt:CLAIM` scope part reads them (docs/reference/config.md#gatewayjwt).
//!
//! A claim decides whose key a request reaches, so it is read only from a token that verifies:
//! its signature against the configured key (a JWKS fetched from `jwks_url`, a PEM public key, or
//! an HS256 secret), `exp` (required) and `nbf` with 60 s of leeway, and `iss`/`aud` when they are
//! configured. The algorithm is the key's, never the token's choice: `alg: none` does not parse,
//! and a token whose `alg` is of another family than the key (an HS256 token "signed" with an RSA
//! public key's PEM bytes) is refused before any signature is computed. jsonwebtoken does the
//! parsing and the claim checks; [`ring`] the signatures.
//!
//! What a refusal says ([`JwtFailure`]) is a reason, never a token's contents: it goes into the
//! problem's detail, a metric's label and a log line.

mod jwks;
pub mod ring;

use std::sync::Arc;

use idem_core::gateway::PathPattern;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

pub use jwks::{BoxError, JwksFuture, JwksSource, MAX_AGE, RETRY_AFTER_FAILURE, UNKNOWN_KID_REFRESH};

/// The claims of a token that verified.
pub type Claims = serde_json::Map<String, serde_json::Value>;

/// How many seconds `exp` and `nbf` may be off, as the contract says.
pub const LEEWAY_SECS: u64 = 60;

/// The shortest HS256 secret taken: as long as the hash (RFC 7518 §3.2).
pub const MIN_SECRET_BYTES: usize = 32;

/// Why a configured key cannot verify tokens.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadKey {
    /// An HS256 secret shorter than [`MIN_SECRET_BYTES`].
    #[error("must be at least {} bytes (RFC 7518 §3.2)", MIN_SECRET_BYTES)]
    ShortSecret,
    #[error("holds no PEM public key (BEGIN PUBLIC KEY: RSA, P-256 or Ed25519)")]
    NoPublicKey,
}

/// Verifies bearer JWTs against one key source and the configured issuer and audience.
pub struct JwtVerifier {
    keys: Keys,
    checks: Checks,
}

/// What every token must also satisfy, whichever key signed it.
#[derive(Clone, Default)]
struct Checks {
    issuer: Option<Vec<String>>,
    audience: Option<Vec<String>>,
}

impl Checks {
    /// The validation for tokens signed with `algorithms` (one family).
    fn validation(&self, algorithms: &[Algorithm]) -> Validation {
        let mut validation = Validation::new(algorithms[0]);
        validation.algorithms = algorithms.to_vec();
        validation.leeway = LEEWAY_SECS;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        let mut required = vec!["exp"];
        if let Some(issuer) = &self.issuer {
            validation.set_issuer(issuer);
            required.push("iss");
        }
        match &self.audience {
            Some(audience) => {
                validation.set_audience(audience);
                required.push("aud");
            }
            // No audience configured: a token's `aud` is not judged (jsonwebtoken would refuse
            // every token that has one).
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        validation
    }
}

enum Keys {
    /// One key: a PEM public key or an HS256 secret.
    Fixed(Arc<VerifyKey>),
    Jwks(jwks::Jwks),
}

/// A key and the validation tokens signed with it get.
pub(crate) struct VerifyKey {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = match &self.keys {
            Keys::Fixed(key) => format!("{:?}", key.validation.algorithms),
            Keys::Jwks(_) => "jwks".to_owned(),
        };
        f.debug_struct("JwtVerifier").field("keys", &keys).finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// HS256 with a shared secret of at least [`MIN_SECRET_BYTES`].
    pub fn hs256(secret: &[u8]) -> Result<Self, BadKey> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(BadKey::ShortSecret);
        }
        Ok(Self::fixed(DecodingKey::from_secret(secret), &[Algorithm::HS256]))
    }

    /// A PEM public key: RSA (RS256), P-256 (ES256) or Ed25519 (EdDSA).
    pub fn public_key_pem(pem: &[u8]) -> Result<Self, BadKey> {
        let key = DecodingKey::from_rsa_pem(pem)
            .map(|k| (k, Algorithm::RS256))
            .or_else(|_| DecodingKey::from_ec_pem(pem).map(|k| (k, Algorithm::ES256)))
            .or_else(|_| DecodingKey::from_ed_pem(pem).map(|k| (k, Algorithm::EdDSA)));
        match key {
            Ok((key, alg)) => Ok(Self::fixed(key, &[alg])),
            Err(_) => Err(BadKey::NoPublicKey),
        }
    }

    /// Keys from a JWKS, fetched by `source` on first use, again when a token names a key it does
    /// not hold (at most once every [`jwks::UNKNOWN_KID_REFRESH`]) and once an hour; never per
    /// request.
    pub fn jwks(source: Arc<dyn JwksSource>) -> Self {
        ring::install();
        Self { keys: Keys::Jwks(jwks::Jwks::new(source)), checks: Checks::default() }
    }

    fn fixed(key: DecodingKey, algorithms: &[Algorithm]) -> Self {
        ring::install();
        let checks = Checks::default();
        let validation = checks.validation(algorithms);
        Self { keys: Keys::Fixed(Arc::new(VerifyKey { key, validation })), checks }
    }

    /// Tokens must name one of these issuers (`iss`).
    pub fn issuer(mut self, issuer: impl IntoIterator<Item = String>) -> Self {
        self.checks.issuer = Some(issuer.into_iter().collect());
        self.recheck()
    }

    /// Tokens must be meant for one of these audiences (`aud`).
    pub fn audience(mut self, audience: impl IntoIterator<Item = String>) -> Self {
        self.checks.audience = Some(audience.into_iter().collect());
        self.recheck()
    }

    fn recheck(mut self) -> Self {
        match &mut self.keys {
            Keys::Fixed(key) => {
                let validation = self.checks.validation(&key.validation.algorithms);
                *key = Arc::new(VerifyKey { key: key.key.clone(), validation });
            }
            Keys::Jwks(jwks) => jwks.checks = self.checks.clone(),
        }
        self
    }

    /// The claims of `token` once it verifies.
    pub async fn verify(&self, token: &str) -> Result<Claims, JwtFailure> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| header_failure(token, e.kind()))?;
        let key = match &self.keys {
            Keys::Fixed(key) => Arc::clone(key),
            Keys::Jwks(jwks) => jwks.key_for(header.kid.as_deref(), header.alg).await?,
        };
        jsonwebtoken::decode::<Claims>(token, &key.key, &key.validation)
            .map(|data| data.claims)
            .map_err(|e| failure(e.kind()))
    }
}

/// Why a token was refused: a reason, never its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtFailure {
    /// Not a JWT (three base64url parts, JSON header and claims).
    Malformed,
    /// `alg: none`, an algorithm of another family than the key, or one not taken.
    WrongAlgorithm,
    BadSignature,
    Expired,
    NotYetValid,
    WrongIssuer,
    WrongAudience,
    /// `exp` (or a configured `iss`/`aud`) is missing or not of its type.
    MissingClaim,
    /// Its `kid` is in no key of the JWKS, even after fetching it again.
    UnknownKey,
    /// The JWKS could not be fetched and no copy of it is at hand: not the caller's fault (503).
    KeysUnavailable,
}

/// Every reason as the `reason` label of `idem_gateway_jwt_failures_total`; all of them are
/// present at zero from start-up.
impl idem_metrics::Label for JwtFailure {
    const ALL: &'static [JwtFailure] = &[
        JwtFailure::Malformed,
        JwtFailure::WrongAlgorithm,
        JwtFailure::BadSignature,
        JwtFailure::Expired,
        JwtFailure::NotYetValid,
        JwtFailure::WrongIssuer,
        JwtFailure::WrongAudience,
        JwtFailure::MissingClaim,
        JwtFailure::UnknownKey,
        JwtFailure::KeysUnavailable,
    ];

    fn label(self) -> &'static str {
        match self {
            JwtFailure::Malformed => "malformed",
            JwtFailure::WrongAlgorithm => "wrong_algorithm",
            JwtFailure::BadSignature => "bad_signature",
            JwtFailure::Expired => "expired",
            JwtFailure::NotYetValid => "not_yet_valid",
            JwtFailure::WrongIssuer => "wrong_issuer",
            JwtFailure::WrongAudience => "wrong_audience",
            JwtFailure::MissingClaim => "missing_claim",
            JwtFailure::UnknownKey => "unknown_key",
            JwtFailure::KeysUnavailable => "keys_unavailable",
        }
    }
}

impl JwtFailure {
    /// The reason in words, for the problem's detail.
    pub fn describe(self) -> &'static str {
        match self {
            JwtFailure::Malformed => "not a JWT",
            JwtFailure::WrongAlgorithm => "its algorithm is not the key's",
            JwtFailure::BadSignature => "bad signature",
            JwtFailure::Expired => "expired",
            JwtFailure::NotYetValid => "not valid yet",
            JwtFailure::WrongIssuer => "wrong issuer",
            JwtFailure::WrongAudience => "wrong audience",
            JwtFailure::MissingClaim => "a required claim (exp, iss or aud) is missing or malformed",
            JwtFailure::UnknownKey => "signed with a key the JWKS does not hold",
            JwtFailure::KeysUnavailable => "the JWKS could not be fetched",
        }
    }

    /// Counts this failure on the route whose path is `route`.
    pub(crate) fn count(self, route: &PathPattern) {
        idem_metrics::gateway::jwt_failure(route.shared(), self);
    }
}

fn failure(kind: &ErrorKind) -> JwtFailure {
    match kind {
        ErrorKind::InvalidSignature => JwtFailure::BadSignature,
        ErrorKind::ExpiredSignature => JwtFailure::Expired,
        ErrorKind::ImmatureSignature => JwtFailure::NotYetValid,
        ErrorKind::InvalidIssuer => JwtFailure::WrongIssuer,
        ErrorKind::InvalidAudience => JwtFailure::WrongAudience,
        ErrorKind::MissingRequiredClaim(_) | ErrorKind::InvalidClaimFormat(_) => JwtFailure::MissingClaim,
        ErrorKind::InvalidAlgorithm
        | ErrorKind::InvalidAlgorithmName
        | ErrorKind::MissingAlgorithm
        | ErrorKind::UnsupportedAlgorithm
        | ErrorKind::InvalidKeyFormat => JwtFailure::WrongAlgorithm,
        _ => JwtFailure::Malformed,
    }
}

/// A header that does not parse: `alg: none` (or any algorithm jsonwebtoken does not know) is a
/// wrong algorithm, anything else malformed.
fn header_failure(token: &str, kind: &ErrorKind) -> JwtFailure {
    use base64::Engine;
    let unknown_alg = || -> Option<bool> {
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token.split('.').next()?).ok()?;
        let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
        Some(header.get("alg")?.as_str()?.parse::<Algorithm>().is_err())
    };
    match kind {
        ErrorKind::Json(_) if unknown_alg() == Some(true) => JwtFailure::WrongAlgorithm,
        other => failure(other),
    }
}

#[cfg(test)]
mod tests;
