//! Reading the config tree into [`Config`] with every mistake reported at once, not one per run.
//!
//! serde stops at the first error. So each error is recorded with its key path, the key at fault is
//! taken out of the tree, and the tree is read again, until it reads (or nothing more can be taken
//! out). A missing required field is filled with a stand-in that reads (so that the next missing
//! one is found too), or, when none does, its table is taken out whole (an element of an array of
//! tables, such as one `[[sources]]`, is taken out of its array, and later paths are given the
//! index the file has). A value taken out for being wrong is not reported again as missing.

use std::collections::BTreeMap;

use serde_path_to_error::Segment;

use super::{Config, ConfigError};

/// More mistakes than anyone fixes in one go; a bound on the loop whatever the tree holds.
const MAX_ERRORS: usize = 50;

/// The config, when the tree reads once its mistakes are taken out, and every mistake found.
pub(super) struct Read {
    pub config: Option<Config>,
    pub errors: Vec<ConfigError>,
    /// Paths whose values validation must not judge: arrays of tables that lost an element (their
    /// indices moved) and tables given stand-ins.
    pub unsure: Vec<String>,
}

/// Values tried, in turn, for a missing required field: one reads as a name, a URL, a JSON
/// pointer, a signing secret, a number, a switch or a list.
fn stand_ins() -> [toml::Value; 7] {
    [
        toml::Value::String("x".into()),
        toml::Value::String("http://127.0.0.1:9/".into()),
        toml::Value::String("/x".into()),
        toml::Value::String("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
        toml::Value::Integer(1),
        toml::Value::Boolean(true),
        toml::Value::Array(Vec::new()),
    ]
}

/// One step of a path, as the file spells it.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

pub(super) fn read(tree: toml::Table, plain: impl Fn(&str) -> String) -> Read {
    let mut tree = toml::Value::Table(tree);
    let mut errors = Vec::new();
    let mut taken_out: Vec<String> = Vec::new();
    let mut unsure: Vec<String> = Vec::new();
    // For each array of tables that lost elements: the file's index of each element left.
    let mut survivors: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let finish = |config, errors, mut unsure: Vec<String>, survivors: BTreeMap<String, Vec<usize>>| {
        unsure.extend(survivors.into_keys());
        Read { config, errors, unsure }
    };
    while errors.len() < MAX_ERRORS {
        let error = match serde_path_to_error::deserialize::<_, Config>(tree.clone()) {
            Ok(config) => return finish(Some(config), errors, unsure, survivors),
            Err(e) => e,
        };
        // toml adds where it was (`in `sources.backoff``), without the index: the key says it.
        let text = error.inner().to_string();
        let message = plain(text.split("\nin `").next().unwrap_or(&text).trim());
        let steps = steps(error.path());
        let shown = display(&steps, &survivors);
        if let Some(field) = missing_field(&message) {
            if !taken_out.contains(&join(&shown, &field)) {
                errors.push(ConfigError::Key { key: shown.clone(), message });
            }
            if stand_in(&mut tree, &steps, &field) {
                unsure.push(shown);
                continue;
            }
            // No stand-in reads: the table goes, whole.
            if steps.is_empty() || !remove(&mut tree, &steps, &mut survivors) {
                break;
            }
            continue;
        }
        errors.push(ConfigError::Key { key: shown, message: with_suggestion(&message) });
        let cut = leaf_key(&steps, unknown_field(&message));
        let cut_shown = display(&cut, &survivors);
        if cut.is_empty() || !remove(&mut tree, &cut, &mut survivors) {
            break;
        }
        taken_out.push(cut_shown);
    }
    finish(None, errors, unsure, survivors)
}

/// Fills the missing `field` of the table at `steps` with the first stand-in after which the tree
/// no longer fails on that field; false (and the tree unchanged) when none does.
fn stand_in(tree: &mut toml::Value, steps: &[Step], field: &str) -> bool {
    let mut at = steps.to_vec();
    at.push(Step::Key(field.to_owned()));
    for value in stand_ins() {
        let mut tried = tree.clone();
        let Some(table) = node(&mut tried, steps).and_then(toml::Value::as_table_mut) else { return false };
        table.insert(field.to_owned(), value);
        let still = match serde_path_to_error::deserialize::<_, Config>(tried.clone()) {
            Ok(_) => false,
            Err(e) => {
                let path = self::steps(e.path());
                path == at || (path == steps && missing_field(&e.inner().to_string()).as_deref() == Some(field))
            }
        };
        if !still {
            *tree = tried;
            return true;
        }
    }
    false
}

fn node<'a>(tree: &'a mut toml::Value, steps: &[Step]) -> Option<&'a mut toml::Value> {
    let mut node = tree;
    for step in steps {
        node = match step {
            Step::Key(key) => node.get_mut(key.as_str())?,
            Step::Index(i) => node.get_mut(*i)?,
        };
    }
    Some(node)
}

fn steps(path: &serde_path_to_error::Path) -> Vec<Step> {
    path.iter()
        .filter_map(|segment| match segment {
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

/// `missing field `x``: the field's name.
fn missing_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_owned())
}

/// `unknown field `x`, expected …`: the field's name.
fn unknown_field(message: &str) -> Option<&str> {
    message.strip_prefix("unknown field `")?.split('`').next()
}

/// `unknown field `max_attempt`, expected one of `name`, …` (or `unknown variant …` for a value
/// such as `format = "jsno"`), with "did you mean `max_attempts`?" when one of the expected names
/// is close to it (a swap of two neighbouring letters counts as one edit).
fn with_suggestion(message: &str) -> String {
    let variant = message.strip_prefix("unknown variant `").and_then(|rest| rest.split('`').next());
    let Some(unknown) = unknown_field(message).or(variant) else { return message.to_owned() };
    let Some((_, expected)) = message.split_once("expected") else { return message.to_owned() };
    let names = expected.split('`').skip(1).step_by(2);
    let close = names
        .map(|name| (super::env::edit_distance(unknown, name), name))
        .filter(|(d, name)| *d <= (name.len() / 3).max(1))
        .min_by_key(|(d, _)| *d);
    match close {
        Some((_, name)) => format!("{message}. Did you mean `{name}`?"),
        None => message.to_owned(),
    }
}

/// What to take out for a bad value or an unknown key: the key itself, or, for an element of a
/// plain array (`backoff[2]`, `tokens[1]`), the whole array, so that no index moves.
fn leaf_key(steps: &[Step], unknown: Option<&str>) -> Vec<Step> {
    let mut cut = steps.to_vec();
    if let Some(field) = unknown
        && cut.last() != Some(&Step::Key(field.to_owned()))
    {
        cut.push(Step::Key(field.to_owned()));
    }
    while matches!(cut.last(), Some(Step::Index(_))) {
        cut.pop();
    }
    cut
}

/// Takes the value at `steps` out of the tree; false when there is none (no progress possible).
fn remove(tree: &mut toml::Value, steps: &[Step], survivors: &mut BTreeMap<String, Vec<usize>>) -> bool {
    let Some((last, parents)) = steps.split_last() else { return false };
    let Some(node) = node(tree, parents) else { return false };
    match (last, node) {
        (Step::Key(key), toml::Value::Table(table)) => table.remove(key).is_some(),
        (Step::Index(i), toml::Value::Array(array)) if *i < array.len() => {
            let path = display(parents, survivors);
            let left = survivors.entry(path).or_insert_with(|| (0..array.len()).collect());
            left.remove(*i);
            array.remove(*i);
            true
        }
        _ => false,
    }
}

/// The path as the file has it: `sources[2].backoff`, with each index the element had in the file.
fn display(steps: &[Step], survivors: &BTreeMap<String, Vec<usize>>) -> String {
    let mut shown = String::new();
    for step in steps {
        match step {
            Step::Key(key) => {
                if !shown.is_empty() {
                    shown.push('.');
                }
                shown.push_str(key);
            }
            Step::Index(i) => {
                let index = survivors.get(&shown).and_then(|left| left.get(*i)).copied().unwrap_or(*i);
                shown.push_str(&format!("[{index}]"));
            }
        }
    }
    shown
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() { field.to_owned() } else { format!("{path}.{field}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        let read = read(text.parse().expect("toml"), str::to_owned);
        read.errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn every_mistake_of_a_source_is_named_in_one_go() {
        let text = "[[sources]]\nname = \"ok\"\nhandler_url = \"http://127.0.0.1:9000/h\"\nevent_id = \"/id\"\n\
                    signing_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n\
                    [[sources]]\nname = \"partner\"\nhandler-url = \"http://127.0.0.1:9000/h\"\n\
                    event_id = \"/id\"\nsigning_secret = \"not-a-secret\"\nbackoff = [\"10s\", \"soon\"]\n\
                    [[sources]]\nname = \"third\"\nhandler_url = \"ftp://x\"\n";
        let found = errors(text);
        let keys: Vec<&str> = found.iter().map(|e| e.split('`').nth(1).unwrap_or_default()).collect();
        let expected = [
            "sources[1].backoff[1]",
            "sources[1].handler-url",
            "sources[1].signing_secret",
            "sources[1]",
            "sources[2].handler_url",
            "sources[2]",
            "sources[2]",
        ];
        assert_eq!(keys, expected, "{found:#?}");
        assert!(found[3].contains("missing field `handler_url`"), "{found:#?}");
        assert!(found[5].contains("missing field `event_id`"), "{found:#?}");
        assert!(found[6].contains("missing field `signing_secret`"), "{found:#?}");
        assert!(
            found[..5].iter().all(|e| !e.contains("missing field `signing_secret`")),
            "a wrong value is not also missing"
        );
    }

    #[test]
    fn a_mistyped_key_or_value_is_told_the_name_it_is_close_to() {
        let found = errors(
            "[gateway]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000\"\n\
             [[gateway.routes]]\npath = \"/charges\"\nscpoe = [\"header:X\"]\n[log]\nformat = \"jsno\"\n",
        );
        assert!(
            found[0].contains("`gateway.routes[0].scpoe`") && found[0].ends_with("Did you mean `scope`?"),
            "{found:#?}"
        );
        assert!(found[1].contains("`log.format`") && found[1].ends_with("Did you mean `json`?"), "{found:#?}");
        let far = errors("[log]\nzzzzzz = 1\n");
        assert!(!far[0].contains("Did you mean"), "nothing close, nothing said: {far:#?}");
    }

    #[test]
    fn a_good_tree_reads_with_no_errors() {
        let read = read("listen = \"127.0.0.1:7171\"\n".parse().expect("toml"), str::to_owned);
        assert!(read.errors.is_empty());
        assert_eq!(read.config.map(|c| c.listen.port()), Some(7171));
    }
}
