//! The OpenAPI document of the whole `/v1` API. Paths, bodies and answers are generated from the
//! handlers' annotations so that they cannot drift from the code; [`document`] then states what the
//! annotations cannot, from the same constants the server enforces: the rules of namespaces, ids
//! and key parts, value ranges, fields that take any JSON, the problem+json errors every call can
//! answer (400, 401 when tokens are set, 403 when a token may not do this, 413, 415, 503), and
//! when bearer auth applies (never for a signed source's event intake: its signature is the
//! credential).
//!
//! What it still cannot state (JSON Schema counts characters where idem counts a part's bytes, for
//! instance) is listed in the README's Testing section, with why.

use idem_core::{Namespace, Parts};
use serde_json::{Value, json};
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use super::{claim, operation};

#[derive(OpenApi)]
#[openapi(
    info(title = "idem", description = "Make side effects happen once: claims, idempotency keys, operations, events."),
    paths(
        crate::api::claim::create, crate::api::claim::batch, crate::api::claim::lookup, crate::api::claim::read, crate::api::claim::delete,
        crate::api::operation::begin, crate::api::operation::complete, crate::api::operation::release,
        crate::api::operation::extend, crate::api::operation::read, crate::api::operation::delete,
        crate::api::event::intake, crate::api::receipt::read, crate::api::receipt::list, crate::api::receipt::replay,
        crate::api::receipt::replay_matching, crate::api::receipt::discard,
    ),
    components(schemas(crate::api::claim::PrefixResponse)),
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

/// The whole document, as `GET /openapi.json` serves it.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    refine_paths(&mut doc);
    refine_schemas(&mut doc);
    doc
}

fn namespace() -> Value {
    json!({"type": "string", "pattern": format!("^[a-z0-9_.-]{{1,{}}}$", Namespace::MAX_LEN)})
}

fn claim_id() -> Value {
    json!({"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "Lowercase hex SHA-256 of the key's parts joined by NUL"})
}

/// One key part: non-empty, no NUL, at most 1 KiB of UTF-8 (JSON Schema counts characters).
fn part() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": Parts::MAX_PART_BYTES, "pattern": "^[^\\u0000]+$"})
}

fn parts() -> Value {
    json!({"type": "array", "items": part(), "minItems": 1, "maxItems": Parts::MAX_PARTS})
}

/// `key` or `parts`, exactly one of them.
fn key_or_parts(schema: &mut Value) {
    set(
        schema,
        &["properties", "key"],
        json!({"type": ["string", "null"], "minLength": 1, "maxLength": Parts::MAX_PART_BYTES, "pattern": "^[^\\u0000]+$", "description": "The one-part form of a key"}),
    );
    set(
        schema,
        &["properties", "parts"],
        json!({"anyOf": [parts(), {"type": "null"}], "description": "1 to 16 non-empty parts, each at most 1 KiB, without NUL"}),
    );
    schema["oneOf"] = json!([
        {"required": ["key"], "properties": {"key": {"type": "string"}, "parts": {"type": "null"}}},
        {"required": ["parts"], "properties": {"parts": {"type": "array"}, "key": {"type": "null"}}},
    ]);
}

/// Sets the value at `path` below `root`, making objects on the way.
fn set(root: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut node = root;
    for key in parents {
        if !node.get(*key).is_some_and(Value::is_object) {
            node[*key] = json!({});
        }
        node = &mut node[*key];
    }
    if node.is_object() {
        node[*last] = value;
    }
}

fn require(schema: &mut Value, field: &str) {
    match schema.get_mut("required").and_then(Value::as_array_mut) {
        Some(required) if !required.iter().any(|r| r == field) => required.push(json!(field)),
        Some(_) => {}
        None => schema["required"] = json!([field]),
    }
}

/// A property the server leaves out rather than writing `null`.
fn never_null(property: &mut Value) {
    if let Some(types) = property.get("type").and_then(Value::as_array) {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        property["type"] = if kept.len() == 1 { kept[0].clone() } else { Value::Array(kept) };
    }
    let branches = property
        .get("oneOf")
        .and_then(Value::as_array)
        .map(|b| b.iter().filter(|b| b.get("type").is_none_or(|t| t != "null")).cloned().collect::<Vec<_>>());
    if let (Some(mut kept), Some(object)) = (branches, property.as_object_mut()) {
        object.remove("oneOf");
        if kept.len() == 1 {
            if let Some(only) = kept.pop().and_then(|v| v.as_object().cloned()) {
                object.extend(only);
            }
        } else {
            object.insert("oneOf".into(), Value::Array(kept));
        }
    }
}

/// A field that takes any JSON value (`null` included), described as before.
fn any_json(schema: &mut Value, field: &str) {
    if let Some(p) = schema.pointer_mut(&format!("/properties/{field}")).and_then(Value::as_object_mut) {
        p.remove("type");
    }
}

fn integer(min: u64, max: u64) -> Value {
    json!({"type": ["integer", "null"], "format": "int64", "minimum": min, "maximum": max})
}

fn refine_schemas(doc: &mut Value) {
    let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) else { return };
    for name in ["ClaimRequest", "KeyRef", "BeginRequest"] {
        if let Some(s) = schemas.get_mut(name) {
            key_or_parts(s);
        }
    }
    for (name, field) in [
        ("ClaimRequest", "data"),
        ("Record", "data"),
        ("BeginRequest", "request"),
        ("CompleteRequest", "result"),
        ("Completed", "result"),
        ("ReceiptView", "body"),
    ] {
        if let Some(s) = schemas.get_mut(name) {
            any_json(s, field);
        }
    }
    if let Some(s) = schemas.get_mut("BulkReplayRequest") {
        let nullable = |schema: Value| json!({"anyOf": [schema, {"type": "null"}]});
        set(s, &["properties", "source"], nullable(namespace()));
        set(
            s,
            &["properties", "status"],
            nullable(
                json!({"type": "string", "enum": ["dead", "completed", "discarded"], "description": "default: dead"}),
            ),
        );
        set(s, &["properties", "event_id"], nullable(json!({"type": "string", "pattern": "^[^\\u0000]*$"})));
        for field in ["created_before", "created_after"] {
            set(s, &["properties", field], nullable(json!({"type": "string", "format": "date-time"})));
        }
    }
    if let Some(s) = schemas.get_mut("ClaimRequest") {
        set(s, &["properties", "ttl_seconds"], integer(1, claim::MAX_TTL_SECONDS));
    }
    if let Some(s) = schemas.get_mut("BatchRequest") {
        set(s, &["properties", "items", "minItems"], json!(1));
        set(s, &["properties", "items", "maxItems"], json!(claim::MAX_ITEMS));
    }
    if let Some(s) = schemas.get_mut("LookupRequest") {
        set(
            s,
            &["properties", "items"],
            json!({"anyOf": [{"type": "array", "items": {"$ref": "#/components/schemas/KeyRef"}, "minItems": 1, "maxItems": claim::MAX_ITEMS}, {"type": "null"}]}),
        );
        set(s, &["properties", "prefix"], json!({"anyOf": [parts(), {"type": "null"}]}));
        s["oneOf"] = json!([
            {"required": ["items"], "properties": {"items": {"type": "array"}, "prefix": {"type": "null"}}},
            {"required": ["prefix"], "properties": {"prefix": {"type": "array"}, "items": {"type": "null"}}},
        ]);
    }
    if let Some(s) = schemas.get_mut("BeginRequest") {
        set(s, &["properties", "lease_seconds"], integer(1, operation::MAX_LEASE_SECONDS));
        set(s, &["properties", "wait_seconds"], integer(0, operation::MAX_WAIT_SECONDS));
        set(s, &["properties", "ttl_seconds"], integer(1, operation::MAX_TTL_SECONDS));
    }
    if let Some(s) = schemas.get_mut("ExtendRequest") {
        set(s, &["properties", "lease_seconds"], integer(1, operation::MAX_LEASE_SECONDS));
    }
    // Fields the server always writes (null when empty) are required; fields it leaves out when
    // empty are optional but never null; status fields name their one value.
    for (name, field) in [
        ("Record", "data"),
        ("Record", "expires_at"),
        ("Completed", "result"),
        ("ReceiptPage", "next_cursor"),
        ("ReceiptView", "result_webhook"),
        ("ResultView", "last_status_code"),
        ("ResultView", "last_error"),
    ] {
        if let Some(s) = schemas.get_mut(name) {
            require(s, field);
        }
    }
    for (name, field) in [
        ("LookupResult", "record"),
        ("ReceiptView", "attempts"),
        ("AttemptView", "status_code"),
        ("AttemptView", "error"),
        ("AttemptView", "response"),
        ("Problem", "field"),
    ] {
        if let Some(p) = schemas.get_mut(name).and_then(|s| s.pointer_mut(&format!("/properties/{field}"))) {
            never_null(p);
        }
    }
    for (name, value) in [
        ("Started", "started"),
        ("Completed", "completed"),
        ("InProgress", "in_progress"),
        ("ReplayResponse", "accepted"),
    ] {
        if let Some(s) = schemas.get_mut(name) {
            set(s, &["properties", "status"], json!({"type": "string", "enum": [value]}));
        }
    }
    if let Some(s) = schemas.get_mut("ReplayResponse") {
        set(s, &["properties", "replayed"], json!({"type": "boolean", "enum": [true]}));
    }
    let token = json!({"type": "string", "pattern": "^[0-9a-fA-F]{32}$", "description": "The token begin answered"});
    for name in ["CompleteRequest", "TokenRequest", "ExtendRequest"] {
        if let Some(s) = schemas.get_mut(name) {
            set(s, &["properties", "token"], token.clone());
        }
    }
}

/// Problem answers every `/v1` call can give, by status, when the handler's own list lacks them.
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

fn refine_paths(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for op in item.values_mut() {
            refine_parameters(path, op);
            refine_responses(path, op);
        }
    }
    // A signed source's intake needs no token: auth is optional there.
    if let Some(intake) = doc.pointer_mut("/paths/~1v1~1sources~1{name}~1events/post") {
        intake["security"] = json!([{}, {"bearer": []}]);
    }
}

fn refine_parameters(path: &str, op: &mut Value) {
    let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) else { return };
    for p in params.iter_mut() {
        let name = p["name"].as_str().unwrap_or("").to_owned();
        let schema = match (name.as_str(), p["in"].as_str()) {
            ("ns" | "name", Some("path")) => namespace(),
            ("id", Some("path")) if path.starts_with("/v1/receipts") => {
                json!({"type": "string", "pattern": "^rcpt_[0-9a-f]{36}$"})
            }
            ("id", Some("path")) => claim_id(),
            ("source", Some("query")) => namespace(),
            ("status", Some("query")) => {
                json!({"type": "string", "enum": ["accepted", "processing", "retrying", "completed", "dead", "discarded"]})
            }
            ("event_id", Some("query")) => json!({"type": "string", "pattern": "^[^\\u0000]*$"}),
            ("limit", Some("query")) => json!({"type": "integer", "minimum": 1, "maximum": 1000}),
            ("cursor", Some("query")) => json!({"type": "string", "pattern": "^rcpt_[0-9a-f]{36}$"}),
            _ => continue,
        };
        p["schema"] = schema;
        if p["in"] == "query" {
            p["required"] = json!(false);
        }
    }
}

fn refine_responses(path: &str, op: &mut Value) {
    let has_body = op.get("requestBody").is_some();
    let json_body = has_body && !path.ends_with("/events");
    let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else { return };
    // Errors are served as application/problem+json, whatever the annotation said.
    for answer in responses.values_mut() {
        if let Some(content) = answer.get_mut("content").and_then(Value::as_object_mut)
            && content.get("application/json").is_some_and(|c| c.to_string().contains("/Problem\""))
            && let Some(problem) = content.remove("application/json")
        {
            content.insert("application/problem+json".into(), problem);
        }
    }
    let problem = json!({"schema": {"$ref": "#/components/schemas/Problem"}});
    for (status, description) in common_answers(has_body, json_body) {
        responses.entry(status).or_insert_with(
            || json!({"description": description, "content": {"application/problem+json": problem.clone()}}),
        );
    }
    if path == "/v1/claims/{ns}/lookup"
        && let Some(ok) = responses.get_mut("200")
    {
        ok["content"]["application/json"]["schema"] = json!({"oneOf": [
            {"$ref": "#/components/schemas/LookupResponse"},
            {"$ref": "#/components/schemas/PrefixResponse"},
        ]});
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(schemas["ClaimRequest"]["properties"]["data"].get("type").is_none(), "data takes any JSON");
        assert_eq!(schemas["ClaimRequest"]["properties"]["ttl_seconds"]["minimum"], 1);
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
}
