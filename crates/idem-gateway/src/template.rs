//! `errors_template`: idem's own answers written in a JSON document of the operator's, for an
//! upstream whose clients expect an error shape of its own.
//!
//! The document is JSON with placeholders: `{{type}}` (`urn:idem:problem:<kind>`), `{{kind}}`
//! (`request-in-flight`), `{{title}}` (the status's reason, `Conflict`), `{{detail}}` (what happened
//! and what the client may do) and `{{status}}` (`409`). Within a string a placeholder is replaced by
//! its text, JSON-escaped, so that no detail can break the document (`"{{status}}"` is the string
//! `"409"`); standing alone, as a value, by its JSON value: the status a number, the others strings
//! (`"status": {{status}}` is `"status": 409`). `{{` always opens a placeholder. The document is
//! checked once, when it is parsed (at config load): it names no other placeholder, and is JSON
//! with them filled in, whatever they hold. Rendering then cannot fail.
//!
//! A template knows its placeholders, not idem's answers: [`crate::problem`] fills them in
//! ([`Filling`]) for each answer it writes in this shape.

/// Why a template cannot be used; the message leaves out where it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("is not JSON once its placeholders are filled in: {0}")]
    NotJson(String),
    #[error("has a {{{{ that opens no placeholder; the placeholders are {list}", list = placeholders())]
    Unopened,
    #[error("names the placeholder {{{{{name}}}}}, which is not one of {list}", name = .0, list = placeholders())]
    Unknown(String),
}

/// What the placeholders are filled with: one of idem's answers, in words.
#[derive(Debug, Clone, Copy)]
pub struct Filling<'a> {
    /// `{{type}}`: `urn:idem:problem:<kind>`.
    pub type_uri: &'a str,
    /// `{{kind}}`: `request-in-flight`.
    pub kind: &'a str,
    /// `{{title}}`: the status's reason, `Conflict`.
    pub title: &'a str,
    /// `{{detail}}`: what happened and what the client may do.
    pub detail: &'a str,
    /// `{{status}}`: `409`.
    pub status: u16,
}

/// A parsed `errors_template`.
#[derive(Debug)]
pub struct Template {
    /// Where it came from (the file's path as the config names it).
    name: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Type,
    Kind,
    Title,
    Detail,
    Status,
}

#[derive(Debug)]
enum Part {
    Literal(String),
    /// A placeholder within a string: its text, JSON-escaped.
    Text(Field),
    /// A placeholder standing alone: its JSON value.
    Value(Field),
}

/// Every placeholder, by name.
const FIELDS: [(&str, Field); 5] = [
    ("type", Field::Type),
    ("kind", Field::Kind),
    ("title", Field::Title),
    ("detail", Field::Detail),
    ("status", Field::Status),
];

/// The longest text between `{{` and `}}` taken for a placeholder's name.
const LONGEST_NAME: usize = 32;

/// What a template is checked with when it is parsed. Whatever a text holds is escaped: if this
/// makes JSON, every answer does.
const SAMPLE: Filling<'static> = {
    let text = "\"quoted\" \\ and\na line";
    Filling { type_uri: text, kind: text, title: text, detail: text, status: 409 }
};

impl Field {
    fn named(name: &str) -> Result<Self, TemplateError> {
        let found = FIELDS.iter().find(|(known, _)| *known == name.trim());
        found.map(|(_, field)| *field).ok_or_else(|| TemplateError::Unknown(name.to_owned()))
    }

    fn text(self, filling: &Filling) -> String {
        match self {
            Self::Type => filling.type_uri.to_owned(),
            Self::Kind => filling.kind.to_owned(),
            Self::Title => filling.title.to_owned(),
            Self::Detail => filling.detail.to_owned(),
            Self::Status => filling.status.to_string(),
        }
    }
}

fn placeholders() -> String {
    FIELDS.iter().map(|(name, _)| format!("{{{{{name}}}}}")).collect::<Vec<_>>().join(", ")
}

impl Template {
    /// Parses `text`, read from `origin`.
    pub fn parse(origin: impl Into<String>, text: &str) -> Result<Self, TemplateError> {
        let bytes = text.as_bytes();
        let (mut parts, mut start, mut i) = (Vec::new(), 0, 0);
        let (mut in_string, mut escaped) = (false, false);
        // Byte by byte: `"`, `\` and `{` are ASCII, never inside another character's UTF-8.
        while i < bytes.len() {
            match bytes[i] {
                _ if escaped => escaped = false,
                b'\\' if in_string => escaped = true,
                b'"' => in_string = !in_string,
                b'{' if bytes.get(i + 1) == Some(&b'{') => {
                    let after = &text[i + 2..];
                    let name = after.find("}}").map(|close| &after[..close]);
                    let Some(name) = name.filter(|n| n.len() <= LONGEST_NAME && !n.contains('"')) else {
                        return Err(TemplateError::Unopened);
                    };
                    let field = Field::named(name)?;
                    parts.push(Part::Literal(text[start..i].to_owned()));
                    parts.push(if in_string { Part::Text(field) } else { Part::Value(field) });
                    i += name.len() + 4;
                    start = i;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        parts.push(Part::Literal(text[start..].to_owned()));
        let template = Self { name: origin.into(), parts };
        let sample = template.render(&SAMPLE);
        serde_json::from_str::<serde_json::Value>(&sample).map_err(|e| TemplateError::NotJson(e.to_string()))?;
        Ok(template)
    }

    /// Where it came from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The document with its placeholders filled in.
    pub fn render(&self, filling: &Filling) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Value(Field::Status) => out.push_str(&filling.status.to_string()),
                Part::Value(field) => out.push_str(&quoted(&field.text(filling))),
                Part::Text(field) => {
                    let quoted = quoted(&field.text(filling));
                    // Without its quotes: it goes inside the template's string.
                    out.push_str(&quoted[1..quoted.len() - 1]);
                }
            }
        }
        out
    }
}

/// `text` as a JSON string, quotes and all.
fn quoted(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// A 409 or a 504, as `crate::problem` fills them in.
    fn answer(status: u16, detail: &str) -> Filling<'_> {
        let (type_uri, kind, title) = match status {
            409 => ("urn:idem:problem:request-in-flight", "request-in-flight", "Conflict"),
            _ => ("urn:idem:problem:upstream-timeout", "upstream-timeout", "Gateway Timeout"),
        };
        Filling { type_uri, kind, title, detail, status }
    }

    fn render(text: &str, filling: Filling) -> Value {
        let template = Template::parse("t.json", text).expect("a template");
        serde_json::from_str(&template.render(&filling)).expect("JSON")
    }

    #[test]
    fn placeholders_are_filled_in_escaped_within_strings_and_as_values_alone() {
        let text = "{\n  \"error\": {\"kind\": \"{{kind}}\", \"message\": \"idem: {{ detail }}\", \"detail\": {{detail}},\n  \"http\": {{status}}, \"code\": \"{{status}}\", \"line\": \"{{status}} {{title}}\", \"see\": [{{type}}]}\n}";
        let detail = "a \"quoted\" word, a \\ backslash, a\nnew line, a tab\t, a \u{1} control, é and {{detail}}";
        let expected = json!({"error": {
            "kind": "request-in-flight",
            "message": format!("idem: {detail}"),
            "detail": detail,
            "http": 409,
            "code": "409",
            "line": "409 Conflict",
            "see": ["urn:idem:problem:request-in-flight"],
        }});
        assert_eq!(render(text, answer(409, detail)), expected);
    }

    #[test]
    fn an_escaped_quote_does_not_end_the_string() {
        let text = r#"{"said": "\"{{status}}\" \\", "n": [{{status}}], "k": "{{kind}}"}"#;
        let expected = json!({"said": "\"504\" \\", "n": [504], "k": "upstream-timeout"});
        assert_eq!(render(text, answer(504, "")), expected);
    }

    #[test]
    fn a_template_without_placeholders_is_the_same_for_every_answer() {
        for filling in [answer(409, "x"), answer(504, "y")] {
            assert_eq!(render(r#"{"error": "busy"}"#, filling), json!({"error": "busy"}));
        }
    }

    #[test]
    fn mistakes_are_found_when_it_is_parsed() {
        let err = |text: &str| Template::parse("t.json", text).expect_err(text).to_string();
        let broken = err(r#"{"a": "{{detail}}""#);
        assert!(broken.starts_with("is not JSON once its placeholders are filled in"), "{broken}");
        let unknown = err(r#"{"a": "{{message}}"}"#);
        assert!(unknown.contains("{{message}}") && unknown.contains("{{detail}}, {{status}}"), "{unknown}");
        let open = err(r#"{"a": "{{detail"}"#);
        assert!(open.contains("opens no placeholder"), "{open}");
        let key = err(r#"{ {{status}}: 1}"#);
        assert!(key.starts_with("is not JSON"), "a number cannot be a key: {key}");
        assert_eq!(Template::parse("errors/api.json", "{}").map(|t| t.name().to_owned()), Ok("errors/api.json".into()));
    }
}
