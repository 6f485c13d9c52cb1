//! Where a key is in the config file: `sources[1].max_attempts` → line 14, column 1, so that each
//! mistake `idem config check` reports points at its place (a key given by an `IDEM_` variable or a
//! flag has no place in the file, and none is said).

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// One step of a displayed key path.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// `sources[1].max_attempts` as steps.
fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let (key, mut rest) = segment.split_once('[').map_or((segment, ""), |(k, r)| (k, r));
        if !key.is_empty() {
            out.push(Step::Key(key));
        }
        while let Some((index, after)) = rest.split_once(']') {
            if let Ok(i) = index.parse() {
                out.push(Step::Index(i));
            }
            rest = after.strip_prefix('[').unwrap_or(after);
        }
    }
    out
}

/// The line and column (1-based) where `path` is written in `text`: the key itself, or for an
/// element of an array its value; for a path that goes deeper than the file, the deepest part
/// that is there.
pub fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let document = DeTable::parse(text).ok()?;
    let mut table: &DeTable<'_> = document.get_ref();
    let mut value: Option<&Spanned<DeValue<'_>>> = None;
    let mut at: Option<std::ops::Range<usize>> = None;
    for step in steps(path) {
        match step {
            Step::Key(key) => {
                let current = match value.map(Spanned::get_ref) {
                    None => table,
                    Some(DeValue::Table(t)) => t,
                    Some(_) => break,
                };
                let Some((name, found)) = current.iter().find(|(name, _)| name.get_ref().as_ref() == key) else {
                    break;
                };
                at = Some(name.span());
                table = current;
                value = Some(found);
            }
            Step::Index(i) => {
                let Some(DeValue::Array(items)) = value.map(Spanned::get_ref) else { break };
                let Some(item) = items.get(i) else { break };
                at = Some(item.span());
                value = Some(item);
            }
        }
    }
    let start = at?.start.min(text.len());
    let before = &text[..start];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some((line, column))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_elements_are_found_where_the_file_has_them() {
        let text = "listen = \"x\"\n\n[gateway]\nlisten = \"y\"\n\n[[sources]]\nname = \"a\"\n\n[[sources]]\nname = \"b\"\n  max_attempts = 0\nbackoff = [\"1s\", \"nope\"]\n";
        assert_eq!(locate(text, "listen"), Some((1, 1)));
        assert_eq!(locate(text, "gateway.listen"), Some((4, 1)));
        assert_eq!(locate(text, "sources[1].max_attempts"), Some((11, 3)));
        assert_eq!(locate(text, "sources[1].backoff[1]"), Some((12, 18)));
        assert_eq!(locate(text, "sources[1].missing"), locate(text, "sources[1]"), "the deepest part there");
        assert_eq!(locate(text, "limits.max_body_bytes"), None, "not in the file");
    }
}
