//! `idem secret new`: a fresh Standard Webhooks signing secret (`whsec_` + base64 of random bytes),
//! for a source's `signing_secret` (and its handler) or `verify_secret` (and its sender).

use base64::Engine as _;
use clap::{Args, Subcommand};
use rand::RngCore;

use super::client::Failure;

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Print a fresh signing secret (whsec_…) on stdout, alone on its line, for a [[sources]]
    /// table's signing_secret or verify_secret.
    New(SecretArgs),
}

#[derive(Debug, Args)]
pub struct SecretArgs {
    /// Random bytes in the secret: 24 to 64 (Standard Webhooks' range).
    #[arg(long, default_value_t = 32)]
    pub bytes: usize,
}

pub fn run(command: SecretCommand) -> Result<(), Failure> {
    let SecretCommand::New(args) = command;
    if !(24..=64).contains(&args.bytes) {
        return Err(Failure::usage(format!("--bytes must be 24 to 64, not {}", args.bytes)));
    }
    println!("{}", fresh_secret(args.bytes));
    eprintln!(
        "idem: a new signing secret. Put it in a [[sources]] table as signing_secret = \"whsec_…\" and give the \
         same text to that source's handler (the PHP example reads IDEM_SIGNING_SECRET), or as verify_secret and \
         give it to the sender. Keep it out of version control."
    );
    Ok(())
}

/// `whsec_` and `bytes` random bytes in standard base64, as Standard Webhooks writes secrets.
fn fresh_secret(bytes: usize) -> String {
    let mut key = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut key);
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(key))
}

#[cfg(test)]
mod tests {
    use idem_core::event::SigningSecret;

    use super::*;

    #[test]
    fn a_fresh_secret_is_a_valid_signing_secret_and_new_each_time() {
        for bytes in [24, 32, 64] {
            let secret = fresh_secret(bytes);
            assert!(SigningSecret::parse(&secret).is_ok(), "{secret}");
            let decoded = base64::engine::general_purpose::STANDARD.decode(&secret["whsec_".len()..]).expect("base64");
            assert_eq!(decoded.len(), bytes);
        }
        assert_ne!(fresh_secret(32), fresh_secret(32));
    }
}
