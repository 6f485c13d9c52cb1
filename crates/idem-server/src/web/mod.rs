//! What the HTTP API and the dashboard share, and neither owns: the state every handler gets
//! ([`state`]), who the caller is and what it may do ([`auth`]), the one error type that answers
//! problem+json ([`error`]), body and path extractors under the one size limit ([`extract`]), the
//! checks every request passes first ([`guard`]: Host, Origin, forms), the headers every `/ui`
//! answer carries ([`headers`]), and the overview's shared counts ([`tally`]). `api` and `ui`
//! import from here; nothing here imports from them.

pub mod auth;
pub mod error;
pub mod extract;
pub mod guard;
pub mod headers;
pub mod state;
pub mod tally;

pub use error::ApiError;
pub use state::AppState;
