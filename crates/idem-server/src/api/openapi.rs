//! The OpenAPI document of the whole `/v1` API, generated from the handlers' annotations so that it
//! cannot drift from the code.

use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

#[derive(OpenApi)]
#[openapi(
    info(title = "idem", description = "Make side effects happen once: claims, idempotency keys, events."),
    paths(
        crate::api::claim::create, crate::api::claim::batch, crate::api::claim::lookup, crate::api::claim::read, crate::api::claim::delete,
        crate::api::operation::begin, crate::api::operation::complete, crate::api::operation::release,
        crate::api::operation::extend, crate::api::operation::read, crate::api::operation::delete,
        crate::api::event::intake, crate::api::receipt::read, crate::api::receipt::list, crate::api::receipt::replay,
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "claims", description = "Atomic first-writer-wins dedup store"),
        (name = "operations", description = "Idempotent work from any language: begin, complete, release, extend"),
        (name = "events", description = "Durable intake, retrying delivery, receipts"),
    ),
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}
