//! `idem token new`: a fresh random token and the `[[auth.token]]` table that grants it, with the
//! token's SHA-256 rather than the token, so that the config file holds no secret.

use clap::{Args, Subcommand};
use idem_core::Namespace;
use rand::RngCore;

use super::client::Failure;
use crate::config::{Can, token_digest};

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a fresh random token and the [[auth.token]] table to add to idem's config for it.
    New(NewArgs),
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// What the token may do: read, write or admin.
    #[arg(long, value_parser = parse_can)]
    pub can: Can,
    /// Its name in logs and metrics (default: its role, scope and a few digits of its hash).
    #[arg(long)]
    pub name: Option<String>,
    /// Limit claims and operations to this namespace; repeat for several.
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
    /// Limit receipts and events to this source; repeat for several.
    #[arg(long = "source")]
    pub sources: Vec<String>,
}

fn parse_can(text: &str) -> Result<Can, String> {
    match text {
        "read" => Ok(Can::Read),
        "write" => Ok(Can::Write),
        "admin" => Ok(Can::Admin),
        _ => Err("must be read, write or admin".into()),
    }
}

pub fn run(command: TokenCommand) -> Result<(), Failure> {
    let TokenCommand::New(args) = command;
    for name in args.namespaces.iter().chain(&args.sources) {
        Namespace::new(name).map_err(|e| Failure::usage(format!("{name:?}: {}", e.message)))?;
    }
    let token = fresh_token();
    let digest = idem_core::key::hex(&token_digest(&token));
    let name = args.name.clone().unwrap_or_else(|| default_name(&args, &digest));
    println!("# The token. Give it to its holder; it is shown only now (idem keeps only its SHA-256):");
    println!("{token}");
    println!();
    println!("# Add this table to idem's config; each token needs a name of its own:");
    print!("{}", table(&name, &digest, &args));
    Ok(())
}

/// `idem_` and 32 random bytes in base64url: 256 bits, and a prefix secret scanners can look for.
fn fresh_token() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("idem_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

fn default_name(args: &NewArgs, digest: &str) -> String {
    let mut parts = vec![args.can.as_str().to_owned()];
    parts.extend(args.namespaces.iter().chain(&args.sources).take(2).cloned());
    parts.push(digest[..6].to_owned());
    parts.join("-")
}

fn table(name: &str, digest: &str, args: &NewArgs) -> String {
    let list = |items: &[String]| {
        let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
        format!("[{}]", quoted.join(", "))
    };
    let mut out = format!("[[auth.token]]\nname = {name:?}\nsha256 = \"{digest}\"\ncan = \"{}\"\n", args.can.as_str());
    if !args.namespaces.is_empty() {
        out.push_str(&format!("namespaces = {}\n", list(&args.namespaces)));
    }
    if !args.sources.is_empty() {
        out.push_str(&format!("sources = {}\n", list(&args.sources)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_the_tokens_hash_and_scope() {
        let args = NewArgs { can: Can::Read, name: None, namespaces: vec!["survey".into()], sources: vec![] };
        let token = fresh_token();
        assert!(token.starts_with("idem_") && token.len() == 5 + 43, "{token}");
        assert_ne!(token, fresh_token());
        let digest = idem_core::key::hex(&token_digest(&token));
        let name = default_name(&args, &digest);
        assert!(name.starts_with("read-survey-"), "{name}");
        let table = table(&name, &digest, &args);
        assert!(!table.contains(&token));
        let parsed: toml::Table = table.parse().expect("TOML");
        let entry = &parsed["auth"]["token"][0];
        assert_eq!(entry["sha256"].as_str(), Some(digest.as_str()));
        assert_eq!(entry["can"].as_str(), Some("read"));
        assert_eq!(entry["namespaces"][0].as_str(), Some("survey"));
    }
}
