//! The `Idempotency-Key` engine (docs/reference/api.md#gateway) and the tower layer that applies it
//! to any service.
//!
//! The engine is transport-agnostic: it takes a buffered request and a `forward` function, and
//! answers with the upstream's response, a replay, or a problem. The server's reverse proxy
//! forwards over HTTP; [`IdempotencyLayer`] forwards to the wrapped service.

mod background;
pub mod body;
pub mod cache;
mod call;
pub mod engine;
mod forward;
pub mod headers;
mod held;
mod holding;
pub mod identity;
pub mod jwt;
pub mod layer;
pub mod policy;
pub mod problem;
pub mod scope;
mod state;
pub mod template;
mod unstored;
pub mod waiters;

pub use body::{BodyError, declared_too_large, read_limited};
pub use engine::{DEFAULT_MAX_BODY_BYTES, Engine, EngineConfig, FENCING_TOKEN, ForwardError};
pub use identity::{IdFrom, IdentityResolver, IdentitySource};
pub use jwt::{JwksSource, JwtFailure, JwtVerifier};
pub use layer::{Idempotency, IdempotencyLayer};
pub use policy::{RoutePolicy, Routes, ScopePart};
pub use problem::ErrorShape;
pub use template::{Template, TemplateError};

/// The body type of every response the engine produces.
pub type GatewayBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, BoxError>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body from bytes in memory.
pub fn full(bytes: impl Into<bytes::Bytes>) -> GatewayBody {
    use http_body_util::BodyExt;
    http_body_util::Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}
