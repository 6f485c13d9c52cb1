//! Forwarding: what the engine is handed to send a request on (a function from the request to a
//! [`ForwardFuture`]), and how that may fail ([`ForwardError`]). The server's reverse proxy
//! forwards over HTTP; [`crate::IdempotencyLayer`] to the service it wraps.

use std::future::Future;
use std::pin::Pin;

use http::Response;

use crate::GatewayBody;

/// Why forwarding failed.
#[derive(Debug)]
pub enum ForwardError {
    /// Nothing reached the upstream (connection refused, no route to host): the key is released.
    Unreachable(String),
    /// The exchange broke off after the request may have been sent: the upstream may have acted,
    /// so the key keeps a `502` saying the outcome is unknown.
    Failed(String),
}

pub type ForwardFuture = Pin<Box<dyn Future<Output = Result<Response<GatewayBody>, ForwardError>> + Send>>;
