//! Receipts: the filtered, paged list, one receipt with its attempt timeline, and replay and discard.

use std::fmt::Write as _;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query};
use axum::response::Response;
use idem_core::event::{Receipt, ReceiptFilter, ReceiptId, ReceiptStatus};
use serde::Deserialize;

use super::html::{Tab, badge, esc, notice, options, query, relative, time};
use super::{PAGE, Page, STATUSES, at, failed, filled, live, now, render, source_names};
use crate::actions as api;
use crate::ui::Ui;
use crate::web::ApiError;

#[derive(Debug, Default, Deserialize)]
pub struct ReceiptQuery {
    source: Option<String>,
    status: Option<String>,
    /// An event id, or a receipt id (rcpt_…) to open that receipt.
    q: Option<String>,
    cursor: Option<String>,
}

pub async fn receipts(state: Ui, query_: Result<Query<ReceiptQuery>, QueryRejection>) -> Response {
    let Query(q) = query_.unwrap_or_default();
    if let Some(id) = filled(&q.q).and_then(|t| ReceiptId::parse(t).ok()) {
        let page = receipt_page(&state, &id, None).await.unwrap_or_else(|e| e);
        return at(page, &format!("/ui/receipts/{id}"));
    }
    let status = match filled(&q.status).map(api::parse_status).transpose() {
        Ok(s) => s,
        Err(e) => return failed(&state, Tab::Receipts, e.into()),
    };
    let before = filled(&q.cursor).and_then(|c| ReceiptId::parse(c).ok());
    // A token limited to some sources lists one of them at a time: the first, unless one is picked.
    let source =
        filled(&q.source).map(str::to_owned).or_else(|| state.caller.sources().and_then(|s| s.first().cloned()));
    if let Err(e) = api::check_source_scope(&state.caller, source.as_deref()) {
        return failed(&state, Tab::Receipts, e);
    }
    let filter = ReceiptFilter {
        source: source.clone(),
        status,
        event_id: filled(&q.q).map(str::to_owned),
        limit: PAGE,
        before,
        from: None,
    };
    let list = match state.stores.events.list_receipts(&filter).await {
        Ok(list) => list,
        Err(e) => return failed(&state, Tab::Receipts, e.into()),
    };
    let sources = source_names(&state);
    let source_refs: Vec<&str> = sources.iter().map(String::as_str).collect();
    let form = format!(
        r#"<form class="filters" method="get" action="/ui/receipts" data-ui>
<label>Source <select name="source">{}</select></label>
<label>Status <select name="status" data-testid="status-filter">{}</select></label>
<label class="grow">Event id or receipt id <input name="q" type="search" value="{}" placeholder="evt_123 or rcpt_…" data-testid="search-input"></label>
<button type="submit" data-testid="search-submit">Find</button>
</form>"#,
        options("any source", &source_refs, source.as_deref()),
        options("any status", &STATUSES, filled(&q.status)),
        esc(filled(&q.q).unwrap_or(""))
    );
    let bulk = match status {
        Some(s) if s.is_terminal() => format!(
            r#"<p><a class="button secondary" href="/ui/replay{}" data-testid="bulk-link">Replay every {} receipt that matches…</a></p>"#,
            query(&[
                ("source", filled(&q.source)),
                ("status", Some(s.as_str())),
                ("event_id", filled(&q.q)),
                ("count", Some("1"))
            ]),
            s.as_str()
        ),
        _ => String::new(),
    };
    let now = now(&state);
    let mut table = String::new();
    if list.is_empty() {
        table.push_str(if filter.source.is_none() && filter.status.is_none() && filter.event_id.is_none() {
            r#"<p class="empty">No receipts yet. Each event a source accepts at <code>POST /v1/sources/{name}/events</code> gets one here.</p>"#
        } else {
            r#"<p class="empty">No receipts match this filter. Clear a field, or pick another status.</p>"#
        });
    } else {
        table.push_str(
            r#"<div class="scroll"><table class="receipts"><thead><tr><th>Status</th><th>Event id</th><th>Source</th><th>Created</th><th>Updated</th><th>Receipt</th></tr></thead><tbody>"#,
        );
        for r in &list {
            let next = r
                .next_attempt_at
                .map(|at| format!(r#"<div class="muted" data-testid="next-attempt">next {}</div>"#, relative(at, now)))
                .unwrap_or_default();
            let _ = write!(
                table,
                r#"<tr data-testid="receipt-row" data-receipt-id="{id}"><td>{}{next}</td><td><a href="/ui/receipts/{id}">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td class="mono"><a href="/ui/receipts/{id}">{id}</a></td></tr>"#,
                badge(r.status),
                esc(&r.event_id),
                esc(&r.source),
                time(r.created_at, now),
                time(r.updated_at, now),
                id = r.id
            );
        }
        table.push_str("</tbody></table></div>");
        if list.len() == PAGE
            && let Some(last) = list.last()
        {
            let next = query(&[
                ("source", filled(&q.source)),
                ("status", filled(&q.status)),
                ("q", filled(&q.q)),
                ("cursor", Some(last.id.as_str())),
            ]);
            let _ = write!(table, r#"<p class="pager"><a href="/ui/receipts{next}">Older receipts →</a></p>"#);
        }
    }
    let first_page = q.cursor.is_none();
    let content = format!("<h1>Receipts</h1>{form}{bulk}{}", if first_page { live(5, &table) } else { table });
    render(&state, "Receipts", Tab::Receipts, &content)
}

pub async fn receipt(state: Ui, Path(id): Path<String>) -> Response {
    match ReceiptId::parse(&id) {
        Ok(id) => receipt_page(&state, &id, None).await.unwrap_or_else(|e| e),
        Err(e) => failed(&state, Tab::Receipts, e.into()),
    }
}

async fn receipt_page(state: &Ui, id: &ReceiptId, flash: Option<String>) -> Page {
    let receipt = state
        .stores
        .events
        .get_receipt(id)
        .await
        .map_err(|e| failed(state, Tab::Receipts, e.into()))?
        .ok_or_else(|| failed(state, Tab::Receipts, ApiError::NotFound(format!("no receipt {id}"))))?;
    state.caller.require_source(&receipt.source).map_err(|e| failed(state, Tab::Receipts, e))?;
    let content = format!("{}{}", flash.unwrap_or_default(), receipt_view(state, &receipt));
    Ok(render(state, &format!("Receipt {}", receipt.event_id), Tab::Receipts, &content))
}

fn receipt_view(state: &Ui, r: &Receipt) -> String {
    let now = now(state);
    let replayable = idem_core::event::replay(r.status) == idem_core::event::Replay::Restart;
    let discardable = r.status == ReceiptStatus::Dead;
    let action = |what: &str, label: &str, enabled: bool, why: &str| {
        if enabled {
            format!(
                r#"<form method="post" action="/ui/receipts/{}/{what}" data-ui><button type="submit" data-testid="{what}">{label}</button></form>"#,
                r.id
            )
        } else {
            format!(r#"<button type="button" data-testid="{what}" disabled title="{why}">{label}</button>"#)
        }
    };
    let actions = if !state.acts_on_source(&r.source) {
        String::new()
    } else {
        format!(
            r#"<div class="actions">{}{}</div>"#,
            action(
                "replay",
                "Replay from attempt 1",
                replayable,
                "Still being delivered: it can be replayed once it ends."
            ),
            action("discard", "Discard (handled by hand)", discardable, "Only dead receipts can be discarded.")
        )
    };
    let body = match r.body.as_deref().map(api::body_view) {
        Some((Some(json), _)) => format!(
            r#"<pre class="code" data-testid="event-body">{}</pre>"#,
            esc(&serde_json::to_string_pretty(&json).unwrap_or_default())
        ),
        Some((None, Some(b64))) => match r.body.as_deref().map(std::str::from_utf8) {
            Some(Ok(text)) => format!(r#"<pre class="code" data-testid="event-body">{}</pre>"#, esc(text)),
            _ => format!(
                r#"<p class="muted">Not text; base64:</p><pre class="code" data-testid="event-body">{}</pre>"#,
                esc(&b64)
            ),
        },
        _ => r#"<p class="muted">No body.</p>"#.to_owned(),
    };
    let mut attempts = String::new();
    if r.attempts.is_empty() {
        attempts.push_str(match r.status {
            ReceiptStatus::Accepted | ReceiptStatus::Processing => {
                r#"<p class="empty">No attempt finished yet in this round: the first delivery is queued or under way.</p>"#
            }
            _ => r#"<p class="empty">No attempts in this round.</p>"#,
        });
    } else {
        attempts.push_str(r#"<ol class="timeline">"#);
        for a in &r.attempts {
            let outcome = match (a.status_code, &a.error) {
                (Some(code), _) if (200..300).contains(&code) => {
                    format!(r#"<span class="badge s-completed"><span aria-hidden="true">✔</span> HTTP {code}</span>"#)
                }
                (Some(code), _) => {
                    format!(r#"<span class="badge s-dead"><span aria-hidden="true">✖</span> HTTP {code}</span>"#)
                }
                (None, Some(e)) => {
                    format!(r#"<span class="badge s-dead"><span aria-hidden="true">✖</span> error</span> {}"#, esc(e))
                }
                (None, None) => "no answer".to_owned(),
            };
            let response = a
                .response
                .as_deref()
                .filter(|t| !t.is_empty())
                .map(|t| format!(r#"<pre class="code small">{}</pre>"#, esc(t)))
                .unwrap_or_default();
            let _ = write!(
                attempts,
                r#"<li data-testid="attempt"><div><strong>Attempt {}</strong> · {} · {} ms</div><div>{outcome}</div>{response}</li>"#,
                a.n,
                time(a.started_at, now),
                a.duration_ms
            );
        }
        attempts.push_str("</ol>");
    }
    if let Some(at) = r.next_attempt_at {
        let n = r.attempts.last().map_or(1, |a| a.n + 1);
        let _ = write!(
            attempts,
            r#"<p data-testid="next-attempt"><strong>Attempt {n}</strong> is due {}</p>"#,
            time(at, now)
        );
    }
    let result = match &r.result {
        None => "<p class=\"muted\">None for this round (the source has no result webhook, or the receipt has not ended).</p>".to_owned(),
        Some(res) => format!(
            "<p>{} after {} attempt(s){}{}</p>",
            esc(res.status.as_str()),
            res.attempts,
            res.last_status_code.map(|c| format!(", last answer HTTP {c}")).unwrap_or_default(),
            res.last_error.as_deref().map(|e| format!(", last error: {}", esc(e))).unwrap_or_default()
        ),
    };
    let inner = format!(
        r#"<div class="title-row"><h1>{}</h1><span data-testid="receipt-status">{}</span></div>
<dl class="facts"><dt>Receipt</dt><dd class="mono">{}</dd><dt>Source</dt><dd><a href="/ui/receipts{}">{}</a></dd>
<dt>Round</dt><dd>{} <span class="muted">(1, plus one per replay)</span></dd>
<dt>Created</dt><dd>{}</dd><dt>Updated</dt><dd>{}</dd><dt>Content type</dt><dd>{}</dd></dl>
{actions}
<div class="columns"><section><h2>Event</h2>{body}</section>
<section><h2>Attempts</h2>{attempts}<h2>Result webhook</h2>{result}</section></div>"#,
        esc(&r.event_id),
        badge(r.status),
        r.id,
        query(&[("source", Some(&r.source))]),
        esc(&r.source),
        r.round,
        time(r.created_at, now),
        time(r.updated_at, now),
        esc(r.content_type.as_deref().unwrap_or("—")),
    );
    live(3, &inner)
}

pub async fn replay_one(state: Ui, Path(id): Path<String>) -> Response {
    act(&state, &id, "replay").await
}

pub async fn discard_one(state: Ui, Path(id): Path<String>) -> Response {
    act(&state, &id, "discard").await
}

async fn act(state: &Ui, id: &str, what: &str) -> Response {
    let id = match ReceiptId::parse(id) {
        Ok(id) => id,
        Err(e) => return failed(state, Tab::Receipts, e.into()),
    };
    match state.stores.events.get_receipt(&id).await {
        Ok(Some(r)) if !state.caller.sees_source(&r.source) => {
            return failed(
                state,
                Tab::Receipts,
                state.caller.require_source(&r.source).err().unwrap_or(ApiError::Internal),
            );
        }
        Ok(_) => {}
        Err(e) => return failed(state, Tab::Receipts, e.into()),
    }
    let done = if what == "replay" { api::replay_one(state, &id).await } else { api::discard_one(state, &id).await };
    if done.is_ok() {
        tracing::info!(token = state.caller.name(), receipt = %id, action = what, "receipt {what} from the dashboard");
    }
    let flash = match done {
        Ok(()) if what == "replay" => notice("ok", "Replayed: delivery starts again from attempt 1."),
        Ok(()) => notice("ok", "Discarded: it no longer counts as a dead letter, and can still be replayed."),
        Err(e @ ApiError::Conflict(_)) => notice("error", &e.to_string()),
        Err(e) => return failed(state, Tab::Receipts, e),
    };
    let page = receipt_page(state, &id, Some(flash)).await.unwrap_or_else(|e| e);
    at(page, &format!("/ui/receipts/{id}"))
}
