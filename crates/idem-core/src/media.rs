//! Content types: which bodies count as JSON (for fingerprints and intake).

/// `application/json`, or any `application/…+json`, with or without parameters.
pub fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        for ct in
            ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/merge-patch+json"]
        {
            assert!(is_json(ct), "{ct}");
        }
        for ct in ["text/plain", "application/x-www-form-urlencoded", "json", ""] {
            assert!(!is_json(ct), "{ct}");
        }
    }
}
