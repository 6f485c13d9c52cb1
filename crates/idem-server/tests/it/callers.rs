//! A gateway key belongs to one caller (contract §2, "Callers and spellings"), against a real
//! upstream that routes as ASP.NET Core does (ignoring case) and counts what reaches it:
//!
//! - cookie logins: Bob under Alice's key is his own execution; Alice's retry with her other
//!   cookies changed is a replay; a keyed request with no session is 400 and reaches nothing;
//! - JWTs (HS256 secret, PEM public key, JWKS): a refreshed token of one `sub` replays, another
//!   `sub` executes, a forged, expired or `alg: none` token is 401 and reaches nothing (nor is
//!   anything stored), algorithm confusion is refused, and an unknown `kid` fetches the JWKS once;
//! - `path_case = "insensitive"`: `/CASE-orders` then `/case-orders` with one key executes once.
//!
//! The same scenario runs on one node (embedded store) and across two `idem serve` processes
//! sharing PostgreSQL, each step's requests alternating between the nodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::Method;
use idem_core::SystemClock;
use idem_server::cli::client::{ApiClient, Reply};
use idem_server::config::GatewayConfig;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::support::binary::{Idem, free_port};
use crate::support::pg::TestSchema;
use crate::support::{TestServer, metric};

const SECRET: &str = "callers-test-hs256-secret-of-32-bytes";
const ISSUER: &str = "https://login.example";
const RSA_PRIVATE: &str = include_str!("../../../idem-gateway/testdata/jwt/rsa-private.pem");
const RSA_PUBLIC: &str = include_str!("../../../idem-gateway/testdata/jwt/rsa-public.pem");
const RSA2_PRIVATE: &str = include_str!("../../../idem-gateway/testdata/jwt/rsa2-private.pem");

/// An upstream that routes as ASP.NET Core does (any case of a path is that path) and answers every
/// POST with a new order: it counts what reaches it.
struct Counting {
    url: String,
    seen: Arc<AtomicUsize>,
}

impl Counting {
    async fn start() -> Self {
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&seen);
        let app = axum::Router::new().fallback(move |uri: http::Uri| {
            let counter = Arc::clone(&counter);
            async move {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                let path = uri.path().to_ascii_lowercase();
                (http::StatusCode::CREATED, axum::Json(json!({"order": n, "path": path})))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, seen }
    }

    fn count(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}

/// The routes of the scenario, as an operator writes them.
fn gateway_toml(listen: &str, upstream: &str) -> String {
    format!(
        "[gateway]\nlisten = \"{listen}\"\nupstream = \"{upstream}\"\n\n\
         [[gateway.routes]]\npath = \"/orders\"\nmethods = [\"POST\"]\nscope = [\"cookie:session\"]\n\n\
         [[gateway.routes]]\npath = \"/payments\"\nmethods = [\"POST\"]\nscope = [\"jwt:sub\"]\n\n\
         [[gateway.routes]]\npath = \"/case-orders\"\nmethods = [\"POST\"]\nkey = \"required\"\n\
         path_case = \"insensitive\"\nscope = [\"header:authorization\"]\n\n\
         [gateway.jwt]\nsecret = \"{SECRET}\"\nissuer = \"{ISSUER}\"\n"
    )
}

/// `[gateway]` of a TOML text, as `idem serve` reads it.
fn gateway_config(text: &str) -> GatewayConfig {
    let doc: toml::Table = text.parse().expect("toml");
    doc["gateway"].clone().try_into().expect("a valid [gateway]")
}

/// One node, in process, on the embedded store.
async fn one_node(toml: &str) -> (TestServer, ApiClient) {
    let gateway = gateway_config(toml);
    let server = TestServer::start_with(|c| c.gateway = Some(gateway), Arc::new(SystemClock)).await;
    let client = ApiClient::new(server.gateway_url.as_deref().expect("gateway"), None).expect("client");
    (server, client)
}

fn token(sub: &str, alg: Algorithm, key: &EncodingKey, kid: Option<&str>, exp_in: i64, iat: u64) -> String {
    idem_gateway::jwt::ring::install();
    let now = jsonwebtoken::get_current_timestamp() as i64;
    let claims = json!({"sub": sub, "iss": ISSUER, "exp": now + exp_in, "iat": iat});
    let header = Header { kid: kid.map(str::to_owned), ..Header::new(alg) };
    jsonwebtoken::encode(&header, &claims, key).expect("signs")
}

fn hs256(sub: &str, exp_in: i64, iat: u64) -> String {
    token(sub, Algorithm::HS256, &EncodingKey::from_secret(SECRET.as_bytes()), None, exp_in, iat)
}

/// A token with `alg: none` and no signature.
fn unsigned(sub: &str) -> String {
    use base64::Engine;
    let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let exp = jsonwebtoken::get_current_timestamp() + 600;
    format!("{}.{}.", b64(json!({"alg": "none", "typ": "JWT"})), b64(json!({"sub": sub, "iss": ISSUER, "exp": exp})))
}

async fn post(node: &ApiClient, path: &str, key: Option<&str>, headers: &[(&str, &str)]) -> Reply {
    let mut all = vec![("content-type", "application/json")];
    all.extend(key.map(|k| ("idempotency-key", k)));
    all.extend_from_slice(headers);
    node.send_with(Method::POST, path, Some(Bytes::from_static(b"{\"item\":\"book\"}")), &all).await.expect("request")
}

fn replayed(reply: &Reply) -> bool {
    reply.headers.get("idempotent-replayed").is_some_and(|v| v == "true")
}

/// (status, replayed, problem type or the order's number).
fn outcome(reply: &Reply) -> (u16, bool, Value) {
    let body = reply.json();
    let what = if reply.status.is_success() { body["order"].clone() } else { body["type"].clone() };
    (reply.status.as_u16(), replayed(reply), what)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The scenario; `nodes[i % 2]` answers step `i`, so on two nodes every replay crosses nodes.
async fn callers_are_told_apart(nodes: [&ApiClient; 2], upstream: &Counting) {
    let [a, b] = nodes;
    // Cookie logins.
    let alice = post(a, "/orders", Some("order-1"), &[("cookie", "theme=dark; session=alice")]).await;
    assert_eq!((alice.status.as_u16(), replayed(&alice)), (201, false));
    let bob = post(b, "/orders", Some("order-1"), &[("cookie", "theme=dark; session=bob")]).await;
    assert_eq!((bob.status.as_u16(), replayed(&bob)), (201, false), "bob's own execution");
    assert_ne!(bob.body, alice.body, "bob never gets alice's order");
    let retry =
        post(b, "/orders", Some("order-1"), &[("cookie", "_ga=GA1.2.3; session=alice"), ("cookie", "theme=light")])
            .await;
    assert_eq!((retry.status.as_u16(), replayed(&retry), &retry.body), (201, true, &alice.body), "alice's retry");
    let anonymous = post(a, "/orders", Some("order-1"), &[("cookie", "theme=dark")]).await;
    assert_eq!(outcome(&anonymous), (400, false, json!("urn:idem:problem:scope-missing")));
    let detail = anonymous.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("cookie:session") && detail.contains("scope"), "{detail}");
    assert_eq!(upstream.count(), 2, "the refused request reached nothing");
    assert_eq!(post(b, "/orders", None, &[]).await.status, 201, "no key on an optional route: passed through");
    assert_eq!(upstream.count(), 3);

    // JWTs: the scope is the verified `sub`.
    let first = post(a, "/payments", Some("pay-1"), &[("authorization", &bearer(&hs256("alice", 600, 1)))]).await;
    assert_eq!((first.status.as_u16(), replayed(&first)), (201, false));
    let refreshed = post(b, "/payments", Some("pay-1"), &[("authorization", &bearer(&hs256("alice", 900, 2)))]).await;
    assert_eq!((refreshed.status.as_u16(), replayed(&refreshed), &refreshed.body), (201, true, &first.body));
    let other = post(a, "/payments", Some("pay-1"), &[("authorization", &bearer(&hs256("bob", 600, 1)))]).await;
    assert_eq!((other.status.as_u16(), replayed(&other)), (201, false), "another sub executes");
    assert_eq!(upstream.count(), 5);
    let forged =
        token("alice", Algorithm::HS256, &EncodingKey::from_secret(b"not-the-secret-but-32-bytes-long!"), None, 600, 3);
    for (what, token) in [("forged", forged), ("expired", hs256("alice", -300, 1)), ("alg none", unsigned("alice"))] {
        for node in nodes {
            let refused = post(node, "/payments", Some("pay-2"), &[("authorization", &bearer(&token))]).await;
            assert_eq!(outcome(&refused), (401, false, json!("urn:idem:problem:invalid-token")), "{what}");
            assert!(refused.headers.get("www-authenticate").is_some(), "{what}");
            assert!(!String::from_utf8_lossy(&refused.body).contains(&token), "{what}: the token is not echoed");
        }
    }
    assert_eq!(upstream.count(), 5, "no refused token reached the upstream");
    let after = post(b, "/payments", Some("pay-2"), &[("authorization", &bearer(&hs256("alice", 600, 4)))]).await;
    assert_eq!((after.status.as_u16(), replayed(&after)), (201, false), "nothing was stored for the refusals");
    let missing = post(a, "/payments", Some("pay-3"), &[]).await;
    assert_eq!(outcome(&missing), (400, false, json!("urn:idem:problem:scope-missing")), "no token, no scope");
    assert_eq!(upstream.count(), 6);

    // Spellings: the upstream ignores case, so the route does.
    let auth = [("authorization", "Bearer carol")];
    let upper = post(a, "/CASE-orders", Some("case-1"), &auth).await;
    assert_eq!((upper.status.as_u16(), replayed(&upper)), (201, false));
    let lower = post(b, "/case-orders", Some("case-1"), &auth).await;
    assert_eq!((lower.status.as_u16(), replayed(&lower), &lower.body), (201, true, &upper.body), "one execution");
    for spelling in ["/CASE-orders", "/Case-Orders/", "/%43ase-orders"] {
        let keyless = post(a, spelling, None, &auth).await;
        assert_eq!(outcome(&keyless), (400, false, json!("urn:idem:problem:missing-idempotency-key")), "{spelling}");
    }
    assert_eq!(upstream.count(), 7, "the upstream saw each order once");
}

#[tokio::test]
async fn callers_are_told_apart_on_one_node() {
    let upstream = Counting::start().await;
    let (server, node) = one_node(&gateway_toml("127.0.0.1:0", &upstream.url)).await;
    callers_are_told_apart([&node, &node], &upstream).await;
    let scope_missing = r#"idem_gateway_requests_total{route="/orders",outcome="scope_missing"}"#;
    assert!(metric(&server.client, scope_missing).await >= 1.0);
    for reason in ["expired", "bad_signature", "wrong_algorithm"] {
        let series = format!(r#"idem_gateway_jwt_failures_total{{route="/payments",reason="{reason}"}}"#);
        assert!(metric(&server.client, &series).await >= 2.0, "{series}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_are_told_apart_across_two_nodes_on_postgres() {
    let Some(schema) = TestSchema::create("callers").await else { return };
    let upstream = Counting::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut nodes = Vec::new();
    let mut gateways = Vec::new();
    for i in 0..2 {
        let listen = format!("127.0.0.1:{}", free_port());
        let config = dir.path().join(format!("node{i}.toml"));
        let store = format!("[store]\ntype = \"postgres\"\nurl = \"{}\"\npool_size = 4\n\n", schema.url);
        std::fs::write(&config, store + &gateway_toml(&listen, &upstream.url)).expect("write config");
        let data = dir.path().join(format!("data{i}"));
        nodes.push(Idem::serve(&data, &["--config", config.to_str().expect("utf-8")]));
        gateways.push(ApiClient::new(&format!("http://{listen}"), None).expect("client"));
    }
    callers_are_told_apart([&gateways[0], &gateways[1]], &upstream).await;
}

#[tokio::test]
async fn a_pem_public_key_verifies_rs256_and_refuses_algorithm_confusion() {
    let upstream = Counting::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let public = dir.path().join("jwt-public.pem");
    std::fs::write(&public, RSA_PUBLIC).expect("write key");
    let toml = gateway_toml("127.0.0.1:0", &upstream.url)
        .replace(&format!("secret = \"{SECRET}\""), &format!("public_key_file = \"{}\"", public.display()));
    let (server, node) = one_node(&toml).await;
    let rsa = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).expect("rsa key");
    let good = token("alice", Algorithm::RS256, &rsa, None, 600, 1);
    assert_eq!(post(&node, "/payments", Some("p"), &[("authorization", &bearer(&good))]).await.status, 201);
    // The attack: the public key's PEM bytes, known to all, used as an HS256 secret.
    let confused = token("alice", Algorithm::HS256, &EncodingKey::from_secret(RSA_PUBLIC.as_bytes()), None, 600, 2);
    let refused = post(&node, "/payments", Some("q"), &[("authorization", &bearer(&confused))]).await;
    assert_eq!(outcome(&refused), (401, false, json!("urn:idem:problem:invalid-token")));
    let hs = hs256("alice", 600, 3);
    assert_eq!(post(&node, "/payments", Some("q"), &[("authorization", &bearer(&hs))]).await.status, 401);
    assert_eq!(upstream.count(), 1, "only the RS256 token reached the upstream");
    server.stop().await;
}

/// A JWKS on a real socket, counting its fetches.
struct JwksServer {
    url: String,
    set: Arc<std::sync::Mutex<JwkSet>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    async fn start(keys: Vec<Jwk>) -> Self {
        let set = Arc::new(std::sync::Mutex::new(JwkSet { keys }));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (served, counted) = (Arc::clone(&set), Arc::clone(&fetches));
        let app = axum::Router::new().route(
            "/.well-known/jwks.json",
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                let body = serde_json::to_value(&*served.lock().expect("lock")).expect("json");
                async move { axum::Json(body) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, set, fetches }
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

fn jwk(private: &EncodingKey, kid: &str) -> Jwk {
    idem_gateway::jwt::ring::install();
    let mut jwk = Jwk::from_encoding_key(private, Algorithm::RS256).expect("jwk");
    jwk.common.key_id = Some(kid.to_owned());
    jwk
}

#[tokio::test]
async fn a_jwks_is_fetched_once_and_again_only_for_an_unknown_kid() {
    let upstream = Counting::start().await;
    let one = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).expect("rsa key");
    let two = EncodingKey::from_rsa_pem(RSA2_PRIVATE.as_bytes()).expect("rsa key");
    let jwks = JwksServer::start(vec![jwk(&one, "one")]).await;
    let toml = gateway_toml("127.0.0.1:0", &upstream.url)
        .replace(&format!("secret = \"{SECRET}\""), &format!("jwks_url = \"{}\"", jwks.url));
    let (server, node) = one_node(&toml).await;
    assert_eq!(jwks.fetches(), 0, "nothing is fetched before a token needs it");
    let pay = |key: &str, token: String| {
        let (node, key) = (node.clone(), key.to_owned());
        async move { post(&node, "/payments", Some(&key), &[("authorization", &bearer(&token))]).await.status.as_u16() }
    };
    for i in 0..5 {
        assert_eq!(pay(&format!("a-{i}"), token("alice", Algorithm::RS256, &one, Some("one"), 600, i)).await, 201);
    }
    assert_eq!(jwks.fetches(), 1, "fetched on first use, not per request");
    // The provider rotates: a token signed with its new key names a kid idem has not seen.
    jwks.set.lock().expect("lock").keys.push(jwk(&two, "two"));
    assert_eq!(pay("b-1", token("bob", Algorithm::RS256, &two, Some("two"), 600, 1)).await, 201);
    assert_eq!(pay("b-2", token("bob", Algorithm::RS256, &two, Some("two"), 600, 2)).await, 201);
    assert_eq!(jwks.fetches(), 2, "one refresh for the new kid");
    // A made-up kid right after: refused, and no second refresh within the cool-down.
    assert_eq!(pay("c-1", token("eve", Algorithm::RS256, &two, Some("made-up"), 600, 1)).await, 401);
    assert_eq!(jwks.fetches(), 2, "an unknown kid cannot make idem fetch per request");
    assert_eq!(upstream.count(), 7);
    server.stop().await;
}
