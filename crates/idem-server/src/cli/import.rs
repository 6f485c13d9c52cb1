//! `idem import`: loads existing keys (JSON Lines, one claim per line) into a running server
//! through the batch API, so a store can be migrated while it keeps serving. Every line is
//! validated locally first; a bad line is reported with its number and skipped, and the command
//! exits non-zero if any line was rejected.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use clap::Args;
use http::Method;
use idem_core::Namespace;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::client::{ApiClient, ClientArgs, Failure, connect, send};
use crate::api::claim::{ClaimRequest, MAX_ITEMS};

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// JSON Lines file, or - for standard input.
    pub file: PathBuf,
    /// Namespace for lines that do not name one.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Claims sent per request.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// One line of an import file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    namespace: Option<String>,
    key: Option<String>,
    parts: Option<Vec<String>>,
    data: Option<Box<RawValue>>,
    ttl_seconds: Option<u64>,
    /// When a legacy record was made: kept as the claim's `created_at`, its TTL counting from it.
    created_at: Option<String>,
}

#[derive(Debug, Default)]
struct Tally {
    claimed: usize,
    existing: usize,
    rejected: usize,
}

pub async fn run(args: ImportArgs) -> Result<(), Failure> {
    let client = connect(&args.client)?;
    let reader: Box<dyn BufRead> = if args.file.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(&args.file)
            .map_err(|e| Failure { code: 2, message: format!("cannot open {}: {e}", args.file.display()) })?;
        Box::new(BufReader::new(file))
    };
    let batch_size = args.batch.clamp(1, MAX_ITEMS);
    let mut tally = Tally::default();
    let mut pending: Option<(String, Vec<serde_json::Value>)> = None;
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| Failure { code: 1, message: format!("reading line {}: {e}", i + 1) })?;
        if line.trim().is_empty() {
            continue;
        }
        let (ns, item) = match parse_line(&line, args.namespace.as_deref()) {
            Ok(parsed) => parsed,
            Err(message) => {
                eprintln!("idem import: line {}: {message}", i + 1);
                tally.rejected += 1;
                continue;
            }
        };
        if pending.as_ref().is_some_and(|(p, items)| *p != ns || items.len() >= batch_size)
            && let Some((p, items)) = pending.take()
        {
            flush(&client, &p, items, &mut tally).await?;
        }
        pending.get_or_insert_with(|| (ns, Vec::new())).1.push(item);
    }
    if let Some((ns, items)) = pending.take() {
        flush(&client, &ns, items, &mut tally).await?;
    }
    eprintln!(
        "idem import: {} claimed, {} already present, {} rejected",
        tally.claimed, tally.existing, tally.rejected
    );
    if tally.rejected > 0 {
        return Err(Failure { code: 1, message: format!("{} lines were rejected", tally.rejected) });
    }
    Ok(())
}

/// Validates a line exactly as the server would, and turns it into a batch item.
fn parse_line(text: &str, default_ns: Option<&str>) -> Result<(String, serde_json::Value), String> {
    let line: Line = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let ns = line.namespace.as_deref().or(default_ns).ok_or("no namespace: give one per line or --namespace")?;
    Namespace::new(ns).map_err(|e| e.to_string())?;
    let data =
        line.data.map(|d| serde_json::from_str::<serde_json::Value>(d.get())).transpose().map_err(|e| e.to_string())?;
    let item = serde_json::json!({
        "key": line.key,
        "parts": line.parts,
        "data": data,
        "ttl_seconds": line.ttl_seconds,
        "created_at": line.created_at,
    });
    // What is not given is left out, as the server reads an absent field (not a null one).
    let item = strip_nulls(item);
    let check: ClaimRequest = serde_json::from_value(item.clone()).map_err(|e| e.to_string())?;
    check.into_new_claim(None, idem_core::Clock::now(&idem_core::SystemClock)).map_err(|e| e.to_string())?;
    Ok((ns.to_owned(), item))
}

fn strip_nulls(mut item: serde_json::Value) -> serde_json::Value {
    if let Some(map) = item.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    item
}

async fn flush(client: &ApiClient, ns: &str, items: Vec<serde_json::Value>, tally: &mut Tally) -> Result<(), Failure> {
    let body = serde_json::json!({ "items": items });
    let reply = send(client, Method::POST, &format!("/v1/claims/{ns}/batch"), Some(&body)).await?;
    let results = reply.json();
    for result in results["results"].as_array().map(Vec::as_slice).unwrap_or_default() {
        if result["claimed"].as_bool() == Some(true) {
            tally.claimed += 1;
        } else {
            tally.existing += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_validated_like_requests() {
        let (ns, item) = parse_line(r#"{"namespace":"a","parts":["s","u"],"data":{"x":1}}"#, None).expect("valid");
        assert_eq!(ns, "a");
        assert_eq!(item, serde_json::json!({"parts": ["s", "u"], "data": {"x": 1}}));
        assert_eq!(parse_line(r#"{"key":"k"}"#, Some("dflt")).expect("valid").0, "dflt");
        assert!(parse_line(r#"{"key":"k"}"#, None).is_err(), "a namespace is needed");
        assert!(parse_line(r#"{"key":""}"#, Some("a")).is_err());
        assert!(parse_line(r#"{"key":"k","bogus":1}"#, Some("a")).is_err());
        assert!(parse_line("not json", Some("a")).is_err());
        assert!(parse_line(r#"{"key":"k"}"#, Some("Bad NS")).is_err());
    }
}
