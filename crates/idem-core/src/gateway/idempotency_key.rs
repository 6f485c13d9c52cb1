//! The `Idempotency-Key` header: a Structured Field string (`"8e03978e-…"`, RFC 8941 §3.3.3) as
//! the IETF draft specifies, or the same token bare as Stripe's clients send it. Either way 1 to 255
//! printable ASCII characters.

/// A valid key, unquoted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

pub const MAX_KEY_LEN: usize = 255;

/// Parses the header's value; the error says what is wrong, for a 400 problem.
pub fn parse_idempotency_key(raw: &str) -> Result<IdempotencyKey, &'static str> {
    let raw = raw.trim_matches(' ');
    let key = match raw.strip_prefix('"') {
        Some(quoted) => unquote(quoted)?,
        None => raw.to_owned(),
    };
    if key.is_empty() {
        return Err("the Idempotency-Key must not be empty");
    }
    if key.len() > MAX_KEY_LEN {
        return Err("the Idempotency-Key must be at most 255 characters");
    }
    if !key.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return Err("the Idempotency-Key may contain only printable ASCII");
    }
    Ok(IdempotencyKey(key))
}

/// The rest of an sf-string after its opening quote: `\"` and `\\` are the only escapes, and the
/// closing quote must end the value.
fn unquote(rest: &str) -> Result<String, &'static str> {
    let mut out = String::with_capacity(rest.len());
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                _ => return Err("the Idempotency-Key string has an invalid escape"),
            },
            '"' if chars.as_str().is_empty() => return Ok(out),
            '"' => return Err("the Idempotency-Key string has text after its closing quote"),
            c => out.push(c),
        }
    }
    Err("the Idempotency-Key string has no closing quote")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_sf_strings_and_bare_tokens() {
        let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
        assert_eq!(parse_idempotency_key(&format!("\"{uuid}\"")).expect("sf string").as_str(), uuid);
        assert_eq!(parse_idempotency_key(uuid).expect("bare").as_str(), uuid);
        assert_eq!(parse_idempotency_key(r#""a\"b\\c""#).expect("escapes").as_str(), r#"a"b\c"#);
        assert_eq!(parse_idempotency_key(&"k".repeat(255)).expect("255").as_str().len(), 255);
    }

    #[test]
    fn rejects_malformed_keys() {
        for bad in ["", "\"\"", "\"open", "\"a\"b", r#""a\nb""#, "caf\u{e9}", "tab\there", &"k".repeat(256)] {
            assert!(parse_idempotency_key(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
