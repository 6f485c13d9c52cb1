//! What a `jwt:` scope costs: the verification of one bearer token, in process on one core (HS256,
//! RS256 with a 2048-bit key, ES256, EdDSA), and gateway replays scoped by `jwt:sub` (RS256, a
//! PEM public key) beside the same replays scoped by the `Authorization` header, with the same
//! token. The keys are idem-gateway's test keys: public, trusted by nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_gateway::JwtVerifier;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

use crate::load::Measured;
use crate::scenario::{Context, Post, any_answer, measure_posts};
use crate::table::Table;
use crate::target::{self, HttpConn, Idem, Upstream};

const RSA_PRIVATE: &str = include_str!("../../idem-gateway/testdata/jwt/rsa-private.pem");
const RSA_PUBLIC: &str = include_str!("../../idem-gateway/testdata/jwt/rsa-public.pem");
const EC_PRIVATE: &str = include_str!("../../idem-gateway/testdata/jwt/ec-private.pem");
const EC_PUBLIC: &str = include_str!("../../idem-gateway/testdata/jwt/ec-public.pem");
const ED_PRIVATE: &str = include_str!("../../idem-gateway/testdata/jwt/ed-private.pem");
const ED_PUBLIC: &str = include_str!("../../idem-gateway/testdata/jwt/ed-public.pem");
const SECRET: &[u8] = b"idem-bench-hs256-secret-of-32-bytes!";

fn token(alg: Algorithm, key: &EncodingKey) -> Result<String, String> {
    idem_gateway::jwt::ring::install();
    let exp = jsonwebtoken::get_current_timestamp() + 3600;
    let claims = serde_json::json!({"sub": "bench-user", "exp": exp, "iss": "https://login.example"});
    jsonwebtoken::encode(&Header::new(alg), &claims, key).map_err(|e| e.to_string())
}

pub async fn jwt(ctx: &Context) -> Result<Table, String> {
    let mut notes = Vec::new();
    for (name, alg) in [
        ("HS256", Algorithm::HS256),
        ("RS256", Algorithm::RS256),
        ("ES256", Algorithm::ES256),
        ("EdDSA", Algorithm::EdDSA),
    ] {
        let (verifier, key) = keys(alg)?;
        let per_verify = verify_time(&verifier, &token(alg, &key)?, ctx.plan.duration / 4).await?;
        notes.push(format!(
            "one {name} verification in process, one core: {:.1} µs ({:.0} per second)",
            per_verify.as_secs_f64() * 1e6,
            1.0 / per_verify.as_secs_f64()
        ));
    }
    let upstream = Upstream::start().await?;
    let keys = tempfile::tempdir().map_err(|e| e.to_string())?;
    let public = keys.path().join("jwt-public.pem");
    std::fs::write(&public, RSA_PUBLIC).map_err(|e| e.to_string())?;
    let bearer: Arc<str> = format!("Bearer {}", token(Algorithm::RS256, &rsa()?)?).into();
    let jwt_table = format!("[gateway.jwt]\npublic_key_file = \"{}\"\n", public.display());
    let header = replays(ctx, &upstream.url, "header:authorization", "", &bearer).await?;
    let jwt = replays(ctx, &upstream.url, "jwt:sub", &jwt_table, &bearer).await?;
    let mut table = Table::new("jwt", vec![jwt], vec![header]);
    table.notes.extend(notes);
    Ok(table)
}

fn rsa() -> Result<EncodingKey, String> {
    EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).map_err(|e| e.to_string())
}

fn keys(alg: Algorithm) -> Result<(JwtVerifier, EncodingKey), String> {
    fn pem(text: &'static str) -> &'static [u8] {
        text.as_bytes()
    }
    let public = |text| JwtVerifier::public_key_pem(pem(text)).map_err(|e| e.to_string());
    Ok(match alg {
        Algorithm::HS256 => (JwtVerifier::hs256(SECRET).map_err(|e| e.to_string())?, EncodingKey::from_secret(SECRET)),
        Algorithm::RS256 => (public(RSA_PUBLIC)?, rsa()?),
        Algorithm::ES256 => (public(EC_PUBLIC)?, EncodingKey::from_ec_pem(pem(EC_PRIVATE)).map_err(|e| e.to_string())?),
        _ => (public(ED_PUBLIC)?, EncodingKey::from_ed_pem(pem(ED_PRIVATE)).map_err(|e| e.to_string())?),
    })
}

/// The mean time of one verification of `token`, over at least `span` (after a warm-up).
async fn verify_time(verifier: &JwtVerifier, token: &str, span: Duration) -> Result<Duration, String> {
    for _ in 0..100 {
        verifier.verify(token).await.map_err(|e| e.describe().to_owned())?;
    }
    let (start, mut n) = (Instant::now(), 0u32);
    while start.elapsed() < span || n < 1000 {
        std::hint::black_box(verifier.verify(std::hint::black_box(token)).await.is_ok());
        n += 1;
    }
    Ok(start.elapsed() / n)
}

/// Gateway replays of 1000 stored keys, the route scoped by `scope`, every request carrying
/// `bearer`.
async fn replays(
    ctx: &Context,
    upstream: &str,
    scope: &str,
    extra: &str,
    bearer: &Arc<str>,
) -> Result<Measured, String> {
    let port = target::free_port();
    let config = format!(
        "[gateway]\nlisten = \"127.0.0.1:{port}\"\nupstream = \"{upstream}\"\n\n[[gateway.routes]]\npath = \"/orders\"\n\
         methods = [\"POST\"]\nkey = \"required\"\nscope = [\"{scope}\"]\n\n{extra}"
    );
    let idem = Idem::start(&ctx.backend, &config).await?;
    let gateway = format!("http://127.0.0.1:{port}");
    let order = || "{\"item\":\"book\"}".to_owned();
    let mut setup = HttpConn::connect(&gateway).await?;
    for k in 0..1000 {
        setup
            .post("/orders", order(), &[("idempotency-key", &format!("\"r-{k}\"")), ("authorization", bearer)])
            .await?;
    }
    let bearer = Arc::clone(bearer);
    let make = move |c: usize, n: u64| Post {
        authorization: Some(Arc::clone(&bearer)),
        ..Post::keyed(order(), format!("\"r-{}\"", (c as u64 * 7919 + n) % 1000))
    };
    let name = format!("idem gateway replays, scope {scope}");
    let measured = measure_posts(ctx, &name, 1, (&gateway, "/orders"), make, any_answer).await;
    drop(idem);
    Ok(measured)
}
