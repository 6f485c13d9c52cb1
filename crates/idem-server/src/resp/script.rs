//! `EVAL`, `EVALSHA` and `SCRIPT`: the scripts idempotency libraries send, recognised by their
//! text and each run as one store operation, atomic on every store and across nodes as Redis runs
//! a script. idem embeds no Lua: a script's `redis.call`s would need the key locked for the
//! script's whole run, on PostgreSQL a transaction held open across an interpreter, and the
//! libraries' scripts are a handful, each one conditional change of one key. Any other script
//! is refused by name (docs/reference/redis.md says which run).
//!
//! Recognised, whitespace and quote style aside:
//! - Laravel's lock release (`LuaScripts::releaseLock`): deletes the key if it holds the owner.
//! - Laravel's lock refresh (`LuaScripts::refreshLock`): the owner's key gets a new expiry, or
//!   none.
//! - Laravel's `Cache::add` on Redis (`RedisStore::add`): `SET key value EX seconds NX`.
//!
//! As Redis does, a script run or loaded is kept by its SHA-1 for `EVALSHA` (until a restart or
//! `SCRIPT FLUSH`; each node keeps its own, and clients send the script again on `NOSCRIPT`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use idem_core::{ClaimChange, Keep, UpdateWhen};

use super::data::{self, DOCS, Expiry, SetOptions, integer};
use super::reply::Reply;
use super::session::Context;
use super::write::update;

type Answer = Result<Reply, Reply>;

/// A script idem knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    ReleaseLock,
    RefreshLock,
    Add,
}

/// Each known script's text, without whitespace and with `'` as `"`.
const KNOWN: [(Known, &str); 3] = [
    (Known::ReleaseLock, r#"ifredis.call("get",KEYS[1])==ARGV[1]thenreturnredis.call("del",KEYS[1])elsereturn0end"#),
    (
        Known::RefreshLock,
        r#"ifredis.call("get",KEYS[1])==ARGV[1]theniftonumber(ARGV[2])>0thenreturnredis.call("expire",KEYS[1],ARGV[2])endredis.call("persist",KEYS[1])return1elsereturn0end"#,
    ),
    (Known::Add, r#"returnredis.call("exists",KEYS[1])<1andredis.call("setex",KEYS[1],ARGV[2],ARGV[1])"#),
];

fn recognise(text: &[u8]) -> Option<Known> {
    let normal: Vec<u8> =
        text.iter().filter(|b| !b.is_ascii_whitespace()).map(|&b| if b == b'\'' { b'"' } else { b }).collect();
    KNOWN.iter().find(|(_, known)| known.as_bytes() == normal).map(|(script, _)| *script)
}

/// The scripts run or loaded, by SHA-1 (lowercase hex), for `EVALSHA`.
#[derive(Default)]
pub struct Scripts(Mutex<HashMap<String, Known>>);

impl Scripts {
    fn keep(&self, text: &[u8], script: Known) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, text);
        let sha: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(sha.clone(), script);
        sha
    }

    fn find(&self, sha: &[u8]) -> Option<Known> {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(&sha).copied()
    }
}

fn unknown_script() -> Reply {
    Reply::error(format!(
        "ERR idem runs only the scripts of the libraries it supports (Laravel's lock release and refresh, Cache::add), and this is not one of them ({DOCS})"
    ))
}

/// `EVAL script numkeys key… arg…`, `EVALSHA sha1 numkeys key… arg…`.
pub async fn eval(cx: &Context<'_>, name: &str, args: &[Bytes]) -> Answer {
    let script = if name == "EVAL" {
        let script = recognise(&args[0]).ok_or_else(unknown_script)?;
        cx.scripts.keep(&args[0], script);
        script
    } else {
        cx.scripts.find(&args[0]).ok_or_else(|| Reply::error("NOSCRIPT No matching script. Please use EVAL."))?
    };
    let numkeys = integer(&args[1])?;
    if numkeys < 0 {
        return Err(Reply::error("ERR Number of keys can't be negative"));
    }
    let rest = &args[2..];
    if numkeys as usize > rest.len() {
        return Err(Reply::error("ERR Number of keys can't be greater than number of args"));
    }
    let (keys, argv) = rest.split_at(numkeys as usize);
    let ([key], [first, more @ ..]) = (keys, argv) else {
        return Err(Reply::error("ERR idem: this script takes one key and at least one argument"));
    };
    match script {
        Known::ReleaseLock => {
            let owner = UpdateWhen::DataIs(Some(data::data(first).get().to_owned()));
            let outcome = update(cx, key, owner, ClaimChange::Delete).await?;
            Ok(Reply::Integer(i64::from(outcome.applied)))
        }
        Known::RefreshLock => {
            let seconds = more.first().map(integer).transpose()?.ok_or_else(script_error)?;
            let owner = UpdateWhen::DataIs(Some(data::data(first).get().to_owned()));
            let expires_at = match seconds {
                s if s > 0 => Some(cx.clock.now().plus(Duration::from_secs(s as u64))),
                _ => None,
            };
            let change = ClaimChange::Put { data: Keep::Keep, expires_at: Keep::Set(expires_at) };
            let outcome = update(cx, key, owner, change).await?;
            Ok(Reply::Integer(i64::from(outcome.applied)))
        }
        Known::Add => {
            let seconds = more.first().map(integer).transpose()?.ok_or_else(script_error)?;
            if seconds <= 0 {
                return Err(Reply::error("ERR invalid expire time in 'setex' command"));
            }
            let options = SetOptions {
                nx: true,
                expiry: Some(Expiry::In(Duration::from_secs(seconds as u64))),
                ..SetOptions::default()
            };
            // Lua's `false` comes back as nil; `setex`'s status as `OK`.
            data::claim_set(cx, key, first, options).await
        }
    }
}

fn script_error() -> Reply {
    Reply::error("ERR idem: this script needs a number of seconds as its second argument")
}

/// `SCRIPT LOAD script`, `SCRIPT EXISTS sha1…`, `SCRIPT FLUSH`.
pub fn script(cx: &Context<'_>, args: &[Bytes]) -> Answer {
    let sub = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
    match (sub.as_str(), &args[1..]) {
        ("LOAD", [text]) => {
            let script = recognise(text).ok_or_else(unknown_script)?;
            Ok(Reply::Bulk(Bytes::from(cx.scripts.keep(text, script))))
        }
        ("EXISTS", shas) if !shas.is_empty() => {
            Ok(Reply::Array(shas.iter().map(|sha| Reply::Integer(i64::from(cx.scripts.find(sha).is_some()))).collect()))
        }
        ("FLUSH", [] | [_]) => {
            cx.scripts.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
            Ok(Reply::ok())
        }
        ("LOAD" | "EXISTS" | "FLUSH", _) => Err(Reply::error(format!(
            "ERR wrong number of arguments for 'script|{}' command",
            sub.to_ascii_lowercase()
        ))),
        _ => Err(Reply::error(format!("ERR idem runs SCRIPT LOAD, EXISTS and FLUSH, not SCRIPT {sub} ({DOCS})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_libraries_scripts_are_recognised_as_they_are_written() {
        let release = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend";
        assert_eq!(recognise(release.as_bytes()), Some(Known::ReleaseLock));
        let refresh = "\nif redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    if tonumber(ARGV[2]) > 0 then\n        return redis.call(\"expire\",KEYS[1],ARGV[2])\n    end\n\n    redis.call(\"persist\",KEYS[1])\n\n    return 1\nelse\n    return 0\nend\n";
        assert_eq!(recognise(refresh.as_bytes()), Some(Known::RefreshLock));
        let add = "return redis.call('exists',KEYS[1])<1 and redis.call('setex',KEYS[1],ARGV[2],ARGV[1])";
        assert_eq!(recognise(add.as_bytes()), Some(Known::Add));
        assert_eq!(recognise(b"return redis.call('del',KEYS[1])"), None);
        assert_eq!(recognise(release.replace("==", "~=").as_bytes()), None, "one operator changes what it does");
    }

    #[test]
    fn scripts_are_kept_by_their_sha1_as_redis_names_them() {
        let scripts = Scripts::default();
        // SHA-1 of the text as sent, as Redis computes it (`redis-cli SCRIPT LOAD`).
        let sha = scripts.keep(b"return 1", Known::Add);
        assert_eq!(sha, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        assert_eq!(scripts.find(sha.to_uppercase().as_bytes()), Some(Known::Add));
        assert_eq!(scripts.find(b"0000"), None);
    }
}
