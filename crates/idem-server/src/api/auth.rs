//! Bearer-token auth for `/v1`. Tokens are compared as SHA-256 digests in constant time, and every
//! configured token is compared on every request, so timing reveals neither which token nearly
//! matched nor how many there are.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::state::AppState;

pub struct Tokens(Vec<[u8; 32]>);

impl Tokens {
    pub fn new<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Self {
        Self(tokens.into_iter().map(digest).collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn accepts(&self, presented: &str) -> bool {
        let presented = digest(presented);
        self.0.iter().fold(0u8, |hit, known| hit | known.ct_eq(&presented).unwrap_u8()) == 1
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The bearer token a request presents, if any.
pub fn presented(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

pub async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if state.tokens.is_empty() {
        return next.run(request).await;
    }
    match presented(request.headers()) {
        Some(token) if state.tokens.accepts(token) => next.run(request).await,
        _ => ApiError::Unauthorized.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_configured_tokens() {
        let tokens = Tokens::new(["alpha", "beta"]);
        assert!(tokens.accepts("alpha") && tokens.accepts("beta"));
        assert!(!tokens.accepts("alph") && !tokens.accepts("") && !tokens.accepts("alphaa"));
        assert!(Tokens::new([]).is_empty());
    }
}
