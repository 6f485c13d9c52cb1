//! The `IDEM_` environment layer of the config: which variables are config, and how each becomes a
//! key of the tree (`__` for nesting; a value is read as TOML when it parses, else as a string).
//! A variable is config only when its name, up to the first `__`, is a top-level config key; any
//! other `IDEM_` variable belongs to another program and is ignored with a warning, so that a
//! handler's `IDEM_SIGNING_SECRET` or a client's `IDEM_TOKEN` never stops idem.

use super::ConfigError;

/// Environment variables that belong to the command line, not to the config tree.
const NOT_CONFIG_ENV: &[&str] =
    &["IDEM_CONFIG", "IDEM_URL", "IDEM_SERVER", "IDEM_TOKEN", "IDEM_CA_FILE", "IDEM_DATABASE_URL"];
/// Variables of idem's own test suite (`IDEM_TEST_DATABASE_URL`), never config.
const TEST_ENV_PREFIX: &str = "IDEM_TEST_";
/// The config's top-level keys. An `IDEM_` variable is config when the first segment of its name
/// (up to `__`) is one of these, and is then checked strictly (`IDEM_LIMITS__MAX_BODY_BYTE` is an
/// error). Any other `IDEM_` variable belongs to someone else (`IDEM_SIGNING_SECRET`, read by a
/// handler): it is ignored, with a warning
/// that suggests the config key it may be a typo of.
pub const TOP_LEVEL_KEYS: &[&str] = &[
    "listen",
    "data_dir",
    "store",
    "auth",
    "http",
    "tls",
    "limits",
    "sweeper",
    "events",
    "log",
    "namespaces",
    "gateway",
    "resp",
    "sources",
];

/// Sets every config variable of `env` in `tree`; answers the warnings for the others.
pub(super) fn apply(
    tree: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<String>, ConfigError> {
    let mut warnings = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("IDEM_") else { continue };
        if NOT_CONFIG_ENV.contains(&name.as_str()) || name.starts_with(TEST_ENV_PREFIX) || rest.is_empty() {
            continue;
        }
        let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        if !TOP_LEVEL_KEYS.contains(&path[0].as_str()) {
            warnings.push(not_config(&name, &path[0]));
            continue;
        }
        set_path(tree, &path, env_value(&value)).map_err(|message| ConfigError::Key { key: name.clone(), message })?;
    }
    Ok(warnings)
}

/// The warning for an `IDEM_` variable that is not config: ignored, and, when its first segment is
/// close to a config key, named as a likely typo.
fn not_config(name: &str, first: &str) -> String {
    let close = TOP_LEVEL_KEYS.iter().find(|key| edit_distance(first, key) <= 2.min(key.len() / 2));
    let hint = close.map(|key| format!(" Did you mean IDEM_{}?", key.to_ascii_uppercase())).unwrap_or_default();
    format!(
        "{name} is not idem config (no config key `{first}`), so idem ignores it: idem reads an IDEM_ variable as \
         config only when its name starts with a config key ({}).{hint}",
        TOP_LEVEL_KEYS.iter().map(|k| format!("IDEM_{}", k.to_ascii_uppercase())).collect::<Vec<_>>().join(", ")
    )
}

/// Edit distance counting a swap of two neighbouring letters as one edit (optimal string
/// alignment), for typo hints between short names: `scpoe` is one edit from `scope`.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows: the one before the previous (for swaps), the previous, the current.
    let mut before: Vec<usize> = Vec::new();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let substituted = previous[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            row[j] = substituted.min(previous[j] + 1).min(row[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut previous, row);
    }
    previous[b.len()]
}

/// An env value is read as a TOML value when it is one (`500`, `true`, `["a","b"]`), else as a
/// string, so `IDEM_LISTEN=0.0.0.0:7070` needs no quotes.
fn env_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

pub(super) fn set_path(tree: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let (last, parents) = path.split_last().ok_or("empty key")?;
    let mut table = tree;
    for key in parents {
        let entry = table.entry(key.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry.as_table_mut().ok_or_else(|| format!("`{key}` is not a table"))?;
    }
    table.insert(last.clone(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_are_close_and_others_are_not() {
        assert_eq!(edit_distance("listn", "listen"), 1);
        assert_eq!(edit_distance("scpoe", "scope"), 1, "a swap of neighbours is one edit");
        assert_eq!(edit_distance("", "log"), 3);
        assert_eq!(edit_distance("ttl", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("signing_secret", "sources"), edit_distance("sources", "signing_secret"));
        assert!(not_config("IDEM_LOGS", "logs").contains("Did you mean IDEM_LOG?"));
        assert!(!not_config("IDEM_SIGNING_SECRET", "signing_secret").contains("Did you mean"));
    }
}
