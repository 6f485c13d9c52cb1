//! Callers the app names: the scope part `identity` (docs/reference/config.md#gatewayidentity).
//!
//! Some credentials change their text while the user stays the same: a Laravel session cookie is
//! encrypted again (a new IV) on every response, a Flask permanent session is signed again on each
//! request, an ASP.NET sliding cookie is renewed past half its life. Scoped by such a cookie, a
//! double-tap after the first response carries another text, so idem would see another caller and
//! run the request twice. Instead, idem asks the app: a `GET` of its own endpoint (`/whoami`) with
//! the request's credentials (`forward`: the `Cookie` and `Authorization` headers by default), whose
//! answer names the caller in a header (`id_header`) or a top-level JSON field (`id_field`). This
//! is the pattern of nginx `auth_request`, Traefik ForwardAuth and Envoy `ext_authz`.
//!
//! - **The app says no** (`401`/`403`): its answer goes back to the client as it is; nothing is
//!   forwarded or stored.
//! - **The app cannot say** (unreachable, slower than `timeout`, any other status, a `2xx` that is
//!   not readable): `503` with `Retry-After`; nothing is forwarded. idem never guesses a caller.
//! - **The app names nobody** (a `2xx` without the id, or an empty one): the request has no caller,
//!   so it is `scope-missing` (`400`), as a request without its route's scope parts is.
//! - **Answers are cached** per credential for `cache` (60 s by default): keyed by a SHA-256 of the
//!   forwarded headers, never the headers themselves; at most [`MAX_CACHED`] at once. Only names are
//!   cached, never a refusal or a failure.
//!
//! The engine asks only for a keyed request on a route whose scope has `identity`; the server's
//! [`IdentitySource`] sends the `GET` over its outbound client, and a tower-layer user brings one.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Response, StatusCode};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// Names cached at most: a name is a few dozen bytes and its key 32, so a few MiB in all.
pub const MAX_CACHED: usize = 100_000;
/// The largest answer of the identity endpoint read.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// The `Retry-After` of a `503` when the app could not say who is calling.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type IdentityFuture<'a> = Pin<Box<dyn Future<Output = Result<Response<Bytes>, BoxError>> + Send + 'a>>;

/// Sends the app's identity endpoint a `GET` carrying `headers` (those `forward` names, as the
/// request had them) and answers its response, the body read whole (at most [`MAX_ANSWER_BYTES`]).
pub trait IdentitySource: Send + Sync {
    fn ask(&self, headers: HeaderMap) -> IdentityFuture<'_>;
}

/// Where the endpoint's answer names the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdFrom {
    /// A response header (`X-User-Id`).
    Header(HeaderName),
    /// A top-level field of a JSON body (`"id"`): a string, or a number (its JSON text).
    Field(String),
}

/// Why a request has no caller from the app.
#[derive(Debug)]
pub enum IdentityRefusal {
    /// The app answered `401` or `403`: that answer goes back to the client.
    Refused(Box<Response<Bytes>>),
    /// The app could not say (the reason, for the log): `503`.
    Unavailable(String),
}

/// Asks the app who is calling, and remembers its answers for a while.
pub struct IdentityResolver {
    source: Arc<dyn IdentitySource>,
    forward: Vec<HeaderName>,
    id_from: IdFrom,
    cache_for: Duration,
    timeout: Duration,
    cache: Mutex<Names>,
}

/// Names by credential digest, each with when it expires.
type Names = HashMap<[u8; 32], (Instant, Vec<u8>)>;

impl std::fmt::Debug for IdentityResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityResolver").field("forward", &self.forward).field("id_from", &self.id_from).finish()
    }
}

impl IdentityResolver {
    /// `forward`: the request headers sent with the question; `cache_for`: how long a name is kept
    /// (zero: asked every time); `timeout`: how long the app may take to answer.
    pub fn new(
        source: Arc<dyn IdentitySource>,
        forward: Vec<HeaderName>,
        id_from: IdFrom,
        cache_for: Duration,
        timeout: Duration,
    ) -> Self {
        Self { source, forward, id_from, cache_for, timeout, cache: Mutex::default() }
    }

    /// The caller the app names for a request with these headers; empty when it names nobody (or
    /// the request carries no credential to ask with).
    pub async fn caller(&self, headers: &HeaderMap) -> Result<Vec<u8>, IdentityRefusal> {
        let forwarded = self.forwarded(headers);
        if forwarded.is_empty() {
            return Ok(Vec::new());
        }
        let credential = digest(&forwarded);
        if let Some(name) = self.cached(&credential) {
            return Ok(name);
        }
        let asked = tokio::time::timeout(self.timeout, self.source.ask(forwarded)).await;
        let response = match asked {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(IdentityRefusal::Unavailable(e.to_string())),
            Err(_) => return Err(IdentityRefusal::Unavailable(format!("no answer within {:?}", self.timeout))),
        };
        let name = self.name_in(response)?;
        if !name.is_empty() {
            self.remember(credential, name.clone());
        }
        Ok(name)
    }

    /// The request's headers that go with the question, in the order `forward` names them.
    fn forwarded(&self, headers: &HeaderMap) -> HeaderMap {
        let mut out = HeaderMap::new();
        for name in &self.forward {
            for value in headers.get_all(name) {
                out.append(name.clone(), value.clone());
            }
        }
        out
    }

    /// The caller an answer names, or why it names none.
    fn name_in(&self, response: Response<Bytes>) -> Result<Vec<u8>, IdentityRefusal> {
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(IdentityRefusal::Refused(Box::new(response)));
        }
        if !status.is_success() {
            return Err(IdentityRefusal::Unavailable(format!("the identity endpoint answered {status}")));
        }
        match &self.id_from {
            IdFrom::Header(name) => Ok(response.headers().get(name).map_or_else(Vec::new, |v| v.as_bytes().to_vec())),
            IdFrom::Field(field) => {
                let body: serde_json::Value = serde_json::from_slice(response.body()).map_err(|e| {
                    IdentityRefusal::Unavailable(format!("the identity endpoint's answer is not JSON: {e}"))
                })?;
                Ok(match body.get(field) {
                    Some(serde_json::Value::String(s)) => s.clone().into_bytes(),
                    Some(n @ serde_json::Value::Number(_)) => n.to_string().into_bytes(),
                    _ => Vec::new(),
                })
            }
        }
    }

    fn cached(&self, credential: &[u8; 32]) -> Option<Vec<u8>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(credential).filter(|(until, _)| Instant::now() < *until).map(|(_, name)| name.clone())
    }

    /// Keeps a name for `cache_for`; a full cache first drops what has expired, then (still full)
    /// everything: a burst of new credentials costs questions, never memory.
    fn remember(&self, credential: [u8; 32], name: Vec<u8>) {
        if self.cache_for.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, (until, _)| now < *until);
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(credential, (now + self.cache_for, name));
    }
}

/// A credential's cache key: SHA-256 of the forwarded headers, each name and value NUL-terminated
/// (a header value cannot hold a NUL, so no two sets of headers read the same).
fn digest(headers: &HeaderMap) -> [u8; 32] {
    let mut hash = Sha256::new();
    for (name, value) in headers {
        hash.update(name.as_str().as_bytes());
        hash.update([0]);
        hash.update(value.as_bytes());
        hash.update([0]);
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// An app whose `/whoami` reads the caller off the `session` cookie's first letter, counting
    /// the questions: `a…` is alice, `b…` bob, `x…` refused, `d…` down, `g…` a guest (no id).
    struct App {
        asked: AtomicUsize,
        by_header: bool,
    }

    impl IdentitySource for App {
        fn ask(&self, headers: HeaderMap) -> IdentityFuture<'_> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            let cookie = headers.get("cookie").map(|v| v.to_str().unwrap_or_default().to_owned()).unwrap_or_default();
            let by_header = self.by_header;
            Box::pin(async move {
                let who = cookie.trim_start_matches("session=").chars().next().unwrap_or(' ');
                let (status, name) = match who {
                    'a' => (200, "alice"),
                    'b' => (200, "bob"),
                    'g' => (200, ""),
                    'x' => (401, ""),
                    _ => return Err("connection refused".into()),
                };
                let mut response = Response::builder().status(status);
                if by_header && !name.is_empty() {
                    response = response.header("x-user", name);
                }
                let body = serde_json::json!({ "id": name }).to_string();
                Ok(response.body(Bytes::from(body)).expect("response"))
            })
        }
    }

    fn resolver(by_header: bool, cache_for: Duration) -> (Arc<App>, IdentityResolver) {
        let app = Arc::new(App { asked: AtomicUsize::new(0), by_header });
        let id_from =
            if by_header { IdFrom::Header(HeaderName::from_static("x-user")) } else { IdFrom::Field("id".into()) };
        let forward = vec![http::header::COOKIE, http::header::AUTHORIZATION];
        let resolver = IdentityResolver::new(app.clone(), forward, id_from, cache_for, Duration::from_secs(1));
        (app, resolver)
    }

    fn cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::COOKIE, format!("session={value}").parse().expect("value"));
        headers
    }

    #[tokio::test]
    async fn a_rotating_session_is_one_caller_and_two_users_are_two() {
        for by_header in [false, true] {
            let (_, r) = resolver(by_header, Duration::from_secs(60));
            let first = r.caller(&cookie("a-encrypted-with-iv-1")).await.expect("named");
            let again = r.caller(&cookie("a-encrypted-with-iv-2")).await.expect("named");
            let bob = r.caller(&cookie("b-encrypted-with-iv-1")).await.expect("named");
            assert_eq!(
                (first.as_slice(), again.as_slice(), bob.as_slice()),
                (&b"alice"[..], &b"alice"[..], &b"bob"[..])
            );
        }
    }

    #[tokio::test]
    async fn answers_are_cached_per_credential_and_refusals_are_not() {
        let (app, r) = resolver(false, Duration::from_secs(60));
        for _ in 0..3 {
            r.caller(&cookie("a1")).await.expect("named");
        }
        assert_eq!(app.asked.load(Ordering::SeqCst), 1, "asked once for one credential");
        r.caller(&cookie("a2")).await.expect("named");
        assert_eq!(app.asked.load(Ordering::SeqCst), 2, "a new credential is asked about");
        for _ in 0..2 {
            assert!(matches!(r.caller(&cookie("x1")).await, Err(IdentityRefusal::Refused(_))));
        }
        assert_eq!(app.asked.load(Ordering::SeqCst), 4, "a refusal is asked again");
        let (app, uncached) = resolver(false, Duration::ZERO);
        uncached.caller(&cookie("a1")).await.expect("named");
        uncached.caller(&cookie("a1")).await.expect("named");
        assert_eq!(app.asked.load(Ordering::SeqCst), 2, "cache = 0s asks every time");
    }

    #[tokio::test]
    async fn no_credential_a_guest_a_refusal_and_a_failure_each_say_so() {
        let (app, r) = resolver(false, Duration::from_secs(60));
        assert_eq!(r.caller(&HeaderMap::new()).await.expect("nobody"), b"", "no credential: nobody, not asked");
        assert_eq!(app.asked.load(Ordering::SeqCst), 0);
        assert_eq!(r.caller(&cookie("guest")).await.expect("nobody"), b"", "a 200 naming nobody");
        match r.caller(&cookie("x")).await {
            Err(IdentityRefusal::Refused(response)) => assert_eq!(response.status(), 401),
            other => panic!("expected the app's 401, got {other:?}"),
        }
        assert!(matches!(r.caller(&cookie("down")).await, Err(IdentityRefusal::Unavailable(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_app_is_unavailable_and_a_name_expires() {
        struct Slow;
        impl IdentitySource for Slow {
            fn ask(&self, _: HeaderMap) -> IdentityFuture<'_> {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    Ok(Response::new(Bytes::from_static(b"{\"id\":\"late\"}")))
                })
            }
        }
        let slow = IdentityResolver::new(
            Arc::new(Slow),
            vec![http::header::COOKIE],
            IdFrom::Field("id".into()),
            Duration::from_secs(60),
            Duration::from_secs(2),
        );
        assert!(matches!(slow.caller(&cookie("a")).await, Err(IdentityRefusal::Unavailable(_))), "never a guess");
        let (app, r) = resolver(false, Duration::from_secs(60));
        r.caller(&cookie("a1")).await.expect("named");
        tokio::time::advance(Duration::from_secs(61)).await;
        r.caller(&cookie("a1")).await.expect("named");
        assert_eq!(app.asked.load(Ordering::SeqCst), 2, "asked again once the name expired");
    }
}
