//! A config file that is not valid TOML, said in words a user fixes: the line and column, the line
//! itself (unless it holds a secret), and for a bare word where a value is expected, the line as it
//! should be (`strings need quotes: level = "info"`). A syntax mistake does not hide the others: a
//! bad line of `key = value` is left out and the file read again, so the rest is still checked;
//! when it cannot be read past the mistake (a bad `[table]` header), the message says the rest was
//! not checked.

use std::fmt::Write;

/// Syntax mistakes read past at most; a bound on the loop whatever the file holds.
const MAX_MISTAKES: usize = 10;

/// Keys whose values are secrets (a [`super::Secret`] or signing secrets): a line of theirs is
/// never quoted back, since it may hold a token or a password.
const SECRET_KEYS: &[&str] = &["tokens", "token", "url", "direct_url", "secret", "signing_secret", "verify_secret"];

/// The file, read past its syntax mistakes.
pub(super) struct Read {
    /// The tree without the lines left out; `None` when the file cannot be read past a mistake.
    pub tree: Option<toml::Table>,
    /// Each syntax mistake, in words.
    pub mistakes: Vec<String>,
    /// The text as read: each line left out is blank, so every other line keeps its number.
    pub text: String,
    /// The keys of the lines left out, whose absence is not another mistake.
    pub skipped: Vec<String>,
}

/// Reads `text`, leaving out each `key = value` line that is not valid TOML, until the rest reads.
pub(super) fn read(text: &str) -> Read {
    let mut read = Read { tree: None, mistakes: Vec::new(), text: text.to_owned(), skipped: Vec::new() };
    while read.mistakes.len() < MAX_MISTAKES {
        let error = match read.text.parse::<toml::Table>() {
            Ok(tree) => {
                read.tree = Some(tree);
                break;
            }
            Err(error) => error,
        };
        let (line, column) = place(&read.text, &error);
        let mut mistake = explain(&read.text, line, column, error.message().trim_end());
        let Some(key) = leave_out(&mut read.text, line) else {
            mistake.push_str("\n    The rest of the file cannot be read past this line, so it was not checked.");
            read.mistakes.push(mistake);
            return read;
        };
        let _ = write!(mistake, "\n    The rest of the file was checked with line {line} left out.");
        read.mistakes.push(mistake);
        read.skipped.extend(key);
    }
    if let (None, Some(last)) = (&read.tree, read.mistakes.last_mut()) {
        last.push_str("\n    There are more syntax mistakes than that: the rest of the file was not checked.");
    }
    read
}

/// The 1-based line and column of the error.
fn place(text: &str, error: &toml::de::Error) -> (usize, usize) {
    let start = error.span().map_or(text.len(), |span| span.start.min(text.len()));
    let before = &text[..start];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// `line 2, column 9: strings need quotes: level = "info"`, then the line with a mark under the
/// column (or, for a secret's line, its key alone).
fn explain(text: &str, line: usize, column: usize, what: &str) -> String {
    let content = text.lines().nth(line - 1).unwrap_or("");
    let secret = governing_key(text, line).filter(|k| SECRET_KEYS.contains(&leaf(k)));
    let what = match quoted(content) {
        Some(_) if secret.is_some() => "a bare word where a value is expected: strings need quotes".to_owned(),
        Some(fixed) => format!("a bare word where a value is expected: strings need quotes: {fixed}"),
        None => what.to_owned(),
    };
    let number = line.to_string();
    let Some(key) = secret else {
        let mark = format!("{}^", " ".repeat(column.saturating_sub(1)));
        return format!(
            "line {line}, column {column}: {what}\n    {number} | {content}\n    {:w$} | {mark}",
            "",
            w = number.len()
        );
    };
    let shown = own_key(content).map_or_else(|| "…".to_owned(), |own| format!("{own} = …"));
    format!(
        "line {line}, column {column}: {what} (the value is not shown: `{key}` holds a secret)\n    {number} | {shown}"
    )
}

/// The key a line assigns, as written: `level` in `level = info`; `None` for a table header, or
/// a line inside a multi-line value.
fn own_key(line: &str) -> Option<&str> {
    let line = line.trim_start();
    if line.starts_with('[') || line.starts_with('#') {
        return None;
    }
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    (!key.is_empty() && !key.contains(['[', '{', ',', ' '])).then_some(key)
}

/// The key the line belongs to: its own, or that of the nearest assignment above it (the opening
/// line of a multi-line array), up to the table's header.
fn governing_key(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().take(line).collect();
    for content in lines.iter().rev() {
        if let Some(key) = own_key(content) {
            return Some(key.to_owned());
        }
        if content.trim_start().starts_with('[') {
            return None;
        }
    }
    None
}

/// The last part of a dotted key, unquoted: `url` of `store.url`.
fn leaf(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key).trim().trim_matches(['"', '\''])
}

/// The line as it should be when its value (or an element of its one-line array) is a bare word:
/// `level = "info"`, `backoff = ["10s", "1m"]`, or for an element alone on its line, `"10s",`.
fn quoted(line: &str) -> Option<String> {
    let (key, value) = match own_key(line) {
        Some(key) => (Some(key), line.split_once('=').map_or("", |(_, v)| v)),
        None if line.trim_start().starts_with(['[', '#']) => return None,
        None => (None, line),
    };
    let value = value.trim().trim_end_matches(',');
    let value = value.split_once(" #").map_or(value, |(v, _)| v).trim();
    let fixed = match value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        Some(items) if key.is_some() => {
            let items: Option<Vec<String>> = items.split(',').map(|item| bare(item.trim())).collect();
            format!("[{}]", items?.join(", "))
        }
        _ => bare_word(value)?,
    };
    if fixed == value {
        return None;
    }
    Some(match key {
        Some(key) => format!("{key} = {fixed}"),
        None => format!("{fixed},"),
    })
}

/// An array element as it should be: itself when it is a TOML value, else quoted.
fn bare(item: &str) -> Option<String> {
    if is_value(item) { Some(item.to_owned()) } else { bare_word(item) }
}

/// A bare word, quoted: one that is no TOML value and starts no string, array or table.
fn bare_word(word: &str) -> Option<String> {
    let starts_other = word.starts_with(['"', '\'', '[', '{']);
    (!word.is_empty() && !starts_other && !is_value(word)).then(|| toml::Value::String(word.to_owned()).to_string())
}

fn is_value(text: &str) -> bool {
    format!("v = {text}").parse::<toml::Table>().is_ok()
}

/// Blanks `line` so that the rest can be read; answers the key it held (if any), or `None` when
/// leaving it out cannot help: a table header (its keys would land in another table), or a line
/// with nothing on it (the mistake is in what came before).
fn leave_out(text: &mut String, line: usize) -> Option<Option<String>> {
    let content = text.lines().nth(line - 1)?;
    let trimmed = content.trim();
    if trimmed.is_empty() || trimmed.starts_with('[') {
        return None;
    }
    let key = own_key(content).map(|k| leaf(k).to_owned());
    let start: usize = text.split_inclusive('\n').take(line - 1).map(str::len).sum();
    let end = start + content.len();
    text.replace_range(start..end, "");
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_word_is_told_to_be_quoted_and_the_rest_is_read() {
        let read = read("[log]\nlevel = info\nformat = \"json\"\n");
        assert_eq!(read.mistakes.len(), 1, "{:?}", read.mistakes);
        let mistake = &read.mistakes[0];
        assert!(
            mistake.starts_with(
                "line 2, column 9: a bare word where a value is expected: strings need quotes: level = \"info\"\n    \
                 2 | level = info\n      |         ^\n"
            ),
            "{mistake}"
        );
        assert!(mistake.ends_with("checked with line 2 left out."), "{mistake}");
        let tree = read.tree.expect("the rest reads");
        assert_eq!(tree["log"]["format"].as_str(), Some("json"), "the lines after it are read");
        assert_eq!(read.skipped, ["level"]);
        assert_eq!(read.text, "[log]\n\nformat = \"json\"\n", "line numbers kept");
    }

    #[test]
    fn bare_words_in_arrays_and_dotted_keys_are_quoted_too() {
        assert_eq!(quoted("backoff = [10s, 1m, 3]").as_deref(), Some("backoff = [\"10s\", \"1m\", 3]"));
        assert_eq!(quoted("log.level = debug # more").as_deref(), Some("log.level = \"debug\""));
        assert_eq!(quoted("listen = 0.0.0.0:7070").as_deref(), Some("listen = \"0.0.0.0:7070\""));
        assert_eq!(quoted("  10s,").as_deref(), Some("\"10s\","), "an element on its own line");
        assert_eq!(quoted("batch = 10"), None, "a value");
        assert_eq!(quoted("level = \"info"), None, "a string not closed is no bare word");
        assert_eq!(quoted("[log"), None);
    }

    #[test]
    fn several_mistakes_are_all_told() {
        let read = read("listen = localhost:7070\n[sweeper]\nbatch = 5\ninterval = 10s\n");
        assert_eq!(read.mistakes.len(), 2, "{:?}", read.mistakes);
        assert!(read.mistakes[1].starts_with("line 4, column "), "{:?}", read.mistakes);
        assert!(read.mistakes[1].contains("interval = \"10s\""), "{:?}", read.mistakes);
        assert_eq!(read.tree.expect("the rest reads")["sweeper"]["batch"].as_integer(), Some(5));
    }

    #[test]
    fn a_bad_header_stops_the_reading_and_says_so() {
        let read = read("[log\nlevel = \"info\"\n");
        assert!(read.tree.is_none());
        assert_eq!(read.mistakes.len(), 1);
        assert!(read.mistakes[0].starts_with("line 1, column"), "{:?}", read.mistakes);
        assert!(read.mistakes[0].contains("    1 | [log\n"), "{:?}", read.mistakes);
        assert!(read.mistakes[0].ends_with("so it was not checked."), "{:?}", read.mistakes);
    }

    #[test]
    fn a_secrets_line_is_never_quoted() {
        for text in [
            "[auth]\ntokens = [idem_s3cret]\n",
            "[auth]\ntokens = [\n  idem_s3cret,\n]\n",
            "[store]\ntype = \"postgres\"\nurl = postgres://idem:s3cret@db/idem\n",
            "[[auth.token]]\nname = \"p\"\ntoken = \"s3cret\n",
        ] {
            let read = read(text);
            let all = read.mistakes.join("\n");
            assert!(!all.contains("s3cret") && all.contains("not shown"), "{text:?}: {all}");
        }
    }
}
