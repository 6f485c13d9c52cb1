//! Who may do what on `/v1` and `/ui` (docs/security.md). A request's bearer token is found among
//! the configured ones ([`Tokens`]) by SHA-256 digest, compared in constant time against every
//! configured digest, so timing reveals neither which token nearly matched nor how many there are.
//! The token becomes the request's [`Caller`]; [`authenticate`] refuses an unknown one (401) and a
//! role too low for the route (403, from one table: [`need`]) before any handler runs. What only
//! the handler knows (the namespace in the path, a receipt's source) it checks with the caller's
//! [`Caller::require_namespace`] and [`Caller::require_source`], before it changes anything.
//!
//! Event intake decides for itself: a source with `verify_secret` accepts a valid signature alone.

use std::sync::{Arc, RwLock};

use axum::extract::{FromRequestParts, MatchedPath, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::error::ApiError;
use super::state::AppState;
use crate::config::{AuthConfig, Can, token_digest};

/// What one configured token may do.
#[derive(Debug)]
pub struct Grant {
    /// `[[auth.token]] name`, or `tokens[N]` for the admin tokens of `[auth] tokens`.
    pub name: Arc<str>,
    pub can: Can,
    /// Claims and operations only in these; `None`: in every namespace.
    pub namespaces: Option<Vec<String>>,
    /// Receipts and events of these sources only; `None`: of every source.
    pub sources: Option<Vec<String>>,
}

/// The configured tokens, as digests. They can be replaced while idem runs (SIGHUP reads `[auth]`
/// again, [`Tokens::replace`]); whether there are any at all — which decides between the open
/// loopback mode and tokens required — is fixed when idem starts.
pub struct Tokens {
    set: RwLock<Arc<[Entry]>>,
    open: bool,
}

type Entry = ([u8; 32], Arc<Grant>);

/// Why a new set of tokens was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum NotReplaced {
    /// idem started with tokens and the new config has none: that would open it to anyone.
    WouldOpen,
    /// idem started without tokens (open to loopback) and the new config has some.
    WouldClose,
}

impl std::fmt::Display for NotReplaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotReplaced::WouldOpen => {
                "the new config has no tokens, which would let anyone in; restart idem to run without tokens"
            }
            NotReplaced::WouldClose => "idem started without tokens; restart it to require them",
        })
    }
}

impl Tokens {
    pub fn new(auth: &AuthConfig) -> Self {
        let set = Self::entries(auth);
        Self { open: set.is_empty(), set: RwLock::new(set) }
    }

    fn entries(auth: &AuthConfig) -> Arc<[Entry]> {
        let admin = auth.tokens.iter().enumerate().map(|(i, t)| {
            let grant = Grant { name: format!("tokens[{i}]").into(), can: Can::Admin, namespaces: None, sources: None };
            (token_digest(t.expose()), Arc::new(grant))
        });
        let named = auth.token.iter().filter_map(|t| {
            let names = |list: &Option<Vec<idem_core::Namespace>>| {
                list.as_ref().map(|l| l.iter().map(|n| n.as_str().to_owned()).collect())
            };
            let grant = Grant {
                name: t.name.as_str().into(),
                can: t.can,
                namespaces: names(&t.namespaces),
                sources: names(&t.sources),
            };
            Some((t.digest()?, Arc::new(grant)))
        });
        admin.chain(named).collect()
    }

    /// Takes `auth`'s tokens in place of these, for every request from now on (one already
    /// authenticated finishes as it began), unless that would switch between open and tokens
    /// required. Answers how many tokens there are now.
    pub fn replace(&self, auth: &AuthConfig) -> Result<usize, NotReplaced> {
        let set = Self::entries(auth);
        match (self.open, set.is_empty()) {
            (false, true) => return Err(NotReplaced::WouldOpen),
            (true, false) => return Err(NotReplaced::WouldClose),
            _ => {}
        }
        let count = set.len();
        *self.set.write().unwrap_or_else(|e| e.into_inner()) = set;
        Ok(count)
    }

    /// No tokens: the open loopback mode.
    pub fn is_empty(&self) -> bool {
        self.open
    }

    /// The grant of the token presented, if it is one of ours: every digest is compared, in
    /// constant time, whatever matches.
    pub fn find(&self, presented: &str) -> Option<Arc<Grant>> {
        let presented = token_digest(presented);
        let set = Arc::clone(&self.set.read().unwrap_or_else(|e| e.into_inner()));
        let mut found = 0u32;
        for (i, (known, _)) in set.iter().enumerate() {
            found.conditional_assign(&(i as u32 + 1), known.ct_eq(&presented));
        }
        found.checked_sub(1).and_then(|i| set.get(i as usize)).map(|(_, grant)| Arc::clone(grant))
    }

    /// Who sends a request with these headers.
    pub fn caller(&self, headers: &HeaderMap) -> Caller {
        if self.is_empty() {
            return Caller::Open;
        }
        presented(headers).and_then(|t| self.find(t)).map_or(Caller::Anonymous, Caller::Token)
    }
}

/// The bearer token a request presents, if any. The scheme is case-insensitive (RFC 9110 §11.1).
pub fn presented(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

/// Who a request comes from.
#[derive(Debug, Clone)]
pub enum Caller {
    /// No tokens are configured (loopback use): everything is allowed.
    Open,
    /// A configured token.
    Token(Arc<Grant>),
    /// Tokens are configured and this request has none of them. Only event intake lets it in, for a
    /// source that checks signatures.
    Anonymous,
}

impl Caller {
    /// What logs, metrics and the audit log call this caller: the token's name, never its secret.
    pub fn name(&self) -> &str {
        match self {
            Caller::Token(grant) => &grant.name,
            Caller::Open | Caller::Anonymous => "none",
        }
    }

    /// Whether this caller's role covers `need`.
    pub fn can(&self, need: Can) -> bool {
        match self {
            Caller::Open => true,
            Caller::Token(grant) => grant.can >= need,
            Caller::Anonymous => false,
        }
    }

    /// 401 without a token; 403 when its role is below `need`, naming `what` was refused.
    pub fn require(&self, need: Can, what: &str) -> Result<(), ApiError> {
        match self {
            Caller::Anonymous => Err(ApiError::Unauthorized),
            Caller::Token(grant) if grant.can < need => Err(ApiError::Forbidden(format!(
                "token {} has can = \"{}\": {what} needs can = \"{}\"",
                grant.name,
                grant.can.as_str(),
                need.as_str()
            ))),
            _ => Ok(()),
        }
    }

    /// Whether this caller may touch claims and operations in `ns`.
    pub fn sees_namespace(&self, ns: &str) -> bool {
        self.scope(|g| &g.namespaces).is_none_or(|list| list.iter().any(|n| n == ns))
    }

    /// Whether this caller may see receipts and events of `source`.
    pub fn sees_source(&self, source: &str) -> bool {
        self.scope(|g| &g.sources).is_none_or(|list| list.iter().any(|s| s == source))
    }

    /// The sources this caller is limited to, if it is.
    pub fn sources(&self) -> Option<&[String]> {
        self.scope(|g| &g.sources).map(Vec::as_slice)
    }

    fn scope(&self, list: impl Fn(&Grant) -> &Option<Vec<String>>) -> Option<&Vec<String>> {
        match self {
            Caller::Token(grant) => list(grant).as_ref(),
            Caller::Open | Caller::Anonymous => None,
        }
    }

    pub fn require_namespace(&self, ns: &str) -> Result<(), ApiError> {
        if self.sees_namespace(ns) {
            return Ok(());
        }
        Err(ApiError::Forbidden(format!(
            "token {} may not use namespace {ns} (it may use: {})",
            self.name(),
            self.scope(|g| &g.namespaces).map(|l| l.join(", ")).unwrap_or_default()
        )))
    }

    pub fn require_source(&self, source: &str) -> Result<(), ApiError> {
        if self.sees_source(source) {
            return Ok(());
        }
        Err(ApiError::Forbidden(format!(
            "token {} may not use source {source} (it may use: {})",
            self.name(),
            self.sources().map(|l| l.join(", ")).unwrap_or_default()
        )))
    }
}

/// The caller that [`authenticate`] (or the dashboard's gate) found; a request that passed
/// neither has none, and is treated as [`Caller::Anonymous`].
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<Caller>().cloned().unwrap_or(Caller::Anonymous))
    }
}

/// The `token` label of `idem_http_requests_total`, set on the response by whoever knows it.
#[derive(Debug, Clone)]
pub struct TokenLabel(pub Arc<str>);

impl TokenLabel {
    pub fn of(caller: &Caller) -> Self {
        match caller {
            Caller::Token(grant) => Self(Arc::clone(&grant.name)),
            Caller::Open | Caller::Anonymous => Self("none".into()),
        }
    }
}

/// What a `/v1` route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// At least this role; the text names what is refused.
    Role(Can, &'static str),
    /// Event intake: a signature or a token, as the source says; the handler decides.
    Intake,
}

/// One method of a route, and what its caller needs: the route table the API gives
/// [`authenticate`] is a list of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub method: &'static str,
    pub path: &'static str,
    pub need: Need,
}

/// What a call needs: as `table` says (docs/security.md says it in words). `GET`, `HEAD` and
/// `OPTIONS` need `read`, as do the methods no route takes (the answer is 405 for anyone who may
/// read); a method the table lacks otherwise needs `admin`, so that a route added without saying
/// what it needs fails closed.
pub fn need(table: &[Endpoint], method: &Method, route: &str) -> Need {
    let listed = table.iter().find(|e| e.method == method.as_str() && e.path == route);
    match (listed, method.as_str()) {
        (Some(endpoint), _) => endpoint.need,
        (None, "GET" | "HEAD" | "OPTIONS" | "PUT" | "PATCH" | "TRACE" | "CONNECT") => Need::Role(Can::Read, "reading"),
        (None, _) => Need::Role(Can::Admin, "this call"),
    }
}

/// Finds the caller of a `/v1` request and refuses it when its token is unknown (401) or its role
/// too low for the route (403), before the handler reads anything.
/// What each route needs comes with the router: `table` (the API's route table).
pub async fn authenticate(table: &[Endpoint], state: AppState, mut request: Request, next: Next) -> Response {
    let caller = state.tokens.caller(request.headers());
    let route = request.extensions().get::<MatchedPath>().map_or("", MatchedPath::as_str);
    if let Need::Role(can, what) = need(table, request.method(), route)
        && let Err(refused) = caller.require(can, what)
    {
        let mut response = refused.into_response();
        response.extensions_mut().insert(TokenLabel::of(&caller));
        return response;
    }
    let label = TokenLabel::of(&caller);
    request.extensions_mut().insert(caller);
    let mut response = next.run(request).await;
    if response.extensions().get::<TokenLabel>().is_none() {
        response.extensions_mut().insert(label);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Secret, TokenConfig, TokenDigest};

    fn auth() -> AuthConfig {
        let named = |name: &str, secret: &str, can, namespaces: Option<&[&str]>| TokenConfig {
            name: name.into(),
            sha256: Some(TokenDigest(token_digest(secret))),
            token: None,
            can,
            namespaces: namespaces.map(|l| l.iter().map(|n| idem_core::Namespace::new(n).expect("ns")).collect()),
            sources: None,
        };
        AuthConfig {
            tokens: vec![Secret::new("alpha")],
            token: vec![named("viewer", "beta", Can::Read, None), named("bot", "gamma", Can::Write, Some(&["survey"]))],
        }
    }

    #[test]
    fn finds_only_configured_tokens() {
        let tokens = Tokens::new(&auth());
        assert_eq!(tokens.find("alpha").map(|g| g.name.to_string()), Some("tokens[0]".into()));
        assert_eq!(tokens.find("beta").map(|g| g.can), Some(Can::Read));
        assert_eq!(tokens.find("gamma").map(|g| g.name.to_string()), Some("bot".into()));
        for wrong in ["alph", "", "alphaa", "BETA"] {
            assert!(tokens.find(wrong).is_none(), "{wrong}");
        }
        assert!(Tokens::new(&AuthConfig::default()).is_empty());
    }

    #[test]
    fn tokens_are_replaced_but_never_switch_open_and_closed() {
        let tokens = Tokens::new(&auth());
        let only = |secret: &str| AuthConfig { tokens: vec![Secret::new(secret)], token: Vec::new() };
        assert_eq!(tokens.replace(&only("delta")), Ok(1));
        assert!(tokens.find("alpha").is_none() && tokens.find("beta").is_none(), "the old tokens are gone");
        assert_eq!(tokens.find("delta").map(|g| g.name.to_string()), Some("tokens[0]".into()));
        assert_eq!(tokens.replace(&AuthConfig::default()), Err(NotReplaced::WouldOpen));
        assert!(tokens.find("delta").is_some() && !tokens.is_empty(), "a refused set changes nothing");
        let open = Tokens::new(&AuthConfig::default());
        assert_eq!(open.replace(&only("delta")), Err(NotReplaced::WouldClose));
        assert!(open.is_empty());
    }

    #[test]
    fn bearer_is_read_whatever_its_case() {
        let headers = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, value.parse().expect("header"));
            h
        };
        for ok in ["Bearer t0k", "bearer t0k", "BEARER  t0k ", "  bearer t0k"] {
            assert_eq!(presented(&headers(ok)), Some("t0k"), "{ok:?}");
        }
        for not in ["Basic t0k", "Bearert0k", "Bearer ", "t0k"] {
            assert_eq!(presented(&headers(not)), None, "{not:?}");
        }
    }

    #[test]
    fn roles_and_scopes_refuse_with_a_reason() {
        let tokens = Tokens::new(&auth());
        let caller = |t: &str| tokens.find(t).map(Caller::Token).expect("token");
        let (viewer, bot, admin) = (caller("beta"), caller("gamma"), caller("alpha"));
        assert!(viewer.require(Can::Read, "reading").is_ok());
        let refused = viewer.require(Can::Write, "claiming").expect_err("read only");
        assert!(
            matches!(&refused, ApiError::Forbidden(d) if d.contains("viewer") && d.contains("claiming")),
            "{refused}"
        );
        assert!(bot.require(Can::Write, "claiming").is_ok() && bot.require(Can::Admin, "replaying").is_err());
        assert!(bot.require_namespace("survey").is_ok());
        let refused = bot.require_namespace("orders").expect_err("not its namespace");
        assert!(
            matches!(&refused, ApiError::Forbidden(d) if d.contains("orders") && d.contains("survey")),
            "{refused}"
        );
        assert!(admin.require(Can::Admin, "replaying").is_ok() && admin.require_namespace("orders").is_ok());
        assert!(matches!(Caller::Anonymous.require(Can::Read, "reading"), Err(ApiError::Unauthorized)));
        assert!(Caller::Open.require(Can::Admin, "replaying").is_ok());
    }
}
