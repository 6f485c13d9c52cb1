//! Request fingerprints: SHA-256 over method, path, query and body, so that a key reused for a
//! different request is caught (422). A JSON body is canonicalised first — object keys sorted,
//! insignificant whitespace dropped — so that a client re-serialising the same JSON differently is
//! still the same request. Any other body counts byte for byte.

use sha2::{Digest, Sha256};

pub type Fingerprint = [u8; 32];

/// `json` says whether the body claims to be JSON (by its content type); a body that claims to be
/// JSON but does not parse is fingerprinted as raw bytes.
pub fn fingerprint(method: &str, path: &str, query: &str, body: &[u8], json: bool) -> Fingerprint {
    let mut hasher = Sha256::new();
    for part in [method.as_bytes(), path.as_bytes(), query.as_bytes()] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    match json.then(|| canonical_json(body)).flatten() {
        Some(canonical) => {
            hasher.update(b"json");
            hasher.update(canonical);
        }
        None => {
            hasher.update(b"raw!");
            hasher.update(body);
        }
    }
    hasher.finalize().into()
}

/// The canonical form: serde_json's `Value` keeps objects in sorted maps, and its compact writer
/// adds no whitespace.
fn canonical_json(body: &[u8]) -> Option<Vec<u8>> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    serde_json::to_vec(&value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn fp(body: &str) -> Fingerprint {
        fingerprint("POST", "/orders", "", body.as_bytes(), true)
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        assert_eq!(fp(r#"{"a":1,"b":[1,2]}"#), fp("{ \"b\" : [1, 2],\n  \"a\": 1 }"));
    }

    #[test]
    fn method_path_query_and_body_all_count() {
        let base = fingerprint("POST", "/orders", "x=1", b"{}", true);
        assert_ne!(base, fingerprint("PATCH", "/orders", "x=1", b"{}", true));
        assert_ne!(base, fingerprint("POST", "/order", "x=1", b"{}", true));
        assert_ne!(base, fingerprint("POST", "/orders", "x=2", b"{}", true));
        assert_ne!(base, fingerprint("POST", "/orders", "x=1", b"[]", true));
        assert_ne!(fingerprint("POST", "/a", "b", b"", false), fingerprint("POST", "/ab", "", b"", false));
    }

    #[test]
    fn non_json_bodies_count_byte_for_byte() {
        let raw = |b: &[u8]| fingerprint("POST", "/upload", "", b, false);
        assert_ne!(raw(b"a=1&b=2"), raw(b"b=2&a=1"));
        assert_eq!(raw(b"\x00\xff"), raw(b"\x00\xff"));
        assert_ne!(fp("{not json"), fp("{not  json"), "unparseable JSON is raw bytes");
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z0-9 ]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Writes `value` with its object keys in reverse order and extra whitespace.
    fn scrambled(value: &Value) -> String {
        match value {
            Value::Object(map) => {
                let fields: Vec<String> =
                    map.iter().rev().map(|(k, v)| format!(" {} :\n {} ", json!(k), scrambled(v))).collect();
                format!("{{ {} }}", fields.join(" , "))
            }
            Value::Array(items) => format!("[ {} ]", items.iter().map(scrambled).collect::<Vec<_>>().join(" ,\t")),
            other => other.to_string(),
        }
    }

    proptest! {
        #[test]
        fn reordering_and_whitespace_keep_the_fingerprint(value in json_value()) {
            prop_assert_eq!(fp(&value.to_string()), fp(&scrambled(&value)));
        }

        #[test]
        fn any_value_change_changes_the_fingerprint(value in json_value(), other in json_value()) {
            prop_assume!(value != other);
            prop_assert_ne!(fp(&value.to_string()), fp(&other.to_string()));
        }
    }
}
