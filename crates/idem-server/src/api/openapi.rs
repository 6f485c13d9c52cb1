//! The OpenAPI document of the whole `/v1` API. Paths, bodies and answers are generated from the
//! handlers' annotations so that they cannot drift from the code; [`document`] then states what the
//! annotations cannot, from the same constants the server enforces: the rules of namespaces, ids
//! and key parts, value ranges, fields that take any JSON, the problem+json errors every call can
//! answer (400, 401 when tokens are set, 403 when a token may not do this, 413, 415, 503), and
//! when bearer auth applies (never for a signed source's event intake: its signature is the
//! credential).
//!
//! It is written for generators too (Redocly's recommended lint and openapi-python-client run on
//! it in `scripts/check-openapi.sh`, and must say nothing): one answer shape per status, `key` or
//! `parts` as a `oneOf` of two closed object types, `format: date-time` on every `…_at`, the
//! headers answers carry, `servers`, and an example for every JSON request body.
//!
//! What it still cannot state (JSON Schema counts characters where idem counts a part's bytes, for
//! instance) is listed in the README's Testing section, with why.

use idem_core::{Namespace, Parts};
use serde_json::{Map, Value, json};
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use super::{claim, operation};

#[derive(OpenApi)]
#[openapi(
    info(title = "idem", description = "Make side effects happen once: claims, idempotency keys, operations, events."),
    paths(
        crate::api::claim::create, crate::api::claim::batch, crate::api::claim::lookup, crate::api::claim::prefix,
        crate::api::claim::read, crate::api::claim::delete,
        crate::api::operation::begin, crate::api::operation::complete, crate::api::operation::release,
        crate::api::operation::extend, crate::api::operation::read, crate::api::operation::delete,
        crate::api::event::intake, crate::api::receipt::read, crate::api::receipt::list, crate::api::receipt::replay,
        crate::api::receipt::replay_matching, crate::api::receipt::discard,
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
    refine_requests(&mut doc);
    // Relative: the idem that serves this document (its /openapi.json) serves the API too.
    doc["servers"] =
        json!([{"url": "/", "description": "The idem serving this document (by default http://127.0.0.1:7070)"}]);
    doc
}

/// An example body per operation that takes JSON: what a first call looks like.
fn example(operation: &str) -> Option<Value> {
    let token = "5f0c2b6e9d8a4f1e8b7c6d5e4f3a2b1c";
    Some(match operation {
        "claim" => json!({"parts": ["scenario-1", "user-3", "node-2"], "data": {"answer": "A"}, "ttl_seconds": 86400}),
        "claimBatch" => json!({"items": [{"key": "https://example.org/a"}, {"key": "https://example.org/b"}]}),
        "lookupClaims" => {
            json!({"items": [{"key": "https://example.org/a"}, {"parts": ["scenario-1", "user-3", "node-2"]}]})
        }
        "claimPrefixExists" => json!({"prefix": ["scenario-1", "user-3"]}),
        "beginOperation" => {
            json!({"key": "order-1042", "request": {"amount": 1200, "currency": "EUR"}, "lease_seconds": 1})
        }
        "completeOperation" => json!({"token": token, "result": {"charge_id": "ch_1042"}}),
        "releaseOperation" => json!({"token": token}),
        "extendOperation" => json!({"token": token, "lease_seconds": 120}),
        "replayReceipts" => {
            json!({"source": "partner", "status": "dead", "created_after": "2026-11-01T00:00:00Z", "dry_run": true})
        }
        _ => return None,
    })
}

fn refine_requests(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    for op in paths.values_mut().filter_map(Value::as_object_mut).flat_map(|item| item.values_mut()) {
        let id = op["operationId"].as_str().unwrap_or_default().to_owned();
        if let (Some(example), Some(json)) = (example(&id), op.pointer_mut("/requestBody/content/application~1json")) {
            json["example"] = example;
        }
    }
    // An event is taken as sent: JSON when the source's `event_id` is a JSON pointer, any bytes
    // when it is a header.
    if let Some(body) = doc.pointer_mut("/paths/~1v1~1sources~1{name}~1events/post/requestBody") {
        body["content"] = json!({
            "application/json": {"schema": {}, "example": {"external_event_id": "evt_1042", "type": "order.paid"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        });
    }
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

/// The one-part form of a key.
fn key() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": Parts::MAX_PART_BYTES, "pattern": "^[^\\u0000]+$", "description": "The one-part form of a key"})
}

/// `key` or `parts`, exactly one: `name` becomes a `oneOf` of two closed object schemas, one per
/// form (`by_key` and `by_parts`, each with the other fields of `name`), so that a generator makes
/// one plain type per form, and a body with both forms, or neither, matches neither.
fn split_key_or_parts(schemas: &mut Map<String, Value>, name: &str, by_key: &str, by_parts: &str) {
    let Some(schema) = schemas.remove(name) else { return };
    let variant = |form: &str, other: &str| {
        let mut v = schema.clone();
        if let Some(object) = v.as_object_mut() {
            object.remove("oneOf");
            object.remove("description");
        }
        if let Some(properties) = v.get_mut("properties").and_then(Value::as_object_mut) {
            properties.remove(other);
            properties.insert(form.to_owned(), if form == "key" { key() } else { parts() });
        }
        require(&mut v, form);
        v["additionalProperties"] = json!(false);
        v
    };
    schemas.insert(by_key.to_owned(), variant("key", "parts"));
    schemas.insert(by_parts.to_owned(), variant("parts", "key"));
    let description = schema.get("description").cloned().unwrap_or(json!(""));
    let refs = [by_key, by_parts].map(|n| json!({"$ref": format!("#/components/schemas/{n}")}));
    schemas.insert(name.to_owned(), json!({"description": description, "oneOf": refs}));
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
    refine_fields(schemas);
    timestamps(schemas);
    for (name, by_key, by_parts) in [
        ("ClaimRequest", "ClaimByKey", "ClaimByParts"),
        ("KeyRef", "KeyRefByKey", "KeyRefByParts"),
        ("BeginRequest", "BeginByKey", "BeginByParts"),
    ] {
        split_key_or_parts(schemas, name, by_key, by_parts);
    }
}

/// Every `…_at` field is an RFC 3339 UTC timestamp.
fn timestamps(schemas: &mut Map<String, Value>) {
    for schema in schemas.values_mut() {
        let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else { continue };
        for (name, property) in properties.iter_mut() {
            let string = |t: &Value| t == "string" || t.as_array().is_some_and(|ts| ts.iter().any(|t| t == "string"));
            if name.ends_with("_at") && property.get("type").is_some_and(string) {
                property["format"] = json!("date-time");
            }
        }
    }
}

fn refine_fields(schemas: &mut Map<String, Value>) {
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
            json!({"type": "array", "items": {"$ref": "#/components/schemas/KeyRef"}, "minItems": 1, "maxItems": claim::MAX_ITEMS, "description": "1 to 10,000 keys, answered in this order"}),
        );
        require(s, "items");
    }
    if let Some(s) = schemas.get_mut("PrefixRequest") {
        set(s, &["properties", "prefix"], parts());
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
    let op_id = op["operationId"].as_str().unwrap_or_default().to_owned();
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
    let described = header_descriptions();
    for (status, answer) in responses.iter_mut() {
        for (name, required) in headers(&op_id, status) {
            let mut header = described[name].clone();
            header["required"] = json!(required);
            set(answer, &["headers", name], header);
        }
    }
}

/// The headers an answer carries, beyond `Content-Type`, and whether it always carries them.
fn headers(operation: &str, status: &str) -> Vec<(&'static str, bool)> {
    match (operation, status) {
        (_, "503") => vec![("Retry-After", true)],
        // A signed source's 401 is a bad signature, which no bearer token fixes.
        ("acceptEvent", "401") => vec![("WWW-Authenticate", false)],
        (_, "401") => vec![("WWW-Authenticate", true)],
        ("beginOperation" | "deleteOperation", "409") => vec![("Retry-After", true)],
        ("beginOperation" | "acceptEvent", "200") => vec![("Idempotent-Replayed", true)],
        _ => vec![],
    }
}

/// The headers [`headers`] names, described once.
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
