//! The OpenAPI document of the whole `/v1` API. What a path, a body, a field or an answer says is
//! stated where it lives, so that it cannot drift from the code or be lost in a rename: in the
//! handlers' `#[utoipa::path]` (examples, problem+json answers, the headers an answer carries, who
//! may call without a token: a signed source's event intake, whose signature is the credential)
//! and in the types' `#[schema]` and `#[param]` (value ranges, patterns, `format: date-time`,
//! fields that take any JSON, fields always written or never null, status fields that name their
//! one value). The limits written there as literals are checked against the constants the server
//! enforces by the tests below.
//!
//! [`document`] adds only what no attribute can state, finding what it changes by type or by
//! status and panicking if that is missing, so that a rename fails the tests instead of silently
//! changing the document: `key` or `parts` as a `oneOf` of two closed object types, the
//! problem+json errors every call can answer (400, 401 when tokens are set, 403 when a token may
//! not do this, 413, 415, 503), and each header described once, with whether it is always sent
//! (OpenAPI's `required`, which utoipa's headers lack).
//!
//! It is written for generators too (Redocly's recommended lint and openapi-python-client run on
//! it in `scripts/check-openapi.sh`, and must say nothing): one answer shape per status, `key` or
//! `parts` as a `oneOf` of two closed object types, `format: date-time` on every `…_at`, the
//! headers answers carry, `servers`, and an example for every JSON request body.
//!
//! What it still cannot state (JSON Schema counts characters where idem counts a part's bytes, for
//! instance) is listed in docs/testing.md, with why.

use serde_json::{Map, Value, json};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ObjectBuilder, Type};
use utoipa::{OpenApi, ToSchema};

use super::claim::{ClaimRequest, KeyRef};
use super::operation::BeginRequest;
use crate::web::error::Problem;

#[derive(OpenApi)]
#[openapi(
    info(title = "idem", description = "Make side effects happen once: claims, idempotency keys, operations, events."),
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
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "Applies when the server is configured with tokens (`[auth] tokens`, admin, or \
                 `[[auth.token]]` tables with `can` = read, write or admin and optional `namespaces` and \
                 `sources`): then every /v1 call needs `Authorization: Bearer <token>` (401 without a \
                 known token; 403 `urn:idem:problem:forbidden`, naming what was refused, when the token \
                 may not do this). `read`: every GET and lookup; `write`: also claims, operations and \
                 event intake; `admin`: also replay, discard, bulk replay (its dry_run needs only `read`) and operation DELETE. Event \
                 intake for a source with `verify_secret` takes no token: a valid Standard Webhooks \
                 signature is the credential. With no tokens configured (loopback only), calls need none.",
            ))
            .build();
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The schema of a field that always holds `value` (a status that names its one value), for a
/// field's `#[schema(schema_with = ...)]`.
pub fn only(value: impl Into<Value>) -> utoipa::openapi::Object {
    let value = value.into();
    let kind = if value.is_boolean() { Type::Boolean } else { Type::String };
    ObjectBuilder::new().schema_type(kind).enum_values(Some([value])).build()
}

/// The whole document, as `GET /openapi.json` serves it: the paths of the route table
/// ([`super::V1Paths`]), each described by its handler's `#[utoipa::path]`.
pub fn document() -> Value {
    let api = ApiDoc::openapi().merge_from(super::V1Paths::openapi());
    let mut doc = serde_json::to_value(api).expect("an OpenApi value is plain JSON");
    let schemas = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut);
    let schemas = schemas.expect("the handlers' bodies register component schemas");
    split_key_or_parts::<ClaimRequest>(schemas, "ClaimByKey", "ClaimByParts");
    split_key_or_parts::<KeyRef>(schemas, "KeyRefByKey", "KeyRefByParts");
    split_key_or_parts::<BeginRequest>(schemas, "BeginByKey", "BeginByParts");
    let paths = doc.get_mut("paths").and_then(Value::as_object_mut).expect("ApiDoc lists paths");
    for op in paths.values_mut().filter_map(Value::as_object_mut).flat_map(|item| item.values_mut()) {
        add_common_answers(op);
        describe_headers(op);
    }
    // Relative: the idem that serves this document (its /openapi.json) serves the API too.
    doc["servers"] =
        json!([{"url": "/", "description": "The idem serving this document (by default http://127.0.0.1:7070)"}]);
    doc
}

/// `key` or `parts`, exactly one: `T`'s schema becomes a `oneOf` of two closed object schemas, one
/// per form (`by_key` and `by_parts`, each with the other fields of `T`), so that a generator makes
/// one plain type per form, and a body with both forms, or neither, matches neither. (A Rust type
/// of that shape would lose the server's own errors for both and neither, hence this step.)
fn split_key_or_parts<T: ToSchema>(schemas: &mut Map<String, Value>, by_key: &str, by_parts: &str) {
    let name = T::name();
    let schema = schemas.remove(name.as_ref()).unwrap_or_else(|| panic!("{name} is a request body of ApiDoc's paths"));
    let variant = |form: &str, other: &str| {
        let mut v = schema.clone();
        let properties = v.get_mut("properties").and_then(Value::as_object_mut);
        let properties = properties.unwrap_or_else(|| panic!("{name} is a struct with fields"));
        assert!(properties.remove(other).is_some() && properties.contains_key(form), "{name} has key and parts");
        if let Some(object) = v.as_object_mut() {
            object.remove("description");
        }
        let required = v.get_mut("required").and_then(Value::as_array_mut);
        match required {
            Some(required) => required.push(json!(form)),
            None => v["required"] = json!([form]),
        }
        v["additionalProperties"] = json!(false);
        v
    };
    schemas.insert(by_key.to_owned(), variant("key", "parts"));
    schemas.insert(by_parts.to_owned(), variant("parts", "key"));
    let description = schema.get("description").cloned().unwrap_or(json!(""));
    let refs = [by_key, by_parts].map(|n| json!({"$ref": format!("#/components/schemas/{n}")}));
    schemas.insert(name.into_owned(), json!({"description": description, "oneOf": refs}));
}

/// Problem answers every `/v1` call can give, by status, when the handler's own list lacks them:
/// 413 for a call with a body, 415 for one whose body must be JSON.
fn common_answers(has_body: bool, json_body: bool) -> Vec<(&'static str, &'static str)> {
    let mut answers = vec![
        ("400", "Invalid request (the field at fault is named); nothing was changed"),
        ("401", "A valid bearer token is required (when tokens are configured)"),
        (
            "403",
            "The token may not do this (its can, namespaces or sources), or, with no tokens configured, a Host or Origin that is not idem's; nothing was changed",
        ),
        ("503", "The store is unavailable; nothing was changed; see Retry-After"),
    ];
    if has_body {
        answers.push(("413", "The body is larger than limits.max_body_bytes"));
    }
    if json_body {
        answers.push(("415", "The body must be JSON (Content-Type: application/json)"));
    }
    answers
}

/// Adds [`common_answers`] to one operation, each with the headers its status always carries.
fn add_common_answers(op: &mut Value) {
    let content = op.pointer("/requestBody/content").and_then(Value::as_object);
    let has_body = content.is_some();
    let json_body = content.is_some_and(|c| c.len() == 1 && c.contains_key("application/json"));
    let responses = op.get_mut("responses").and_then(Value::as_object_mut).expect("every operation answers");
    let problem = json!({"schema": {"$ref": format!("#/components/schemas/{}", Problem::name())}});
    for (status, description) in common_answers(has_body, json_body) {
        responses.entry(status).or_insert_with(
            || json!({"description": description, "content": {"application/problem+json": problem.clone()}}),
        );
    }
    // Whoever answers 401 or 503 (a handler's own list too) says how to do better.
    for (status, header) in [("401", "WWW-Authenticate"), ("503", "Retry-After")] {
        if let Some(answer) = responses.get_mut(status) {
            let headers = answer.as_object_mut().map(|a| a.entry("headers").or_insert_with(|| json!({})));
            if let Some(headers) = headers.and_then(Value::as_object_mut) {
                headers.entry(header).or_insert_with(|| json!({}));
            }
        }
    }
}

/// Describes each header an operation's answers name (in the handler's `headers(...)`, or from
/// [`add_common_answers`]) as [`header_descriptions`] has it, and says whether it is always sent:
/// always, except `WWW-Authenticate` where a call may go without a token (a signed source's 401 is
/// a bad signature, which no bearer token fixes).
fn describe_headers(op: &mut Value) {
    let anonymous =
        op["security"].as_array().is_some_and(|s| s.iter().any(|r| r.as_object().is_some_and(Map::is_empty)));
    let described = header_descriptions();
    let responses = op.get_mut("responses").and_then(Value::as_object_mut).expect("every operation answers");
    for headers in responses.values_mut().filter_map(|a| a.get_mut("headers")).filter_map(Value::as_object_mut) {
        for (name, header) in headers.iter_mut() {
            let mut described =
                described.get(name).cloned().unwrap_or_else(|| panic!("header {name} is in header_descriptions"));
            described["required"] = json!(!(anonymous && name == "WWW-Authenticate"));
            *header = described;
        }
    }
}

/// The headers idem's answers carry, beyond `Content-Type`, described once.
fn header_descriptions() -> Value {
    json!({
        "Retry-After": {
            "description": "Seconds to wait before trying again",
            "schema": {"type": "integer", "minimum": 1},
        },
        "WWW-Authenticate": {
            "description": "`Bearer`: send `Authorization: Bearer <token>` (the CLI's `--token` or `IDEM_TOKEN`; the clients' `token` option)",
            "schema": {"type": "string", "example": "Bearer"},
        },
        "Idempotent-Replayed": {
            "description": "`true`: this answer was stored earlier; the work was not done again",
            "schema": {"type": "string", "enum": ["true"]},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The route table and the handlers' `#[utoipa::path]` name the same paths and methods.
    #[test]
    fn the_document_has_every_route_and_no_other() {
        let doc = document();
        let mut documented = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("a path item").keys() {
                documented.push((method.to_uppercase(), path.clone()));
            }
        }
        let mut routed: Vec<(String, String)> =
            crate::api::V1.iter().map(|e| (e.method.to_owned(), e.path.to_owned())).collect();
        documented.sort();
        routed.sort();
        assert_eq!(documented, routed);
    }

    #[test]
    fn the_document_states_what_the_server_enforces() {
        let doc = document();
        let ops: Vec<&str> = doc["paths"]
            .as_object()
            .into_iter()
            .flat_map(|paths| paths.values())
            .flat_map(|item| item.as_object().into_iter().flat_map(|ops| ops.values()))
            .filter_map(|op| op["operationId"].as_str())
            .collect();
        let unique: std::collections::BTreeSet<_> = ops.iter().collect();
        assert_eq!(unique.len(), ops.len(), "operationIds are unique: {ops:?}");
        let list = &doc["paths"]["/v1/receipts"]["get"]["parameters"];
        assert!(list.as_array().is_some_and(|ps| ps.iter().all(|p| p["in"] == "query" && p["required"] == false)));
        let claim = &doc["paths"]["/v1/claims/{ns}"]["post"]["responses"];
        for status in ["400", "401", "403", "413", "415", "503"] {
            assert!(claim[status]["content"]["application/problem+json"].is_object(), "{status}");
        }
        assert!(
            doc.to_string()
                .find("\"application/json\":{\"schema\":{\"$ref\":\"#/components/schemas/Problem\"")
                .is_none()
        );
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["BatchRequest"]["properties"]["items"]["maxItems"], 10_000);
        assert!(schemas["ClaimByKey"]["properties"]["data"].get("type").is_none(), "data takes any JSON");
        assert_eq!(schemas["ClaimByKey"]["properties"]["ttl_seconds"]["minimum"], 1);
        assert!(schemas["PrefixResponse"].is_object());
        assert!(
            doc["components"]["securitySchemes"]["bearer"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("[auth] tokens") && d.contains("verify_secret"))
        );
        for replay in ["/v1/receipts/{id}/replay", "/v1/receipts/{id}/discard"] {
            assert!(doc["paths"][replay]["post"]["responses"]["415"].is_object(), "{replay}: a form post is 415");
        }
        let intake = &doc["paths"]["/v1/sources/{name}/events"]["post"];
        assert_eq!(intake["security"], json!([{}, {"bearer": []}]), "a signed source needs no token");
    }

    /// The limits the fields' `#[schema(...)]` and the parameters' `#[param(...)]` state as
    /// literals are the ones the server enforces.
    #[test]
    fn the_stated_limits_are_the_servers() {
        use super::super::{claim, operation};
        use idem_core::{Namespace, Parts};
        let doc = document();
        let s = &doc["components"]["schemas"];
        let at = |schema: &str, field: &str| s[schema]["properties"][field].clone();
        for (schema, field) in [("ClaimByParts", "parts"), ("KeyRefByParts", "parts"), ("BeginByParts", "parts")]
            .into_iter()
            .chain([("PrefixRequest", "prefix")])
        {
            assert_eq!(at(schema, field)["maxItems"], Parts::MAX_PARTS, "{schema}.{field}");
            assert_eq!(at(schema, field)["items"]["maxLength"], Parts::MAX_PART_BYTES, "{schema}.{field}");
        }
        for schema in ["ClaimByKey", "KeyRefByKey", "BeginByKey"] {
            assert_eq!(at(schema, "key")["maxLength"], Parts::MAX_PART_BYTES, "{schema}.key");
        }
        // A listing's and a prefix delete's query: non-empty parts; only a listing pages.
        for (method, names) in [("get", json!(["ns", "prefix", "limit", "after"])), ("delete", json!(["ns", "prefix"]))]
        {
            let ps = &doc["paths"]["/v1/claims/{ns}"][method]["parameters"];
            let named: Vec<&Value> = ps.as_array().into_iter().flatten().map(|p| &p["name"]).collect();
            assert_eq!(json!(named), names, "{method}");
            let prefix = &ps[1]["schema"];
            assert_eq!(prefix["maxItems"], Parts::MAX_PARTS, "{method}");
            assert_eq!(prefix["items"]["minLength"], 1, "{method}");
            assert_eq!(prefix["items"]["maxLength"], Parts::MAX_PART_BYTES, "{method}");
        }
        let after = &doc["paths"]["/v1/claims/{ns}"]["get"]["parameters"][3]["schema"];
        let tag = claim::CURSOR_TAG;
        assert_eq!(
            after["maxLength"],
            tag.len() + (claim::MAX_CURSOR_BYTES * 4).div_ceil(3),
            "tag, unpadded base64url"
        );
        assert_eq!(after["minLength"], tag.len() + 2, "the tag and one byte");
        assert!(after["pattern"].as_str().is_some_and(|p| p.starts_with(&format!("^{tag}("))), "{after}");
        assert_eq!(at("ClaimByKey", "ttl_seconds")["maximum"], claim::MAX_TTL_SECONDS);
        assert_eq!(at("BatchRequest", "items")["maxItems"], claim::MAX_ITEMS);
        assert_eq!(at("LookupRequest", "items")["maxItems"], claim::MAX_ITEMS);
        for schema in ["BeginByKey", "ExtendRequest"] {
            assert_eq!(at(schema, "lease_seconds")["maximum"], operation::MAX_LEASE_SECONDS, "{schema}");
        }
        assert_eq!(at("BeginByParts", "wait_seconds")["maximum"], operation::MAX_WAIT_SECONDS);
        assert_eq!(at("BeginByParts", "ttl_seconds")["maximum"], operation::MAX_TTL_SECONDS);
        let namespace = format!("^[a-z0-9_.-]{{1,{}}}$", Namespace::MAX_LEN);
        assert_eq!(at("BulkReplayRequest", "source")["pattern"], namespace.as_str());
        let params = doc["paths"].as_object().into_iter().flat_map(|paths| paths.values());
        let params = params.flat_map(|item| item.as_object().into_iter().flat_map(|ops| ops.values()));
        let params = params.flat_map(|op| op["parameters"].as_array().into_iter().flatten());
        for p in params.filter(|p| ["ns", "name", "source"].contains(&p["name"].as_str().unwrap_or_default())) {
            assert_eq!(p["schema"]["pattern"], namespace.as_str(), "{p}");
        }
    }

    /// Every `…_at` field is an RFC 3339 timestamp: a field added without `format = DateTime`
    /// fails here.
    #[test]
    fn every_timestamp_says_so() {
        let doc = document();
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        for (name, schema) in schemas {
            for (field, property) in schema["properties"].as_object().into_iter().flatten() {
                if field.ends_with("_at") || field.starts_with("created_") {
                    assert_eq!(property["format"], "date-time", "{name}.{field}");
                }
            }
        }
    }

    /// What generators need: one answer shape per status, plain types for key-or-parts, typed
    /// timestamps, declared headers, servers, and an example for every JSON body.
    #[test]
    fn the_document_generates_clean_code() {
        let doc = document();
        let lookup = &doc["paths"]["/v1/claims/{ns}/lookup"]["post"]["responses"]["200"]["content"]["application/json"];
        assert_eq!(lookup["schema"], json!({"$ref": "#/components/schemas/LookupResponse"}));
        let prefix = &doc["paths"]["/v1/claims/{ns}/prefix"]["post"]["responses"]["200"]["content"]["application/json"];
        assert_eq!(prefix["schema"], json!({"$ref": "#/components/schemas/PrefixResponse"}));
        let schemas = &doc["components"]["schemas"];
        assert!(
            !doc["components"].to_string().contains(r#"{"type":"null"}}"#),
            "no null-typed branch stands for an absent field"
        );
        assert_eq!(schemas["ClaimRequest"]["oneOf"][0], json!({"$ref": "#/components/schemas/ClaimByKey"}));
        assert_eq!(schemas["ClaimByParts"]["required"], json!(["parts"]));
        assert_eq!(schemas["ClaimByParts"]["additionalProperties"], false);
        assert!(schemas["ClaimByKey"]["properties"].get("parts").is_none());
        let stamps = [
            "Record/created_at",
            "Record/expires_at",
            "Started/lease_expires_at",
            "ReceiptView/updated_at",
            "AttemptView/started_at",
        ];
        for stamp in stamps {
            let (schema, field) = stamp.split_once('/').expect("schema/field");
            assert_eq!(schemas[schema]["properties"][field]["format"], "date-time", "{stamp}");
        }
        let begin = &doc["paths"]["/v1/operations/{ns}/begin"]["post"]["responses"];
        assert_eq!(begin["409"]["headers"]["Retry-After"]["required"], true);
        assert_eq!(begin["200"]["headers"]["Idempotent-Replayed"]["schema"]["enum"], json!(["true"]));
        assert_eq!(begin["503"]["headers"]["Retry-After"]["required"], true);
        assert!(
            begin["401"]["headers"]["WWW-Authenticate"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("IDEM_TOKEN"))
        );
        assert_eq!(doc["servers"][0]["url"], "/");
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("operations") {
                if let Some(json) = op.pointer("/requestBody/content/application~1json") {
                    assert!(json.get("example").is_some(), "{method} {path} has an example body");
                }
            }
        }
    }
}
