//! `errors` and `errors_template`, in `[gateway]` and in each `[[gateway.routes]]` (a route's own
//! wins): the shape of idem's own answers ([`ErrorShape`]), one of the two keys per table. A
//! template file is read and checked as the config is loaded (its path as given, relative to idem's
//! working directory), so a missing or bad one stops start-up and `idem config check`, naming its
//! key.

use std::sync::Arc;

use idem_gateway::{ErrorShape, Template};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a table that sets both keys is told.
pub(super) const BOTH: &str = "give errors or errors_template, not both";

/// `errors = "problem"` (RFC 9457) or `"stripe"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorStyle {
    Problem,
    Stripe,
}

/// `errors_template = "path"`: the file, read and parsed; printed as its path.
#[derive(Debug, Clone)]
pub struct TemplateFile(pub Arc<Template>);

impl<'de> Deserialize<'de> for TemplateFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let path = String::deserialize(d)?;
        let text =
            std::fs::read_to_string(&path).map_err(|e| serde::de::Error::custom(format!("cannot read {path}: {e}")))?;
        let template =
            Template::parse(path.as_str(), &text).map_err(|e| serde::de::Error::custom(format!("{path} {e}")))?;
        Ok(Self(Arc::new(template)))
    }
}

impl Serialize for TemplateFile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name())
    }
}

/// The shape a table's keys give; `None` when it sets neither. (Both is a mistake the config
/// reports; the template would win.)
pub(super) fn shape(style: Option<ErrorStyle>, template: Option<&TemplateFile>) -> Option<ErrorShape> {
    match (style, template) {
        (_, Some(file)) => Some(ErrorShape::Template(Arc::clone(&file.0))),
        (Some(ErrorStyle::Problem), None) => Some(ErrorShape::Problem),
        (Some(ErrorStyle::Stripe), None) => Some(ErrorShape::Stripe),
        (None, None) => None,
    }
}

/// The keys that give `shape`, for printing the config in force.
pub(super) fn keys(shape: Option<&ErrorShape>) -> (Option<ErrorStyle>, Option<TemplateFile>) {
    match shape {
        None => (None, None),
        Some(ErrorShape::Problem) => (Some(ErrorStyle::Problem), None),
        Some(ErrorShape::Stripe) => (Some(ErrorStyle::Stripe), None),
        Some(ErrorShape::Template(template)) => (None, Some(TemplateFile(Arc::clone(template)))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, Overrides};
    use super::*;

    const GATEWAY: &str = "[gateway]\nlisten = \"127.0.0.1:8080\"\nupstream = \"http://127.0.0.1:3000\"\n";

    /// Loads `toml` from a file beside a template `t.json` holding `template`; `{T}` in `toml` is
    /// the template's path.
    fn load(toml: &str, template: &str) -> (Result<Config, String>, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let template_path = dir.path().join("t.json").display().to_string();
        std::fs::write(&template_path, template).expect("write template");
        let path = dir.path().join("idem.toml");
        std::fs::write(&path, toml.replace("{T}", &template_path)).expect("write config");
        let loaded = Config::load(Some(&path), Vec::new(), &Overrides::default()).map_err(|e| e.to_string());
        (loaded, template_path)
    }

    fn routes(extra: &str) -> String {
        format!(
            "{GATEWAY}{extra}[[gateway.routes]]\npath = \"/charges\"\n[[gateway.routes]]\npath = \"/refunds\"\n\
             errors = \"problem\"\n[[gateway.routes]]\npath = \"/customers\"\nerrors_template = \"{{T}}\"\n"
        )
    }

    #[test]
    fn a_route_takes_its_own_shape_or_the_gateways() {
        let (config, template) = load(&routes("errors = \"stripe\"\n"), r#"{"message": "{{detail}}"}"#);
        let config = config.expect("valid");
        let gateway = config.gateway.as_ref().expect("gateway");
        let shapes: Vec<String> = gateway.routes(None, None).0.iter().map(|r| format!("{:?}", r.errors)).collect();
        assert_eq!(&shapes[..2], ["Stripe", "Problem"]);
        assert!(shapes[2].starts_with("Template"), "{shapes:?}");
        assert!(matches!(gateway.errors(), ErrorShape::Stripe), "and on no route");
        let shown = config.to_redacted_toml();
        assert!(
            shown.contains("errors = \"stripe\"") && shown.contains(&format!("errors_template = \"{template}\"")),
            "{shown}"
        );
        let (plain, _) = load(&routes(""), "{}");
        assert!(matches!(
            plain.expect("valid").gateway.expect("gateway").routes(None, None).0[0].errors,
            ErrorShape::Problem
        ));
    }

    #[test]
    fn a_bad_template_stops_the_load_naming_its_key_and_place() {
        let (bad, path) = load(&routes(""), r#"{"message": "{{message}}"}"#);
        let bad = bad.expect_err("an unknown placeholder");
        assert!(bad.contains("`gateway.routes[2].errors_template` (idem.toml line 11, column 1)"), "{bad}");
        assert!(bad.contains(&format!("{path} names the placeholder {{{{message}}}}")), "{bad}");
        let (not_json, _) = load(&routes(""), "{\"message\": ");
        assert!(not_json.expect_err("not JSON").contains("is not JSON"));
        let missing = routes("").replace("{T}", "/nonexistent/t.json");
        let (missing, _) = load(&missing, "{}");
        assert!(missing.expect_err("no file").contains("cannot read /nonexistent/t.json"));
    }

    #[test]
    fn one_key_or_the_other() {
        let (both, _) = load(&format!("{GATEWAY}errors = \"stripe\"\nerrors_template = \"{{T}}\"\n"), "{}");
        let both = both.expect_err("both in [gateway]");
        assert!(both.contains("`gateway.errors_template`") && both.contains(BOTH), "{both}");
        let (route, _) =
            load(&routes("").replace("errors = \"problem\"", "errors = \"problem\"\nerrors_template = \"{T}\""), "{}");
        let route = route.expect_err("both in a route");
        assert!(route.contains("`gateway.routes[1]`") && route.contains(BOTH), "{route}");
        let (unknown, _) = load(&format!("{GATEWAY}errors = \"json\"\n"), "{}");
        let unknown = unknown.expect_err("no such shape");
        assert!(unknown.contains("`gateway.errors`") && unknown.contains("`stripe`"), "{unknown}");
    }
}
