//! A JWKS (`[gateway.jwt] jwks_url`): the identity provider's public keys, kept in memory and
//! fetched again only when there is a reason, never per request:
//!
//! - on first use;
//! - when a token names a `kid` the set does not hold (the provider rotated its keys), at most once
//!   every [`UNKNOWN_KID_REFRESH`], so that tokens with made-up `kid`s cannot make idem hammer the
//!   provider;
//! - when the set is older than [`MAX_AGE`] (a key the provider withdrew stops verifying).
//!
//! One fetch at a time: requests that need the same fetch wait for it and share its keys. A fetch
//! that fails keeps the keys at hand, and is not tried again for [`RETRY_AFTER_FAILURE`]. Only
//! signing keys of public-key families are taken: an `oct` (shared-secret) key in a JWKS would let
//! anyone who can read the set sign tokens.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use idem_metrics::gateway::JwksFetch;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};

use super::{Checks, JwtFailure, VerifyKey};

/// How often, at most, a token with an unknown `kid` makes the set be fetched again.
pub const UNKNOWN_KID_REFRESH: Duration = Duration::from_secs(30);
/// How long a fetched set is used before it is fetched again (on the next token).
pub const MAX_AGE: Duration = Duration::from_secs(3600);
/// How long after a failed fetch the next one is tried (the keys at hand serve meanwhile).
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(10);

/// Why a [`JwksSource`] could not fetch: its own error, logged as it displays.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub type JwksFuture<'a> = Pin<Box<dyn Future<Output = Result<Bytes, BoxError>> + Send + 'a>>;

/// Why a fetch brought no keys.
#[derive(Debug, thiserror::Error)]
enum FetchFailed {
    #[error("{0}")]
    Source(BoxError),
    #[error("not a JWKS: {0}")]
    NotJwks(#[source] serde_json::Error),
    #[error("the JWKS holds no signing key idem can use (RSA, P-256, P-384 or Ed25519)")]
    NoUsableKey,
}

/// Fetches the JWKS document: the server's does it over its outbound HTTPS client (the system's
/// roots and `[tls] ca_file`); an application using the tower layer brings its own.
pub trait JwksSource: Send + Sync {
    fn fetch(&self) -> JwksFuture<'_>;
}

pub(super) struct Jwks {
    source: Arc<dyn JwksSource>,
    pub(super) checks: Checks,
    current: RwLock<Option<Arc<KeySet>>>,
    refresh: tokio::sync::Mutex<Refresh>,
}

struct KeySet {
    generation: u64,
    fetched: Instant,
    keys: Vec<(Option<String>, Arc<VerifyKey>)>,
}

#[derive(Default)]
struct Refresh {
    generation: u64,
    last_unknown_kid: Option<Instant>,
    last_failure: Option<Instant>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Why {
    /// None at hand yet, or too old.
    Stale,
    UnknownKid,
}

impl KeySet {
    /// The key a token names; one without a `kid` takes the only key of its algorithm.
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<Arc<VerifyKey>> {
        match kid {
            Some(kid) => self.keys.iter().find(|(k, _)| k.as_deref() == Some(kid)).map(|(_, key)| Arc::clone(key)),
            None => {
                let mut fitting = self.keys.iter().filter(|(_, key)| key.validation.algorithms.contains(&alg));
                match (fitting.next(), fitting.next()) {
                    (Some((_, key)), None) => Some(Arc::clone(key)),
                    _ => None,
                }
            }
        }
    }
}

impl Jwks {
    pub(super) fn new(source: Arc<dyn JwksSource>) -> Self {
        Self { source, checks: Checks::default(), current: RwLock::new(None), refresh: Default::default() }
    }

    fn current(&self) -> Option<Arc<KeySet>> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The key that verifies a token with this `kid` and `alg`, fetching the set when needed.
    pub(super) async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<Arc<VerifyKey>, JwtFailure> {
        let set = match self.current() {
            Some(set) if set.fetched.elapsed() < MAX_AGE => set,
            held => match self.refresh(held.as_ref().map(|s| s.generation), Why::Stale).await {
                Ok(set) => set,
                Err(failure) => held.ok_or(failure)?,
            },
        };
        if let Some(key) = set.find(kid, alg) {
            return Ok(key);
        }
        let set = self.refresh(Some(set.generation), Why::UnknownKid).await?;
        set.find(kid, alg).ok_or(JwtFailure::UnknownKey)
    }

    /// Fetches the set, unless another request did while this one waited (its keys are taken),
    /// or the last fetch for the same reason was too recent (the keys at hand are).
    async fn refresh(&self, seen: Option<u64>, why: Why) -> Result<Arc<KeySet>, JwtFailure> {
        let mut state = self.refresh.lock().await;
        let current = self.current();
        if let Some(set) = &current
            && Some(set.generation) != seen
        {
            return Ok(Arc::clone(set));
        }
        let (last, gap) = match why {
            Why::Stale => (state.last_failure, RETRY_AFTER_FAILURE),
            Why::UnknownKid => (state.last_unknown_kid, UNKNOWN_KID_REFRESH),
        };
        if last.is_some_and(|at| at.elapsed() < gap) {
            return current.ok_or(JwtFailure::KeysUnavailable);
        }
        let now = Instant::now();
        if why == Why::UnknownKid {
            state.last_unknown_kid = Some(now);
        }
        match self.fetch().await {
            Ok(keys) => {
                idem_metrics::gateway::jwks_fetched(JwksFetch::Fetched);
                state.generation += 1;
                state.last_failure = None;
                let set = Arc::new(KeySet { generation: state.generation, fetched: now, keys });
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&set));
                Ok(set)
            }
            Err(e) => {
                idem_metrics::gateway::jwks_fetched(JwksFetch::Failed);
                tracing::warn!(error = %e, "the JWKS could not be fetched; the keys at hand (if any) stay in use");
                state.last_failure = Some(now);
                Err(JwtFailure::KeysUnavailable)
            }
        }
    }

    async fn fetch(&self) -> Result<Vec<(Option<String>, Arc<VerifyKey>)>, FetchFailed> {
        let body = self.source.fetch().await.map_err(FetchFailed::Source)?;
        let set: JwkSet = serde_json::from_slice(&body).map_err(FetchFailed::NotJwks)?;
        let keys: Vec<_> = set.keys.iter().filter_map(|jwk| self.key(jwk)).collect();
        if keys.is_empty() {
            return Err(FetchFailed::NoUsableKey);
        }
        Ok(keys)
    }

    /// A signing key of the set, with the algorithms it verifies: its `alg`, or its family's.
    fn key(&self, jwk: &Jwk) -> Option<(Option<String>, Arc<VerifyKey>)> {
        if jwk.common.public_key_use == Some(PublicKeyUse::Encryption) {
            return None;
        }
        let family: &[Algorithm] = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => AlgorithmFamily::Rsa.algorithms(),
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => &[Algorithm::ES256],
            AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P384 => &[Algorithm::ES384],
            AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => &[Algorithm::EdDSA],
            _ => return None,
        };
        let algorithms = match jwk.common.key_algorithm {
            Some(alg) => vec![Algorithm::try_from(alg).ok().filter(|a| family.contains(a))?],
            None => family.to_vec(),
        };
        let key = DecodingKey::from_jwk(jwk).ok()?;
        let validation = self.checks.validation(&algorithms);
        Some((jwk.common.key_id.clone(), Arc::new(VerifyKey { key, validation })))
    }
}
