use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{EncodingKey, Header, encode, get_current_timestamp};
use serde_json::{Value, json};

use super::*;

const RSA_PRIVATE: &str = include_str!("../../testdata/jwt/rsa-private.pem");
const RSA_PUBLIC: &str = include_str!("../../testdata/jwt/rsa-public.pem");
const RSA2_PRIVATE: &str = include_str!("../../testdata/jwt/rsa2-private.pem");
const EC_PRIVATE: &str = include_str!("../../testdata/jwt/ec-private.pem");
const EC_PUBLIC: &str = include_str!("../../testdata/jwt/ec-public.pem");
const ED_PRIVATE: &str = include_str!("../../testdata/jwt/ed-private.pem");
const ED_PUBLIC: &str = include_str!("../../testdata/jwt/ed-public.pem");
const SECRET: &[u8] = b"an-hs256-secret-of-at-least-32-bytes!";

fn claims(sub: &str, exp_from_now: i64) -> Value {
    let exp = get_current_timestamp() as i64 + exp_from_now;
    json!({"sub": sub, "exp": exp, "iss": "https://login.example", "aud": "orders"})
}

fn sign(alg: Algorithm, key: &EncodingKey, kid: Option<&str>, claims: &Value) -> String {
    ring::install();
    let header = Header { kid: kid.map(str::to_owned), ..Header::new(alg) };
    encode(&header, claims, key).expect("signs")
}

fn rsa() -> EncodingKey {
    EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).expect("rsa key")
}

async fn sub_of(verifier: &JwtVerifier, token: &str) -> Result<String, JwtFailure> {
    verifier.verify(token).await.map(|c| c["sub"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn each_kind_of_key_verifies_its_own_tokens() {
    let hs = JwtVerifier::hs256(SECRET).expect("secret");
    let token = sign(Algorithm::HS256, &EncodingKey::from_secret(SECRET), None, &claims("alice", 600));
    assert_eq!(sub_of(&hs, &token).await, Ok("alice".into()));
    let cases = [
        (RSA_PUBLIC, Algorithm::RS256, rsa()),
        (EC_PUBLIC, Algorithm::ES256, EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()).expect("ec key")),
        (ED_PUBLIC, Algorithm::EdDSA, EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()).expect("ed key")),
    ];
    for (public, alg, private) in cases {
        let verifier = JwtVerifier::public_key_pem(public.as_bytes()).expect("public key");
        assert_eq!(
            sub_of(&verifier, &sign(alg, &private, None, &claims("bob", 600))).await,
            Ok("bob".into()),
            "{alg:?}"
        );
        let forged = tamper(&sign(alg, &private, None, &claims("bob", 600)));
        assert_eq!(sub_of(&verifier, &forged).await, Err(JwtFailure::BadSignature), "{alg:?}: a changed claim");
    }
    assert!(JwtVerifier::public_key_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err());
    assert!(JwtVerifier::hs256(b"short").is_err(), "an HS256 secret shorter than the hash is refused");
}

#[tokio::test]
async fn bad_tokens_are_refused_with_their_reason() {
    let verifier = JwtVerifier::hs256(SECRET)
        .expect("secret")
        .issuer(["https://login.example".to_owned()])
        .audience(["orders".to_owned()]);
    let key = EncodingKey::from_secret(SECRET);
    let hs = |claims: &Value| sign(Algorithm::HS256, &key, None, claims);
    assert_eq!(sub_of(&verifier, &hs(&claims("a", 600))).await, Ok("a".into()));
    assert_eq!(sub_of(&verifier, &hs(&claims("a", -30))).await, Ok("a".into()), "60 s of leeway");
    assert_eq!(sub_of(&verifier, &hs(&claims("a", -120))).await, Err(JwtFailure::Expired));
    let early = json!({"sub": "a", "exp": get_current_timestamp() + 900, "nbf": get_current_timestamp() + 600, "iss": "https://login.example", "aud": "orders"});
    assert_eq!(sub_of(&verifier, &hs(&early)).await, Err(JwtFailure::NotYetValid));
    let mut other = claims("a", 600);
    other["iss"] = json!("https://evil.example");
    assert_eq!(sub_of(&verifier, &hs(&other)).await, Err(JwtFailure::WrongIssuer));
    let mut other = claims("a", 600);
    other["aud"] = json!("payments");
    assert_eq!(sub_of(&verifier, &hs(&other)).await, Err(JwtFailure::WrongAudience));
    assert_eq!(sub_of(&verifier, &hs(&json!({"sub": "a"}))).await, Err(JwtFailure::MissingClaim), "exp is required");
    let wrong_key = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(b"another-secret-of-32-bytes-or-more!!"),
        None,
        &claims("a", 600),
    );
    assert_eq!(sub_of(&verifier, &wrong_key).await, Err(JwtFailure::BadSignature));
    assert_eq!(sub_of(&verifier, "not-a-jwt").await, Err(JwtFailure::Malformed));
    assert_eq!(sub_of(&verifier, &unsigned(&claims("a", 600))).await, Err(JwtFailure::WrongAlgorithm), "alg: none");
}

/// The token with its `sub` changed to "eve", its signature kept.
fn tamper(token: &str) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let parts: Vec<&str> = token.split('.').collect();
    let mut claims: Value = serde_json::from_slice(&b64.decode(parts[1]).expect("base64")).expect("json");
    claims["sub"] = json!("eve");
    format!("{}.{}.{}", parts[0], b64.encode(claims.to_string()), parts[2])
}

/// A token with `alg: none` and no signature.
fn unsigned(claims: &Value) -> String {
    use base64::Engine;
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.", b64(&json!({"alg": "none", "typ": "JWT"})), b64(claims))
}

#[tokio::test]
async fn an_hs256_token_keyed_with_the_rsa_public_key_is_refused() {
    let verifier = JwtVerifier::public_key_pem(RSA_PUBLIC.as_bytes()).expect("public key");
    let confused = sign(Algorithm::HS256, &EncodingKey::from_secret(RSA_PUBLIC.as_bytes()), None, &claims("eve", 600));
    assert_eq!(sub_of(&verifier, &confused).await, Err(JwtFailure::WrongAlgorithm));
    // Even a provider asked directly never makes an HMAC check of a public key.
    let key = DecodingKey::from_rsa_pem(RSA_PUBLIC.as_bytes()).expect("key");
    assert!((ring::PROVIDER.verifier_factory)(&Algorithm::HS256, &key).is_err());
}

/// A JWKS served from memory, counting its fetches.
struct Served {
    set: Mutex<JwkSet>,
    fetches: AtomicUsize,
}

impl JwksSource for Served {
    fn fetch(&self) -> JwksFuture<'_> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let body = serde_json::to_vec(&*self.set.lock().expect("lock")).expect("json");
        Box::pin(async move { Ok(bytes::Bytes::from(body)) })
    }
}

fn jwk(private: &str, kid: &str) -> Jwk {
    ring::install();
    let key = EncodingKey::from_rsa_pem(private.as_bytes()).expect("rsa key");
    let mut jwk = Jwk::from_encoding_key(&key, Algorithm::RS256).expect("jwk");
    jwk.common.key_id = Some(kid.to_owned());
    jwk
}

#[tokio::test]
async fn a_jwks_is_fetched_once_and_again_for_an_unknown_kid_only() {
    let served =
        Arc::new(Served { set: Mutex::new(JwkSet { keys: vec![jwk(RSA_PRIVATE, "one")] }), fetches: 0.into() });
    let verifier = Arc::new(JwtVerifier::jwks(Arc::clone(&served) as Arc<dyn JwksSource>));
    let one = sign(Algorithm::RS256, &rsa(), Some("one"), &claims("alice", 600));
    for _ in 0..5 {
        assert_eq!(sub_of(&verifier, &one).await, Ok("alice".into()));
    }
    assert_eq!(served.fetches.load(Ordering::SeqCst), 1, "fetched on first use only");
    served.set.lock().expect("lock").keys.push(jwk(RSA2_PRIVATE, "two"));
    let rsa2 = EncodingKey::from_rsa_pem(RSA2_PRIVATE.as_bytes()).expect("key");
    let two = sign(Algorithm::RS256, &rsa2, Some("two"), &claims("bob", 600));
    let together: Vec<_> = (0..8)
        .map(|_| {
            let (verifier, two) = (Arc::clone(&verifier), two.clone());
            tokio::spawn(async move { sub_of(&verifier, &two).await })
        })
        .collect();
    for each in together {
        assert_eq!(each.await.expect("task"), Ok("bob".into()));
    }
    assert_eq!(served.fetches.load(Ordering::SeqCst), 2, "one refresh for the new kid, however many asked");
    let unknown = sign(Algorithm::RS256, &rsa2, Some("three"), &claims("bob", 600));
    assert_eq!(sub_of(&verifier, &unknown).await, Err(JwtFailure::UnknownKey));
    assert_eq!(served.fetches.load(Ordering::SeqCst), 2, "no second refresh within {UNKNOWN_KID_REFRESH:?}");
    let no_kid = sign(Algorithm::RS256, &rsa(), None, &claims("alice", 600));
    assert_eq!(sub_of(&verifier, &no_kid).await, Err(JwtFailure::UnknownKey), "two keys: a token must say which");
}
