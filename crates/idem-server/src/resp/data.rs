//! The data commands on claims: a Redis key is a claim's one part in `[resp] namespace`, its value
//! the claim's data. Here: `SET … NX` and `SETNX` (claims: the first writer wins, every `OK`
//! durable first, as for HTTP), `GET`, `MGET`, `EXISTS`, `DEL`/`UNLINK`, `TTL`/`PTTL`; the
//! commands that change a key whatever it holds are in write.rs, the scripts in script.rs. A
//! command idem does not run is refused with an error that names it, never answered as if it had
//! run (docs/reference/redis.md).

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use idem_core::{ClaimId, ClaimOutcome, ClaimRecord, NewClaim, Parts, StoreError};
use serde_json::value::RawValue;

use super::reply::Reply;
use super::session::Context;
use super::{script, write};

/// The data of a claim whose Redis value is not UTF-8: `{"$redis_base64": "…"}`. A value that is
/// UTF-8 is stored as a JSON string, so that the HTTP API shows it as text.
const BINARY: &str = "$redis_base64";

/// Where the refusals point.
pub(super) const DOCS: &str = "docs/reference/redis.md";

/// Runs a data command (`name` upper-cased, `args` after it); `None` when `name` is not one.
pub async fn run(cx: &Context<'_>, name: &str, args: &[Bytes]) -> Option<Reply> {
    let (min, max) = match name {
        "GET" | "TTL" | "PTTL" => (1, 1),
        "MGET" | "EXISTS" | "DEL" | "UNLINK" => (1, usize::MAX),
        "SET" => (2, usize::MAX),
        "SETNX" | "GETSET" => (2, 2),
        "SETEX" | "PSETEX" => (3, 3),
        "GETDEL" | "PERSIST" => (1, 1),
        "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" => (2, usize::MAX),
        "EVAL" | "EVALSHA" => (2, usize::MAX),
        "SCRIPT" => (1, usize::MAX),
        "GETEX" | "APPEND" | "INCR" | "DECR" | "INCRBY" | "DECRBY" | "INCRBYFLOAT" | "SETRANGE" | "GETRANGE"
        | "STRLEN" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FUNCTION" | "MSET" | "MSETNX" | "RENAME" | "RENAMENX"
        | "COPY" | "KEYS" | "SCAN" | "TYPE" | "FLUSHDB" | "FLUSHALL" | "MULTI" | "EXEC" | "DISCARD" | "WATCH"
        | "UNWATCH" => return Some(not_run(name)),
        _ => return None,
    };
    if !(min..=max).contains(&args.len()) {
        return Some(Reply::error(format!(
            "ERR wrong number of arguments for '{}' command",
            name.to_ascii_lowercase()
        )));
    }
    let answer = match name {
        "GET" => get(cx, &args[0]).await,
        "MGET" => mget(cx, args).await,
        "EXISTS" => exists(cx, args).await,
        "DEL" | "UNLINK" => del(cx, args).await,
        "TTL" | "PTTL" => ttl(cx, &args[0], name == "PTTL").await,
        "SET" => set(cx, args).await,
        "SETNX" => setnx(cx, args).await,
        "SETEX" | "PSETEX" => write::setex(cx, name, args).await,
        "GETSET" => write::getset(cx, args).await,
        "GETDEL" => write::getdel(cx, args).await,
        "PERSIST" => write::persist(cx, args).await,
        "EVAL" | "EVALSHA" => script::eval(cx, name, args).await,
        "SCRIPT" => script::script(cx, args),
        _ => write::expire(cx, name, args).await,
    };
    Some(answer.unwrap_or_else(|e| e))
}

type Answer = Result<Reply, Reply>;

/// A command that only claims a key (`SET k v NX [EX s | PX ms]`, `SETNX k v`), ready to be
/// claimed together with the commands beside it in a pipeline: one store call, one fsync, the
/// same answers as one after another (of two equal keys the first wins, as it would first).
pub struct Pending {
    claim: NewClaim,
    /// `SETNX`: answered `1`/`0`; `SET … NX`: `OK`/nil.
    integer: bool,
}

/// The claim `name args` makes, if it is one that can run with others ([`Answers`]) (`None`: run it
/// alone); `Err`: its reply already (a bad key, a value too large, no permission).
pub fn pending(cx: &Context<'_>, name: &str, args: &[Bytes]) -> Option<Result<Pending, Reply>> {
    let (integer, ttl) = match (name, args) {
        ("SETNX", [_, _]) => (true, None),
        ("SET", [_, _, options @ ..]) => {
            let options = parse_set(options).ok()?;
            let ttl = match options.expiry {
                None => None,
                Some(Expiry::In(ttl)) => Some(ttl),
                Some(Expiry::At(_)) => return None,
            };
            if !options.nx || options.get {
                return None;
            }
            (false, ttl)
        }
        _ => return None,
    };
    Some(new_claim(cx, &args[0], &args[1], ttl).map(|claim| Pending { claim, integer }))
}

/// How to answer each command of a run of claims made as one store call, in order: those that
/// claim by what the store answers (`SETNX`'s integer or `SET … NX`'s `OK`), those refused with
/// their reply already.
pub struct Answers(Vec<Result<bool, Reply>>);

impl Answers {
    /// The claims of a run of commands, for one store call, and how to answer them.
    pub fn split(group: impl IntoIterator<Item = Result<Pending, Reply>>) -> (Vec<NewClaim>, Self) {
        let mut claims = Vec::new();
        let answers = group
            .into_iter()
            .map(|pending| {
                pending.map(|p| {
                    claims.push(p.claim);
                    p.integer
                })
            })
            .collect();
        (claims, Self(answers))
    }

    /// Each command's reply, in order, from what the store answered for the claims; counted
    /// (`idem_claims_total`). Called on whichever thread has the answer
    /// ([`ClaimStore::claim_then`](idem_core::ClaimStore::claim_then)).
    pub fn replies(self, ns: &str, result: Result<Vec<ClaimOutcome>, StoreError>) -> Vec<Reply> {
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(e) => {
                let reply = store_error(e);
                return self.0.into_iter().map(|a| a.map_or_else(|refused| refused, |_| reply.clone())).collect();
            }
        };
        count(ns, &outcomes);
        let mut outcomes = outcomes.into_iter();
        let answer = |integer: bool, won: bool| match (won, integer) {
            (won, true) => Reply::Integer(i64::from(won)),
            (true, false) => Reply::ok(),
            (false, false) => Reply::Null,
        };
        self.0
            .into_iter()
            .map(|a| match a {
                Ok(integer) => answer(integer, outcomes.next().is_some_and(|o| o.claimed)),
                Err(refused) => refused,
            })
            .collect()
    }
}

fn not_run(name: &str) -> Reply {
    Reply::error(format!(
        "ERR idem runs the commands idempotency libraries use, and '{}' is not one of them ({DOCS})",
        name.to_ascii_lowercase()
    ))
}

/// A key as a claim's one part: UTF-8 text without NUL, as every claim key is.
pub(super) fn key(raw: &Bytes) -> Result<Parts, Reply> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| Reply::error(format!("ERR idem keys are UTF-8 text: this one is not ({DOCS})")))?;
    Parts::single(text.to_owned())
        .map_err(|e| Reply::error(format!("ERR idem cannot store this key: {} ({DOCS})", e.message)))
}

fn id(raw: &Bytes) -> Result<ClaimId, Reply> {
    key(raw).map(|parts| parts.id())
}

/// A value as a claim's data (see [`BINARY`]).
pub(super) fn data(value: &[u8]) -> Box<RawValue> {
    let json = match std::str::from_utf8(value) {
        Ok(text) => serde_json::Value::String(text.to_owned()),
        Err(_) => serde_json::json!({ BINARY: base64::engine::general_purpose::STANDARD.encode(value) }),
    };
    RawValue::from_string(json.to_string()).unwrap_or_else(|_| RawValue::from_string("null".into()).expect("JSON"))
}

/// A claim's data as a Redis value: a JSON string's text, a [`BINARY`] object's bytes, or, for a
/// claim made through the HTTP API with other data, that data's JSON text. No data: empty.
pub(super) fn value(record: &ClaimRecord) -> Bytes {
    let Some(raw) = record.data.as_deref() else { return Bytes::new() };
    match serde_json::from_str::<serde_json::Value>(raw.get()) {
        Ok(serde_json::Value::String(text)) => Bytes::from(text),
        Ok(serde_json::Value::Object(map)) if map.len() == 1 => match map.get(BINARY).and_then(|v| v.as_str()) {
            Some(encoded) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map(Bytes::from)
                .unwrap_or_else(|_| Bytes::copy_from_slice(raw.get().as_bytes())),
            None => Bytes::copy_from_slice(raw.get().as_bytes()),
        },
        _ => Bytes::copy_from_slice(raw.get().as_bytes()),
    }
}

/// A store's failure as an error reply: Redis has no "outcome unknown", so its text says it.
pub(super) fn store_error(e: StoreError) -> Reply {
    match e {
        StoreError::OutcomeUnknown(_) => {
            Reply::error("ERR idem: the store's answer was lost: the command may or may not have taken effect")
        }
        StoreError::Misconfigured(why) => Reply::error(format!("ERR idem: {why}")),
        StoreError::Unavailable(_) | StoreError::Closed => {
            Reply::error("TRYAGAIN idem: the store is unavailable; nothing was changed, retry")
        }
        StoreError::Internal(_) => Reply::error("ERR idem: internal error; see idem's log"),
    }
}

/// The live claims of `keys`, counted as lookups by id (`idem_lookups_total`), as the HTTP
/// API counts them.
async fn records(cx: &Context<'_>, keys: &[Bytes]) -> Result<Vec<Option<ClaimRecord>>, Reply> {
    let ids = keys.iter().map(id).collect::<Result<Vec<_>, _>>()?;
    let found = cx.claims.lookup(cx.namespace, &ids).await.map_err(store_error)?;
    idem_metrics::claims::looked_up(cx.namespace.as_str(), idem_metrics::claims::Lookup::Ids, ids.len() as u64);
    Ok(found)
}

/// Claims, counted as the HTTP API counts them (`idem_claims_total`): metrics and the dashboard
/// show Redis clients' claims with the others of the namespace.
async fn claim_all(cx: &Context<'_>, claims: Vec<NewClaim>) -> Result<Vec<ClaimOutcome>, StoreError> {
    let outcomes = cx.claims.claim(cx.namespace, claims).await?;
    count(cx.namespace.as_str(), &outcomes);
    Ok(outcomes)
}

fn count(ns: &str, outcomes: &[ClaimOutcome]) {
    let claimed = outcomes.iter().filter(|o| o.claimed).count() as u64;
    idem_metrics::claims::claimed(ns, claimed, outcomes.len() as u64 - claimed);
}

async fn get(cx: &Context<'_>, key: &Bytes) -> Answer {
    cx.may_read()?;
    let found = records(cx, std::slice::from_ref(key)).await?;
    Ok(found.into_iter().next().flatten().map_or(Reply::Null, |r| Reply::Bulk(value(&r))))
}

async fn mget(cx: &Context<'_>, keys: &[Bytes]) -> Answer {
    cx.may_read()?;
    let found = records(cx, keys).await?;
    Ok(Reply::Array(found.into_iter().map(|r| r.map_or(Reply::Null, |r| Reply::Bulk(value(&r)))).collect()))
}

async fn exists(cx: &Context<'_>, keys: &[Bytes]) -> Answer {
    cx.may_read()?;
    let found = records(cx, keys).await?;
    Ok(Reply::Integer(found.iter().filter(|r| r.is_some()).count() as i64))
}

async fn del(cx: &Context<'_>, keys: &[Bytes]) -> Answer {
    cx.may_write()?;
    let ids = keys.iter().map(id).collect::<Result<Vec<_>, _>>()?;
    let mut deleted = 0;
    for id in ids {
        deleted += i64::from(cx.claims.delete(cx.namespace, &id).await.map_err(store_error)?);
    }
    idem_metrics::claims::deleted(cx.namespace.as_str(), deleted as u64);
    Ok(Reply::Integer(deleted))
}

async fn ttl(cx: &Context<'_>, key: &Bytes, millis: bool) -> Answer {
    cx.may_read()?;
    let found = records(cx, std::slice::from_ref(key)).await?;
    let Some(record) = found.into_iter().next().flatten() else { return Ok(Reply::Integer(-2)) };
    let Some(expires) = record.expires_at else { return Ok(Reply::Integer(-1)) };
    let left = (expires.millis() - cx.clock.now().millis()).max(0);
    Ok(Reply::Integer(if millis { left } else { (left + 500) / 1000 }))
}

/// `SET key value` and its options, as Redis reads them.
#[derive(Debug, Default, PartialEq)]
pub(super) struct SetOptions {
    pub nx: bool,
    pub xx: bool,
    pub get: bool,
    pub keep_ttl: bool,
    pub expiry: Option<Expiry>,
}

#[derive(Debug, PartialEq)]
pub(super) enum Expiry {
    /// A time to live.
    In(Duration),
    /// An absolute Unix time in milliseconds.
    At(i64),
}

fn syntax_error() -> Reply {
    Reply::error("ERR syntax error")
}

fn parse_set(options: &[Bytes]) -> Result<SetOptions, Reply> {
    let mut set = SetOptions::default();
    let mut rest = options.iter();
    while let Some(option) = rest.next() {
        let word = String::from_utf8_lossy(option).to_ascii_uppercase();
        match word.as_str() {
            "NX" if !set.xx => set.nx = true,
            "XX" if !set.nx => set.xx = true,
            "GET" => set.get = true,
            "KEEPTTL" if set.expiry.is_none() => set.keep_ttl = true,
            "EX" | "PX" | "EXAT" | "PXAT" if set.expiry.is_none() && !set.keep_ttl => {
                let amount = rest.next().ok_or_else(syntax_error)?;
                set.expiry = Some(expiry(&word, amount)?);
            }
            _ => return Err(syntax_error()),
        }
    }
    Ok(set)
}

fn expiry(unit: &str, amount: &Bytes) -> Result<Expiry, Reply> {
    let n = integer(amount)?;
    let invalid = || Reply::error("ERR invalid expire time in 'set' command");
    if n <= 0 {
        return Err(invalid());
    }
    let millis = if matches!(unit, "EX" | "EXAT") { n.checked_mul(1000).ok_or_else(invalid)? } else { n };
    Ok(if unit.ends_with("AT") { Expiry::At(millis) } else { Expiry::In(Duration::from_millis(millis as u64)) })
}

async fn set(cx: &Context<'_>, args: &[Bytes]) -> Answer {
    let options = parse_set(&args[2..])?;
    if !options.nx {
        return write::set(cx, args, options).await;
    }
    claim_set(cx, &args[0], &args[1], options).await
}

/// `SET key value NX …`: a claim.
pub(super) async fn claim_set(cx: &Context<'_>, key: &Bytes, value: &Bytes, options: SetOptions) -> Answer {
    cx.may_write()?;
    let claimed = claim(cx, key, value, options.expiry).await?;
    Ok(match (claimed, options.get) {
        (Claimed::Won, false) => Reply::ok(),
        (Claimed::Won, true) | (Claimed::Lost(_), false) => Reply::Null,
        (Claimed::Lost(existing), true) => Reply::Bulk(existing),
    })
}

async fn setnx(cx: &Context<'_>, args: &[Bytes]) -> Answer {
    cx.may_write()?;
    let claimed = claim(cx, &args[0], &args[1], None).await?;
    Ok(Reply::Integer(i64::from(matches!(claimed, Claimed::Won))))
}

enum Claimed {
    Won,
    /// The key was live: its value.
    Lost(Bytes),
}

/// The claim of `key` with `value` for `ttl`, once the caller may write.
fn new_claim(
    cx: &Context<'_>,
    key_bytes: &Bytes,
    value_bytes: &Bytes,
    ttl: Option<Duration>,
) -> Result<NewClaim, Reply> {
    cx.may_write()?;
    let parts = key(key_bytes)?;
    Ok(NewClaim { parts, data: Some(sized_data(cx, value_bytes)?), ttl, client: None, created_at: None })
}

/// A value as a claim's data, within `limits.max_body_bytes`.
pub(super) fn sized_data(cx: &Context<'_>, value_bytes: &[u8]) -> Result<Box<RawValue>, Reply> {
    if value_bytes.len() > cx.max_value {
        return Err(Reply::error(format!(
            "ERR idem stores values of at most {} bytes (limits.max_body_bytes)",
            cx.max_value
        )));
    }
    Ok(data(value_bytes))
}

/// An integer argument, as Redis reads one.
pub(super) fn integer(raw: &Bytes) -> Result<i64, Reply> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| Reply::error("ERR value is not an integer or out of range"))
}

/// Claims `key` with `value`: the store answers only once the claim is durable.
async fn claim(
    cx: &Context<'_>,
    key_bytes: &Bytes,
    value_bytes: &Bytes,
    expiry: Option<Expiry>,
) -> Result<Claimed, Reply> {
    let ttl = match expiry {
        None => None,
        Some(Expiry::In(ttl)) => Some(ttl),
        Some(Expiry::At(at)) => {
            let left = at - cx.clock.now().millis();
            if left <= 0 {
                // Redis sets the key and it expires at once: nothing to store, but NX still asks
                // whether the key is free.
                let found = records(cx, std::slice::from_ref(key_bytes)).await?;
                return Ok(found.into_iter().next().flatten().map_or(Claimed::Won, |r| Claimed::Lost(value(&r))));
            }
            Some(Duration::from_millis(left as u64))
        }
    };
    let claim = new_claim(cx, key_bytes, value_bytes, ttl)?;
    let outcome = claim_all(cx, vec![claim]).await.map_err(store_error)?;
    let outcome = outcome.into_iter().next().ok_or_else(|| store_error(StoreError::Internal("no answer".into())))?;
    Ok(if outcome.claimed { Claimed::Won } else { Claimed::Lost(value(&outcome.record)) })
}

#[cfg(test)]
mod tests {
    use idem_core::Timestamp;

    use super::*;

    fn words(text: &str) -> Vec<Bytes> {
        text.split_whitespace().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    #[test]
    fn set_options_as_redis_reads_them() {
        let parsed = parse_set(&words("nx EX 10 get")).expect("valid");
        assert_eq!(
            parsed,
            SetOptions { nx: true, get: true, expiry: Some(Expiry::In(Duration::from_secs(10))), ..Default::default() }
        );
        assert_eq!(
            parse_set(&words("PX 1500 NX")).expect("valid").expiry,
            Some(Expiry::In(Duration::from_millis(1500)))
        );
        assert_eq!(
            parse_set(&words("NX PXAT 1700000000000")).expect("valid").expiry,
            Some(Expiry::At(1_700_000_000_000))
        );
        for (options, error) in [
            ("NX XX", "ERR syntax error"),
            ("EX 1 PX 1", "ERR syntax error"),
            ("KEEPTTL EX 1", "ERR syntax error"),
            ("EX", "ERR syntax error"),
            ("NX FOO", "ERR syntax error"),
            ("EX ten", "ERR value is not an integer or out of range"),
            ("EX 0", "ERR invalid expire time in 'set' command"),
            ("PX -5", "ERR invalid expire time in 'set' command"),
        ] {
            assert_eq!(parse_set(&words(options)), Err(Reply::error(error)), "{options}");
        }
    }

    #[test]
    fn values_round_trip_through_claim_data() {
        for value_bytes in [&b""[..], b"plain text", b"{\"json\":true}", b"\0\r\n\xff\xfe binary"] {
            let record = ClaimRecord {
                namespace: idem_core::Namespace::new("redis").expect("valid"),
                id: Parts::single("k".into()).expect("valid").id(),
                parts: Parts::single("k".into()).expect("valid"),
                data: Some(data(value_bytes)),
                created_at: Timestamp(0),
                expires_at: None,
            };
            assert_eq!(&value(&record)[..], value_bytes);
        }
    }
}
