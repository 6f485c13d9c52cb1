//! Namespace names: 1 to 64 characters of `[a-z0-9_.-]`. A `Namespace` value is always valid.

use crate::Invalid;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(String);

impl Namespace {
    pub const MAX_LEN: usize = 64;

    pub fn new(name: &str) -> Result<Self, Invalid> {
        let valid_char = |c: char| matches!(c, 'a'..='z' | '0'..='9' | '_' | '.' | '-');
        if name.is_empty() || name.len() > Self::MAX_LEN {
            return Err(Invalid::new("namespace", "must be 1 to 64 characters long"));
        }
        if !name.chars().all(valid_char) {
            return Err(Invalid::new("namespace", "may contain only a-z, 0-9, '_', '.' and '-'"));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// In config files a namespace (or a source name, which follows the same rule) is checked on load.
impl<'de> serde::Deserialize<'de> for Namespace {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::new(&text).map_err(|e| serde::de::Error::custom(e.message))
    }
}

impl serde::Serialize for Namespace {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_allowed_alphabet() {
        assert!(Namespace::new("notified_articles").is_ok());
        assert!(Namespace::new("a.b-c_9").is_ok());
        assert!(Namespace::new(&"x".repeat(64)).is_ok());
    }

    #[test]
    fn rejects_everything_else() {
        for bad in ["", "Upper", "sp ace", "slash/", "ü", &"x".repeat(65)] {
            assert!(Namespace::new(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
