//! The claim ids the server computes, against the vectors both clients are tested with
//! (`clients/testdata/claim_ids.json`, recorded from a real `idem serve`): one file, three
//! implementations, the same ids.

use idem_core::Parts;

#[test]
fn ids_match_the_shared_vectors() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/testdata/claim_ids.json");
    let text = std::fs::read_to_string(path).expect("the shared vectors");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let vectors = doc["vectors"].as_array().expect("vectors");
    assert!(vectors.len() >= 20, "{} vectors", vectors.len());
    let mut keys = 0;
    for v in vectors {
        let parts: Vec<String> =
            v["parts"].as_array().expect("parts").iter().map(|p| p.as_str().expect("a string").to_owned()).collect();
        let id = Parts::new(parts.clone()).expect("valid parts").id().to_string();
        assert_eq!(id, v["id"].as_str().expect("id"), "{parts:?}");
        // A one-part entry also carries its `key` form, which names the same id.
        if let Some(key) = v.get("key") {
            let key = key.as_str().expect("a string key").to_owned();
            assert_eq!(parts, std::slice::from_ref(&key), "key and parts disagree");
            assert_eq!(Parts::single(key).expect("valid key").id().to_string(), id);
            keys += 1;
        }
    }
    assert!(keys > 0, "no single-key vectors");
}
