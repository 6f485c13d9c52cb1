//! Where a source finds each event's id: a JSON pointer into the body (`/external_event_id`) or a
//! request header (`header:Idempotency-Key`). Parsed once, from config; applied on every intake.

use crate::Invalid;

/// The longest event id accepted, in bytes.
pub const MAX_EVENT_ID_BYTES: usize = 255;

/// A source's `event_id` that is neither a JSON pointer nor `header:NAME`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be a JSON pointer (\"/field\") or \"header:NAME\"")]
pub struct BadEventIdRule;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventIdRule {
    /// A JSON pointer (RFC 6901) into the body, which must then be JSON.
    Pointer(String),
    /// A header's value; the name as configured (header names match case-insensitively).
    Header(String),
}

impl EventIdRule {
    pub fn parse(text: &str) -> Result<Self, BadEventIdRule> {
        if text.starts_with('/') {
            return Ok(Self::Pointer(text.to_owned()));
        }
        match text.strip_prefix("header:").map(str::trim) {
            Some(name) if !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':') => {
                Ok(Self::Header(name.to_owned()))
            }
            _ => Err(BadEventIdRule),
        }
    }

    /// The rule as written in config; also the `field` named when an event breaks it.
    pub fn as_text(&self) -> String {
        match self {
            Self::Pointer(pointer) => pointer.clone(),
            Self::Header(name) => format!("header:{name}"),
        }
    }

    /// The event's id: the string or number at the pointer, or the header's value. `header` looks
    /// a header up by name.
    pub fn extract<'h>(&self, header: impl Fn(&str) -> Option<&'h str>, body: &[u8]) -> Result<String, Invalid> {
        let field = self.as_text();
        let id = match self {
            Self::Header(name) => match header(name).map(str::trim) {
                Some(value) if !value.is_empty() => value.to_owned(),
                _ => return Err(Invalid::new(field, "the event id header is missing")),
            },
            Self::Pointer(pointer) => {
                let json: serde_json::Value = serde_json::from_slice(body)
                    .map_err(|_| Invalid::new("body", "must be JSON: this source reads its event id from it"))?;
                match json.pointer(pointer) {
                    Some(serde_json::Value::String(s)) if !s.is_empty() => s.clone(),
                    Some(serde_json::Value::Number(n)) => n.to_string(),
                    Some(_) => return Err(Invalid::new(field, "the event id must be a non-empty string or a number")),
                    None => return Err(Invalid::new(field, "the event id is missing from the body")),
                }
            }
        };
        if id.len() > MAX_EVENT_ID_BYTES {
            return Err(Invalid::new(field, format!("the event id must be at most {MAX_EVENT_ID_BYTES} bytes")));
        }
        Ok(id)
    }
}

impl<'de> serde::Deserialize<'de> for EventIdRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for EventIdRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<&'static str> {
        None
    }

    #[test]
    fn ids_come_from_a_pointer_or_a_header() {
        let header = EventIdRule::parse("header:Idempotency-Key").expect("valid");
        let found = |name: &str| name.eq_ignore_ascii_case("idempotency-key").then_some("evt-9");
        assert_eq!(header.extract(found, b"").expect("header"), "evt-9");
        let pointer = EventIdRule::parse("/external_event_id").expect("valid");
        assert_eq!(pointer.extract(none, br#"{"external_event_id":"e1"}"#).expect("string"), "e1");
        let nested = EventIdRule::parse("/a/b").expect("valid");
        assert_eq!(nested.extract(none, br#"{"a":{"b":42}}"#).expect("number"), "42");
    }

    #[test]
    fn missing_or_unusable_ids_name_the_rule() {
        let rule = |t: &str| EventIdRule::parse(t).expect("valid");
        for (r, body, field) in [
            ("/x", &b"not json"[..], "body"),
            ("/x", br#"{"y":1}"#, "/x"),
            ("/x", br#"{"x":null}"#, "/x"),
            ("/x", br#"{"x":""}"#, "/x"),
            ("header:Missing", b"{}", "header:Missing"),
        ] {
            assert_eq!(rule(r).extract(none, body).map_err(|e| e.field), Err(field.to_owned()), "{r} {body:?}");
        }
        let long = format!("{{\"x\":\"{}\"}}", "a".repeat(256));
        assert!(rule("/x").extract(none, long.as_bytes()).is_err(), "at most 255 bytes");
    }

    #[test]
    fn rules_parse_or_say_what_is_wanted() {
        assert_eq!(EventIdRule::parse("header:X-Id").map(|r| r.as_text()), Ok("header:X-Id".to_owned()));
        for bad in ["external_event_id", "header:", "header: ", "cookie:x"] {
            assert!(EventIdRule::parse(bad).is_err(), "{bad}");
        }
    }
}
