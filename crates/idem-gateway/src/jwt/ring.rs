//! jsonwebtoken's cryptography on `ring`, the library rustls already builds into idem: the crate's
//! own backends are aws-lc-rs (cmake, minutes of C to compile here) or RustCrypto (RSA, P-256,
//! P-384 and Ed25519 crates idem would build only for this). jsonwebtoken parses, checks the
//! algorithm against the key's family and validates the claims; this file only computes and checks
//! signatures.
//!
//! The invariant that keeps algorithm confusion out: a key serves only its own family
//! ([`family_of`]): an RSA public key never becomes an HMAC secret, whatever the token's header
//! says.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind, Result};
use jsonwebtoken::jwk::{EllipticCurve, ThumbprintHash};
use jsonwebtoken::signature::{self, Signer, Verifier};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::rand::SystemRandom;
use ring::signature::{self as ring_sig, KeyPair, RsaEncoding, UnparsedPublicKey, VerificationAlgorithm};
use ring::{digest, hmac};

/// The provider, installed for the process by [`install`].
pub static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: new_signer,
    verifier_factory: new_verifier,
    key_utils: KeyUtils {
        rsa_pub_components_from_private_key: rsa_components,
        rsa_pub_components_from_public_key: |_| Err(ErrorKind::InvalidRsaKey("not supported".into()).into()),
        ec_pub_components_from_private_key: ec_components,
        ed_pub_components_from_private_key: ed_component,
        compute_digest,
    },
};

/// Makes [`PROVIDER`] jsonwebtoken's for this process, unless another was installed first (an
/// application that embeds the tower layer may have chosen its own; it verifies just as well).
pub fn install() {
    let _ = PROVIDER.install_default();
}

fn family_of(alg: Algorithm) -> AlgorithmFamily {
    alg.family()
}

struct RingVerifier {
    alg: Algorithm,
    key: Check,
}

enum Check {
    Hmac(hmac::Key),
    Public(&'static dyn VerificationAlgorithm, Vec<u8>),
    RsaParts(&'static ring_sig::RsaParameters, Vec<u8>, Vec<u8>),
}

fn hmac_algorithm(alg: Algorithm) -> Option<hmac::Algorithm> {
    match alg {
        Algorithm::HS256 => Some(hmac::HMAC_SHA256),
        Algorithm::HS384 => Some(hmac::HMAC_SHA384),
        Algorithm::HS512 => Some(hmac::HMAC_SHA512),
        _ => None,
    }
}

fn rsa_parameters(alg: Algorithm) -> Option<&'static ring_sig::RsaParameters> {
    Some(match alg {
        Algorithm::RS256 => &ring_sig::RSA_PKCS1_2048_8192_SHA256,
        Algorithm::RS384 => &ring_sig::RSA_PKCS1_2048_8192_SHA384,
        Algorithm::RS512 => &ring_sig::RSA_PKCS1_2048_8192_SHA512,
        Algorithm::PS256 => &ring_sig::RSA_PSS_2048_8192_SHA256,
        Algorithm::PS384 => &ring_sig::RSA_PSS_2048_8192_SHA384,
        Algorithm::PS512 => &ring_sig::RSA_PSS_2048_8192_SHA512,
        _ => return None,
    })
}

fn public_algorithm(alg: Algorithm) -> Option<&'static dyn VerificationAlgorithm> {
    Some(match alg {
        Algorithm::ES256 => &ring_sig::ECDSA_P256_SHA256_FIXED,
        Algorithm::ES384 => &ring_sig::ECDSA_P384_SHA384_FIXED,
        Algorithm::EdDSA => &ring_sig::ED25519,
        other => return rsa_parameters(other).map(|p| p as &'static dyn VerificationAlgorithm),
    })
}

fn new_verifier(alg: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>> {
    let alg = *alg;
    if key.family() != family_of(alg) {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    let check = match (key.kind(), hmac_algorithm(alg), public_algorithm(alg)) {
        (DecodingKeyKind::SecretOrDer(secret), Some(hmac), _) => Check::Hmac(hmac::Key::new(hmac, secret)),
        (DecodingKeyKind::SecretOrDer(der), None, Some(public)) => Check::Public(public, der.clone()),
        (DecodingKeyKind::RsaModulusExponent { n, e }, None, _) => {
            let params = rsa_parameters(alg).ok_or(ErrorKind::InvalidAlgorithm)?;
            Check::RsaParts(params, n.clone(), e.clone())
        }
        _ => return Err(ErrorKind::InvalidKeyFormat.into()),
    };
    Ok(Box::new(RingVerifier { alg, key: check }))
}

impl Verifier<Vec<u8>> for RingVerifier {
    fn verify(&self, message: &[u8], signature: &Vec<u8>) -> std::result::Result<(), signature::Error> {
        let checked = match &self.key {
            Check::Hmac(key) => hmac::verify(key, message, signature),
            Check::Public(alg, der) => UnparsedPublicKey::new(*alg, der).verify(message, signature),
            Check::RsaParts(params, n, e) => {
                ring_sig::RsaPublicKeyComponents { n, e }.verify(params, message, signature)
            }
        };
        checked.map_err(|_| signature::Error::new())
    }
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

struct RingSigner {
    alg: Algorithm,
    key: Sign,
}

enum Sign {
    Hmac(hmac::Key),
    Rsa(ring_sig::RsaKeyPair, &'static dyn RsaEncoding),
    Ecdsa(ring_sig::EcdsaKeyPair),
    Ed(ring_sig::Ed25519KeyPair),
}

fn rsa_key_pair(der: &[u8]) -> Result<ring_sig::RsaKeyPair> {
    ring_sig::RsaKeyPair::from_der(der)
        .or_else(|_| ring_sig::RsaKeyPair::from_pkcs8(der))
        .map_err(|e| ErrorKind::InvalidRsaKey(e.to_string()).into())
}

fn new_signer(alg: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>> {
    let alg = *alg;
    if key.family() != family_of(alg) {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    let der = key.as_bytes();
    let sign = match alg {
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
            Sign::Hmac(hmac::Key::new(hmac_algorithm(alg).ok_or(ErrorKind::InvalidAlgorithm)?, der))
        }
        Algorithm::RS256 => Sign::Rsa(rsa_key_pair(der)?, &ring_sig::RSA_PKCS1_SHA256),
        Algorithm::RS384 => Sign::Rsa(rsa_key_pair(der)?, &ring_sig::RSA_PKCS1_SHA384),
        Algorithm::RS512 => Sign::Rsa(rsa_key_pair(der)?, &ring_sig::RSA_PKCS1_SHA512),
        Algorithm::PS256 => Sign::Rsa(rsa_key_pair(der)?, &ring_sig::RSA_PSS_SHA256),
        Algorithm::PS384 => Sign::Rsa(rsa_key_pair(der)?, &ring_sig::RSA_PSS_SHA384),
        Algorithm::PS512 => Sign::Rsa(rsa_key_pair(der)?, &ring_sig::RSA_PSS_SHA512),
        Algorithm::ES256 | Algorithm::ES384 => {
            let curve = match alg {
                Algorithm::ES256 => &ring_sig::ECDSA_P256_SHA256_FIXED_SIGNING,
                _ => &ring_sig::ECDSA_P384_SHA384_FIXED_SIGNING,
            };
            let pair = ring_sig::EcdsaKeyPair::from_pkcs8(curve, der, &SystemRandom::new())
                .map_err(|_| ErrorKind::InvalidEcdsaKey)?;
            Sign::Ecdsa(pair)
        }
        Algorithm::EdDSA => {
            Sign::Ed(ring_sig::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der).map_err(|_| ErrorKind::InvalidEddsaKey)?)
        }
        _ => return Err(ErrorKind::UnsupportedAlgorithm.into()),
    };
    Ok(Box::new(RingSigner { alg, key: sign }))
}

impl Signer<Vec<u8>> for RingSigner {
    fn try_sign(&self, message: &[u8]) -> std::result::Result<Vec<u8>, signature::Error> {
        let failed = |_| signature::Error::new();
        match &self.key {
            Sign::Hmac(key) => Ok(hmac::sign(key, message).as_ref().to_vec()),
            Sign::Rsa(pair, padding) => {
                let mut out = vec![0; pair.public().modulus_len()];
                pair.sign(*padding, &SystemRandom::new(), message, &mut out).map_err(failed)?;
                Ok(out)
            }
            Sign::Ecdsa(pair) => Ok(pair.sign(&SystemRandom::new(), message).map_err(failed)?.as_ref().to_vec()),
            Sign::Ed(pair) => Ok(pair.sign(message).as_ref().to_vec()),
        }
    }
}

impl JwtSigner for RingSigner {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

fn rsa_components(private_der: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    let pair = rsa_key_pair(private_der)?;
    let parts = ring_sig::RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
    Ok((parts.n, parts.e))
}

fn ec_components(private_der: &[u8], alg: Algorithm) -> Result<(EllipticCurve, Vec<u8>, Vec<u8>)> {
    let (curve, signing, half) = match alg {
        Algorithm::ES256 => (EllipticCurve::P256, &ring_sig::ECDSA_P256_SHA256_FIXED_SIGNING, 32),
        Algorithm::ES384 => (EllipticCurve::P384, &ring_sig::ECDSA_P384_SHA384_FIXED_SIGNING, 48),
        _ => return Err(ErrorKind::InvalidEcdsaKey.into()),
    };
    let pair = ring_sig::EcdsaKeyPair::from_pkcs8(signing, private_der, &SystemRandom::new())
        .map_err(|_| Error::from(ErrorKind::InvalidEcdsaKey))?;
    // The public key is the uncompressed point: 0x04, x, y.
    let point = pair.public_key().as_ref();
    let (x, y) = point.get(1..).ok_or(ErrorKind::InvalidEcdsaKey)?.split_at(half);
    Ok((curve, x.to_vec(), y.to_vec()))
}

fn ed_component(private_der: &[u8], curve: &EllipticCurve) -> Result<Vec<u8>> {
    if *curve != EllipticCurve::Ed25519 {
        return Err(ErrorKind::InvalidEddsaKey.into());
    }
    let pair =
        ring_sig::Ed25519KeyPair::from_pkcs8_maybe_unchecked(private_der).map_err(|_| ErrorKind::InvalidEddsaKey)?;
    Ok(pair.public_key().as_ref().to_vec())
}

fn compute_digest(data: &[u8], hash: ThumbprintHash) -> Result<Vec<u8>> {
    let algorithm = match hash {
        ThumbprintHash::SHA256 => &digest::SHA256,
        ThumbprintHash::SHA384 => &digest::SHA384,
        ThumbprintHash::SHA512 => &digest::SHA512,
        _ => return Err(ErrorKind::UnsupportedAlgorithm.into()),
    };
    Ok(digest::digest(algorithm, data).as_ref().to_vec())
}
