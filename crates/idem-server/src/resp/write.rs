//! The commands that change a key whatever it holds, each one store update
//! ([`ClaimStore::update`](idem_core::ClaimStore::update)) made only if its condition holds, atomic
//! with every claim of the key on any node: plain `SET` (`XX`, `KEEPTTL`, `GET`), `SETEX`,
//! `PSETEX`, `GETSET`, `GETDEL`, the `EXPIRE` family (`NX|XX|GT|LT`) and `PERSIST`. Every reply
//! comes once the change is durable. `SET … NX` and `SETNX` stay claims (data.rs): the first
//! writer wins.

use bytes::Bytes;
use idem_core::{ClaimChange, ClaimUpdate, Keep, Timestamp, UpdateOutcome, UpdateWhen};

use super::data::{Expiry, SetOptions, integer, key, sized_data, store_error, value};
use super::reply::Reply;
use super::session::Context;

type Answer = Result<Reply, Reply>;

/// One update of `key_bytes`, once the caller may write; counted (`idem_claims_updated_total`),
/// and a delete it made counted as deletes are.
pub async fn update(
    cx: &Context<'_>,
    key_bytes: &Bytes,
    when: UpdateWhen,
    change: ClaimChange,
) -> Result<UpdateOutcome, Reply> {
    cx.may_write()?;
    let parts = key(key_bytes)?;
    let deletes = matches!(change, ClaimChange::Delete);
    let outcome = cx.claims.update(cx.namespace, ClaimUpdate { parts, when, change }).await.map_err(store_error)?;
    idem_metrics::claims::updated(cx.namespace.as_str(), outcome.applied);
    if deletes && outcome.applied && outcome.before.is_some() {
        idem_metrics::claims::deleted(cx.namespace.as_str(), 1);
    }
    Ok(outcome)
}

/// An expiry option as the instant it names, from now.
fn instant(cx: &Context<'_>, expiry: &Expiry) -> Timestamp {
    match expiry {
        Expiry::In(ttl) => cx.clock.now().plus(*ttl),
        Expiry::At(millis) => Timestamp(*millis),
    }
}

/// `SET key value` without `NX`: replaces whatever the key holds (`XX`: only a live key). Without
/// an expiry option the key no longer expires; `KEEPTTL` keeps the one it had.
pub async fn set(cx: &Context<'_>, args: &[Bytes], options: SetOptions) -> Answer {
    let data = Keep::Set(Some(sized_data(cx, &args[1])?));
    let expires_at = match (&options.expiry, options.keep_ttl) {
        (Some(expiry), _) => Keep::Set(Some(instant(cx, expiry))),
        (None, true) => Keep::Keep,
        (None, false) => Keep::Set(None),
    };
    let when = if options.xx { UpdateWhen::Live } else { UpdateWhen::Always };
    let outcome = update(cx, &args[0], when, ClaimChange::Put { data, expires_at }).await?;
    Ok(match (options.get, outcome.applied) {
        (true, _) => outcome.before.map_or(Reply::Null, |r| Reply::Bulk(value(&r))),
        (false, true) => Reply::ok(),
        (false, false) => Reply::Null,
    })
}

/// `SETEX key seconds value`, `PSETEX key milliseconds value`.
pub async fn setex(cx: &Context<'_>, name: &str, args: &[Bytes]) -> Answer {
    let amount = integer(&args[1])?;
    let invalid = || Reply::error(format!("ERR invalid expire time in '{}' command", name.to_ascii_lowercase()));
    if amount <= 0 {
        return Err(invalid());
    }
    let millis = if name == "SETEX" { amount.checked_mul(1000).ok_or_else(invalid)? } else { amount };
    let options = SetOptions {
        expiry: Some(Expiry::In(std::time::Duration::from_millis(millis as u64))),
        ..SetOptions::default()
    };
    set(cx, &[args[0].clone(), args[2].clone()], options).await
}

/// `GETSET key value`: `SET key value GET`.
pub async fn getset(cx: &Context<'_>, args: &[Bytes]) -> Answer {
    set(cx, args, SetOptions { get: true, ..SetOptions::default() }).await
}

/// `GETDEL key`: the value, and the key deleted.
pub async fn getdel(cx: &Context<'_>, args: &[Bytes]) -> Answer {
    cx.may_read()?;
    let outcome = update(cx, &args[0], UpdateWhen::Live, ClaimChange::Delete).await?;
    Ok(outcome.before.map_or(Reply::Null, |r| Reply::Bulk(value(&r))))
}

/// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT key amount [NX | XX | GT | LT]`: 1 when the expiry
/// was set (or the key deleted, for an instant already past), 0 when the key is absent or the
/// condition did not hold.
pub async fn expire(cx: &Context<'_>, name: &str, args: &[Bytes]) -> Answer {
    let amount = integer(&args[1])?;
    let invalid = || Reply::error(format!("ERR invalid expire time in '{}' command", name.to_ascii_lowercase()));
    let millis =
        if matches!(name, "EXPIRE" | "EXPIREAT") { amount.checked_mul(1000).ok_or_else(invalid)? } else { amount };
    let at = if name.ends_with("AT") {
        Timestamp(millis)
    } else {
        Timestamp(cx.clock.now().millis().checked_add(millis).ok_or_else(invalid)?)
    };
    let when = expire_condition(&args[2..], at)?;
    let change = ClaimChange::Put { data: Keep::Keep, expires_at: Keep::Set(Some(at)) };
    let outcome = update(cx, &args[0], when, change).await?;
    Ok(Reply::Integer(i64::from(outcome.applied)))
}

/// `PERSIST key`: 1 when the key had an expiry and no longer has, else 0.
pub async fn persist(cx: &Context<'_>, args: &[Bytes]) -> Answer {
    let change = ClaimChange::Put { data: Keep::Keep, expires_at: Keep::Set(None) };
    let outcome = update(cx, &args[0], UpdateWhen::Expiring, change).await?;
    Ok(Reply::Integer(i64::from(outcome.applied)))
}

/// The `EXPIRE` family's options as one condition, with Redis's errors for the combinations it
/// refuses. A key that never expires has, for `GT` and `LT`, an infinite time to live.
fn expire_condition(options: &[Bytes], at: Timestamp) -> Result<UpdateWhen, Reply> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in options {
        match String::from_utf8_lossy(option).to_ascii_uppercase().as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            other => return Err(Reply::error(format!("ERR Unsupported option {other}"))),
        }
    }
    if nx && (xx || gt || lt) {
        return Err(Reply::error("ERR NX and XX, GT or LT options at the same time are not compatible"));
    }
    if gt && lt {
        return Err(Reply::error("ERR GT and LT options at the same time are not compatible"));
    }
    Ok(match (nx, xx, gt, lt) {
        (true, ..) => UpdateWhen::Lasting,
        // GT: only a key that expires, and sooner (XX adds nothing to it).
        (_, _, true, _) => UpdateWhen::ExpiresBefore(at),
        (_, true, _, true) => UpdateWhen::ExpiringAfter(at),
        (_, false, _, true) => UpdateWhen::ExpiresAfter(at),
        (_, true, ..) => UpdateWhen::Expiring,
        _ => UpdateWhen::Live,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<Bytes> {
        text.split_whitespace().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    #[test]
    fn expire_options_as_redis_reads_them() {
        let at = Timestamp(5);
        for (options, want) in [
            ("", UpdateWhen::Live),
            ("nx", UpdateWhen::Lasting),
            ("XX", UpdateWhen::Expiring),
            ("GT", UpdateWhen::ExpiresBefore(at)),
            ("XX GT", UpdateWhen::ExpiresBefore(at)),
            ("LT", UpdateWhen::ExpiresAfter(at)),
            ("XX LT", UpdateWhen::ExpiringAfter(at)),
        ] {
            assert_eq!(expire_condition(&words(options), at), Ok(want), "{options}");
        }
        for (options, error) in [
            ("NX XX", "ERR NX and XX, GT or LT options at the same time are not compatible"),
            ("NX GT", "ERR NX and XX, GT or LT options at the same time are not compatible"),
            ("GT LT", "ERR GT and LT options at the same time are not compatible"),
            ("SOON", "ERR Unsupported option SOON"),
        ] {
            assert_eq!(expire_condition(&words(options), at), Err(Reply::error(error)), "{options}");
        }
    }
}
