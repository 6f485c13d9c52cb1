//! The HTTP API on the main listener: `/v1` (one file per resource: claims, operations, event
//! intake, receipts), health, metrics and the OpenAPI document. This file is its flat route table, where each
//! route's methods say what their caller needs;
//! handlers share `web::AppState`, fail with `web::ApiError` (always problem+json), and read bodies
//! through `web::extract` (one size limit, `limits.max_body_bytes`, everywhere). The router that
//! serves it beside the dashboard is `crate::router`.

pub mod claim;
pub mod event;
pub mod health;
pub mod openapi;
pub mod operation;
pub mod receipt;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::routing::{MethodFilter, MethodRouter, get};

use crate::config::Can::{Admin, Read, Write};
use crate::web::auth::{Endpoint, Need};
use crate::web::{AppState, auth};

/// The header on an answer that was stored earlier (a completed operation's result, a resent
/// event's receipt), as the gateway marks its replays: the work was not done again.
pub const REPLAYED: (&str, &str) = ("idempotent-replayed", "true");

/// The `/v1` route table: each route's path once, each of its methods with its handler and what
/// the caller needs (the router hands it to [`auth::authenticate`]; docs/security.md says it in
/// words). From it come
/// the router, [`V1`] and the paths of the OpenAPI document ([`V1Paths`]), in this order.
macro_rules! v1 {
    ($($path:literal { $($method:ident $($handler:ident)::+ => $need:expr;)+ })+) => {
        /// Every `/v1` route and method, with what its caller needs.
        pub const V1: &[Endpoint] = &[$($(Endpoint { method: stringify!($method), path: $path, need: $need }),+),+];

        fn v1_router() -> Router<AppState> {
            Router::new()$(.route($path, MethodRouter::new()$(.on(MethodFilter::$method, $($handler)::+))+))+
        }

        /// The `/v1` operations of the OpenAPI document (`openapi::document` adds the rest).
        #[derive(utoipa::OpenApi)]
        #[openapi(paths($($($($handler)::+),+),+))]
        pub struct V1Paths;
    };
}

const READING: Need = Need::Role(Read, "reading");
const LOOKUP: Need = Need::Role(Read, "a lookup");
const OPERATING: Need = Need::Role(Write, "an operation's begin, complete, release or extend");

v1! {
    "/v1/claims/{ns}" {
        POST claim::create => Need::Role(Write, "claiming");
        GET claim::list => READING;
        DELETE claim::delete_prefix => Need::Role(Write, "deleting claims");
    }
    "/v1/claims/{ns}/batch" { POST claim::batch => Need::Role(Write, "claiming"); }
    "/v1/claims/{ns}/lookup" { POST claim::lookup => LOOKUP; }
    "/v1/claims/{ns}/prefix" { POST claim::prefix => LOOKUP; }
    "/v1/claims/{ns}/{id}" {
        GET claim::read => READING;
        DELETE claim::delete => Need::Role(Write, "deleting a claim");
    }
    "/v1/operations/{ns}/begin" { POST operation::begin => OPERATING; }
    "/v1/operations/{ns}/{id}" {
        GET operation::read => READING;
        DELETE operation::delete => Need::Role(Admin, "deleting an operation");
    }
    "/v1/operations/{ns}/{id}/complete" { POST operation::complete => OPERATING; }
    "/v1/operations/{ns}/{id}/release" { POST operation::release => OPERATING; }
    "/v1/operations/{ns}/{id}/extend" { POST operation::extend => OPERATING; }
    // A signature or a token, as the source says: the handler decides.
    "/v1/sources/{name}/events" { POST event::intake => Need::Intake; }
    "/v1/receipts" { GET receipt::list => READING; }
    "/v1/receipts/{id}" { GET receipt::read => READING; }
    // A bulk replay's dry run only counts: the handler asks for admin unless `dry_run`.
    "/v1/receipts/replay" { POST receipt::replay_matching => Need::Role(Read, "counting receipts"); }
    "/v1/receipts/{id}/replay" { POST receipt::replay => Need::Role(Admin, "replaying receipts"); }
    "/v1/receipts/{id}/discard" { POST receipt::discard => Need::Role(Admin, "discarding a receipt"); }
}

/// The API's routes: `/v1` behind authentication, and the operational endpoints (health, metrics,
/// the OpenAPI document) open to all.
pub fn routes(state: AppState) -> Router<AppState> {
    let authenticate =
        |State(state): State<AppState>, request: Request, next: Next| auth::authenticate(V1, state, request, next);
    let v1 = v1_router().route_layer(middleware::from_fn_with_state(state, authenticate));
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(health::openapi))
        .merge(v1)
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::*;
    use crate::config::Can;
    use crate::web::auth::need;

    #[test]
    fn every_change_needs_more_than_read() {
        let post = Method::POST;
        assert_eq!(need(V1, &Method::GET, "/v1/receipts"), Need::Role(Can::Read, "reading"));
        assert_eq!(need(V1, &post, "/v1/claims/{ns}/lookup"), Need::Role(Can::Read, "a lookup"));
        assert_eq!(need(V1, &post, "/v1/claims/{ns}/prefix"), Need::Role(Can::Read, "a lookup"));
        assert!(matches!(need(V1, &post, "/v1/claims/{ns}"), Need::Role(Can::Write, _)));
        assert!(matches!(need(V1, &Method::DELETE, "/v1/operations/{ns}/{id}"), Need::Role(Can::Admin, _)));
        assert!(matches!(need(V1, &post, "/v1/receipts/{id}/discard"), Need::Role(Can::Admin, _)));
        assert!(matches!(need(V1, &post, "/v1/a-route-added-later"), Need::Role(Can::Admin, _)));
        assert_eq!(need(V1, &post, "/v1/sources/{name}/events"), Need::Intake);
    }
}
