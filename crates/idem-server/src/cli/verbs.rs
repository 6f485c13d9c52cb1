//! The client verbs: `idem claims put|get|delete`, `idem operations get|delete` and
//! `idem receipts list|show|replay|discard`, against a running server.

use http::Method;
use idem_core::{ClaimId, Namespace, Parts};

use super::client::{ApiClient, Failure, connect, send};
use super::{ClaimsCommand, KeyArgs, OperationsCommand, Output, ReceiptsCommand};

fn key_parts(key: KeyArgs) -> Result<Option<Parts>, Failure> {
    let parts = match (key.key, key.part.is_empty()) {
        (Some(k), _) => Parts::single(k),
        (None, false) => Parts::new(key.part),
        (None, true) => return Ok(None),
    };
    parts.map(Some).map_err(|e| Failure::usage(format!("invalid key: {e}")))
}

/// The record an id or the key flags name; `neither`: what to say when given none of them.
fn claim_id(id: Option<String>, key: KeyArgs, neither: &str) -> Result<ClaimId, Failure> {
    match (id, key_parts(key)?) {
        (Some(id), None) => ClaimId::parse(&id).map_err(|e| Failure::usage(e.to_string())),
        (None, Some(parts)) => Ok(parts.id()),
        (Some(_), Some(_)) => Err(Failure::usage("give either an id or --key/--part, not both")),
        (None, None) => Err(Failure::usage(neither)),
    }
}

/// What `get` and `operations` say when given no record.
const GIVE_ONE: &str = "give either an id or --key/--part";

/// What `idem claims delete NS` says when given no claim: the prefix form too.
const GIVE_DELETE: &str = "give the claim to delete: its id, or --key KEY, or --part PART (repeated, in order); \
                           or --prefix PART (repeated, in order) to delete every live claim whose parts begin so";

fn check_namespace(ns: &str) -> Result<(), Failure> {
    Namespace::new(ns).map(drop).map_err(|e| Failure::usage(e.to_string()))
}

pub(super) async fn claims(command: ClaimsCommand) -> Result<(), Failure> {
    let reply = match command {
        ClaimsCommand::Put { namespace, key, data, ttl_seconds, client } => {
            check_namespace(&namespace)?;
            let parts = key_parts(key)?.ok_or_else(|| Failure::usage("give --key or --part"))?;
            let data: Option<serde_json::Value> = data
                .map(|d| serde_json::from_str(&d))
                .transpose()
                .map_err(|e| Failure::usage(format!("--data is not JSON: {e}")))?;
            let body = serde_json::json!({"parts": parts.as_slice(), "data": data, "ttl_seconds": ttl_seconds});
            send(&connect(&client)?, Method::POST, &format!("/v1/claims/{namespace}"), Some(&body)).await?
        }
        ClaimsCommand::Get { namespace, id, key, client } => {
            check_namespace(&namespace)?;
            let id = claim_id(id, key, GIVE_ONE)?;
            send(&connect(&client)?, Method::GET, &format!("/v1/claims/{namespace}/{id}"), None).await?
        }
        ClaimsCommand::Delete { namespace, prefix, client, .. } if !prefix.is_empty() => {
            check_namespace(&namespace)?;
            return delete_prefix(&connect(&client)?, &namespace, &prefix).await;
        }
        ClaimsCommand::Delete { namespace, id, key, client, .. } => {
            check_namespace(&namespace)?;
            let id = claim_id(id, key, GIVE_DELETE)?;
            send(&connect(&client)?, Method::DELETE, &format!("/v1/claims/{namespace}/{id}"), None).await?
        }
        ClaimsCommand::List { namespace, prefix, limit, client } => {
            check_namespace(&namespace)?;
            return list(&connect(&client)?, &namespace, &prefix, limit).await;
        }
    };
    if !reply.body.is_empty() {
        println!("{}", serde_json::to_string_pretty(&reply.json()).unwrap_or_default());
    }
    if reply.json()["claimed"] == serde_json::Value::Bool(false) {
        return Err(Failure { code: 3, message: "already claimed: the record printed is the existing one".into() });
    }
    Ok(())
}

/// `?prefix=a&prefix=b`, each part encoded.
fn prefix_query(prefix: &[String]) -> String {
    let pairs: Vec<(&str, &str)> = prefix.iter().map(|p| ("prefix", p.as_str())).collect();
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// Prints every live claim under `prefix`, one JSON record per line, following the pages.
async fn list(client: &ApiClient, namespace: &str, prefix: &[String], limit: Option<usize>) -> Result<(), Failure> {
    let mut left = limit.unwrap_or(usize::MAX);
    let mut after: Option<String> = None;
    while left > 0 {
        let page = left.min(1000);
        let mut path = format!("/v1/claims/{namespace}?{}&limit={page}", prefix_query(prefix));
        if let Some(after) = &after {
            path.push_str(&format!("&after={after}"));
        }
        let reply = send(client, Method::GET, &path, None).await?.json();
        let items = reply["items"].as_array().cloned().unwrap_or_default();
        for item in &items {
            println!("{item}");
        }
        left = left.saturating_sub(items.len());
        match reply["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    Ok(())
}

/// Deletes every live claim under `prefix` (a call at a time while some remain); prints how many.
async fn delete_prefix(client: &ApiClient, namespace: &str, prefix: &[String]) -> Result<(), Failure> {
    let path = format!("/v1/claims/{namespace}?{}", prefix_query(prefix));
    let mut deleted = 0;
    loop {
        let reply = send(client, Method::DELETE, &path, None).await?.json();
        deleted += reply["deleted"].as_u64().unwrap_or(0);
        if reply["more"] != serde_json::Value::Bool(true) {
            break;
        }
    }
    println!("{}", serde_json::json!({ "deleted": deleted }));
    Ok(())
}

pub(super) async fn operations(command: OperationsCommand) -> Result<(), Failure> {
    let (method, namespace, id, key, client) = match command {
        OperationsCommand::Get { namespace, id, key, client } => (Method::GET, namespace, id, key, client),
        OperationsCommand::Delete { namespace, id, key, client } => (Method::DELETE, namespace, id, key, client),
    };
    check_namespace(&namespace)?;
    let id = claim_id(id, key, GIVE_ONE)?;
    let reply = send(&connect(&client)?, method, &format!("/v1/operations/{namespace}/{id}"), None).await?;
    if !reply.body.is_empty() {
        println!("{}", serde_json::to_string_pretty(&reply.json()).unwrap_or_default());
    }
    Ok(())
}

pub(super) async fn receipts(command: ReceiptsCommand) -> Result<(), Failure> {
    let reply = match command {
        ReceiptsCommand::List { source, status, event_id, limit, cursor, output, client } => {
            let mut query = vec![format!("limit={limit}")];
            let params = [("source", source), ("status", status), ("event_id", event_id), ("cursor", cursor)];
            query.extend(params.into_iter().filter_map(|(k, v)| v.map(|v| format!("{k}={}", percent_encode(&v)))));
            let reply =
                send(&connect(&client)?, Method::GET, &format!("/v1/receipts?{}", query.join("&")), None).await?;
            use std::io::IsTerminal;
            if output.unwrap_or(if std::io::stdout().is_terminal() { Output::Table } else { Output::Json })
                == Output::Table
            {
                print!("{}", receipts_table(&reply.json()));
                return Ok(());
            }
            reply
        }
        ReceiptsCommand::Show { id, client } => {
            send(&connect(&client)?, Method::GET, &format!("/v1/receipts/{}", percent_encode(&id)), None).await?
        }
        ReceiptsCommand::Replay { id: Some(_), filter, .. } if !filter.is_empty() => {
            return Err(Failure::usage("give either a receipt id or filters (--status …), not both"));
        }
        ReceiptsCommand::Replay { id: Some(id), client, .. } => {
            send(&connect(&client)?, Method::POST, &format!("/v1/receipts/{}/replay", percent_encode(&id)), None)
                .await?
        }
        ReceiptsCommand::Replay { id: None, filter, .. } if filter.status.is_none() => {
            return Err(Failure::usage(
                "give a receipt id, or --status dead (with --source, --event-id, --created-before/after to narrow it) to replay every match",
            ));
        }
        ReceiptsCommand::Replay { id: None, filter, client } => {
            send(&connect(&client)?, Method::POST, "/v1/receipts/replay", Some(&filter.body())).await?
        }
        ReceiptsCommand::Discard { id, client } => {
            send(&connect(&client)?, Method::POST, &format!("/v1/receipts/{}/discard", percent_encode(&id)), None)
                .await?
        }
    };
    println!("{}", serde_json::to_string_pretty(&reply.json()).unwrap_or_default());
    Ok(())
}

/// A page of receipts as a table, one line each, and how to get the next page.
fn receipts_table(page: &serde_json::Value) -> String {
    let receipts = page["receipts"].as_array().map(Vec::as_slice).unwrap_or_default();
    let text = |r: &serde_json::Value, field: &str| r[field].as_str().unwrap_or("").to_owned();
    let rows: Vec<[String; 6]> = receipts
        .iter()
        .map(|r| {
            let round = r["round"].as_u64().map_or_else(String::new, |n| n.to_string());
            [text(r, "id"), text(r, "source"), text(r, "event_id"), text(r, "status"), round, text(r, "created_at")]
        })
        .collect();
    let mut widths = ["ID", "SOURCE", "EVENT ID", "STATUS", "ROUND", "CREATED"].map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let padded: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(["ID", "SOURCE", "EVENT ID", "STATUS", "ROUND", "CREATED"]);
    for row in &rows {
        out.push_str(&line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]]));
    }
    match page["next_cursor"].as_str() {
        Some(cursor) => out.push_str(&format!("(more: --cursor {cursor})\n")),
        None if rows.is_empty() => out.push_str("(no receipts)\n"),
        None => {}
    }
    out
}

/// Encodes a query or path value: everything but unreserved characters.
fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
