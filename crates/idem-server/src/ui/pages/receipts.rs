//! Receipts: the filtered, paged list, one receipt with its attempt timeline, and replay and discard.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query};
use axum::response::Response;
use idem_core::Timestamp;
use idem_core::event::{AttemptRecord, Receipt, ReceiptFilter, ReceiptId, ReceiptStatus};
use maud::{Markup, html};
use serde::Deserialize;

use super::html::{Tab, badge, notice, options, pill, query, relative, time};
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
        before: filled(&q.cursor).and_then(|c| ReceiptId::parse(c).ok()),
        from: None,
    };
    let list = match state.stores.events.list_receipts(&filter).await {
        Ok(list) => list,
        Err(e) => return failed(&state, Tab::Receipts, e.into()),
    };
    let table = receipts_table(&q, &filter, &list, now(&state));
    let content = html! {
        h1 { "Receipts" }
        (filters_form(&state, &q, source.as_deref()))
        @if let Some(s) = status.filter(|s| s.is_terminal()) { (bulk_link(&q, s)) }
        // Only the first page refreshes: an older page stays where it was paged to.
        @if q.cursor.is_none() { (live(5, table)) } @else { (table) }
    };
    render(&state, "Receipts", Tab::Receipts, content)
}

fn filters_form(state: &Ui, q: &ReceiptQuery, source: Option<&str>) -> Markup {
    let sources = source_names(state);
    let source_refs: Vec<&str> = sources.iter().map(String::as_str).collect();
    html! {
        form.filters method="get" action="/ui/receipts" data-ui {
            label { "Source " select name="source" { (options("any source", &source_refs, source)) } }
            label { "Status " select name="status" data-testid="status-filter" {
                (options("any status", &STATUSES, filled(&q.status)))
            } }
            label.grow {
                "Event id or receipt id "
                input name="q" type="search" value=(filled(&q.q).unwrap_or("")) placeholder="evt_123 or rcpt_…"
                    data-testid="search-input";
            }
            button type="submit" data-testid="search-submit" { "Find" }
        }
    }
}

/// The way from a list of ended receipts to replaying all of them.
fn bulk_link(q: &ReceiptQuery, status: ReceiptStatus) -> Markup {
    let filter = query(&[
        ("source", filled(&q.source)),
        ("status", Some(status.as_str())),
        ("event_id", filled(&q.q)),
        ("count", Some("1")),
    ]);
    html! {
        p { a.button.secondary href={ "/ui/replay" (filter) } data-testid="bulk-link" {
            "Replay every " (status.as_str()) " receipt that matches…"
        } }
    }
}

fn receipts_table(q: &ReceiptQuery, filter: &ReceiptFilter, list: &[Receipt], now: Timestamp) -> Markup {
    if list.is_empty() {
        let unfiltered = filter.source.is_none() && filter.status.is_none() && filter.event_id.is_none();
        return html! {
            @if unfiltered {
                p.empty {
                    "No receipts yet. Each event a source accepts at " code { "POST /v1/sources/{name}/events" }
                    " gets one here."
                }
            } @else {
                p.empty { "No receipts match this filter. Clear a field, or pick another status." }
            }
        };
    }
    let older = list.last().filter(|_| list.len() == PAGE).map(|last| {
        query(&[
            ("source", filled(&q.source)),
            ("status", filled(&q.status)),
            ("q", filled(&q.q)),
            ("cursor", Some(last.id.as_str())),
        ])
    });
    html! {
        div.scroll { table.receipts {
            thead { tr {
                th { "Status" } th { "Event id" } th { "Source" } th { "Created" } th { "Updated" } th { "Receipt" }
            } }
            tbody { @for r in list { (receipt_row(r, now)) } }
        } }
        @if let Some(next) = older { p.pager { a href={ "/ui/receipts" (next) } { "Older receipts →" } } }
    }
}

fn receipt_row(r: &Receipt, now: Timestamp) -> Markup {
    html! {
        tr data-testid="receipt-row" data-receipt-id=(r.id) {
            td {
                (badge(r.status))
                @if let Some(at) = r.next_attempt_at {
                    div.muted data-testid="next-attempt" { "next " (relative(at, now)) }
                }
            }
            td { a href={ "/ui/receipts/" (r.id) } { (r.event_id) } }
            td { (r.source) }
            td { (time(r.created_at, now)) }
            td { (time(r.updated_at, now)) }
            td.mono { a href={ "/ui/receipts/" (r.id) } { (r.id) } }
        }
    }
}

pub async fn receipt(state: Ui, Path(id): Path<String>) -> Response {
    match ReceiptId::parse(&id) {
        Ok(id) => receipt_page(&state, &id, None).await.unwrap_or_else(|e| e),
        Err(e) => failed(&state, Tab::Receipts, e.into()),
    }
}

async fn receipt_page(state: &Ui, id: &ReceiptId, flash: Option<Markup>) -> Page {
    let receipt = state
        .stores
        .events
        .get_receipt(id)
        .await
        .map_err(|e| failed(state, Tab::Receipts, e.into()))?
        .ok_or_else(|| failed(state, Tab::Receipts, ApiError::NotFound(format!("no receipt {id}"))))?;
    state.caller.require_source(&receipt.source).map_err(|e| failed(state, Tab::Receipts, e))?;
    let content = html! { @if let Some(flash) = flash { (flash) } (receipt_view(state, &receipt)) };
    Ok(render(state, &format!("Receipt {}", receipt.event_id), Tab::Receipts, content))
}

fn receipt_view(state: &Ui, r: &Receipt) -> Markup {
    let now = now(state);
    let inner = html! {
        div.title-row { h1 { (r.event_id) } span data-testid="receipt-status" { (badge(r.status)) } }
        dl.facts {
            dt { "Receipt" } dd.mono { (r.id) }
            dt { "Source" } dd { a href={ "/ui/receipts" (query(&[("source", Some(&r.source))])) } { (r.source) } }
            dt { "Round" } dd { (r.round) " " span.muted { "(1, plus one per replay)" } }
            dt { "Created" } dd { (time(r.created_at, now)) }
            dt { "Updated" } dd { (time(r.updated_at, now)) }
            dt { "Content type" } dd { (r.content_type.as_deref().unwrap_or("—")) }
        }
        @if state.acts_on_source(&r.source) { (actions(r)) }
        div.columns {
            section { h2 { "Event" } (event_body(r)) }
            section { h2 { "Attempts" } (attempts(r, now)) h2 { "Result webhook" } (result_webhook(r)) }
        }
    };
    live(3, inner)
}

/// Replay and discard, each a button that is greyed out, saying why, when it does not apply.
fn actions(r: &Receipt) -> Markup {
    let replayable = idem_core::event::replay(r.status) == idem_core::event::Replay::Restart;
    let discardable = r.status == ReceiptStatus::Dead;
    let action = |what: &str, label: &str, enabled: bool, why: &str| {
        // A disabled button rather than none: the page says why the action does not apply now.
        html! {
            @if enabled {
                form method="post" action={ "/ui/receipts/" (r.id) "/" (what) } data-ui {
                    button type="submit" data-testid=(what) { (label) }
                }
            } @else {
                button type="button" data-testid=(what) disabled title=(why) { (label) }
            }
        }
    };
    html! {
        div.actions {
            (action(
                "replay",
                "Replay from attempt 1",
                replayable,
                "Still being delivered: it can be replayed once it ends."
            ))
            (action("discard", "Discard (handled by hand)", discardable, "Only dead receipts can be discarded."))
        }
    }
}

/// The event as it came: pretty JSON, else the text, else base64.
fn event_body(r: &Receipt) -> Markup {
    let shown = |text: &str| html! { pre.code data-testid="event-body" { (text) } };
    match r.body.as_deref().map(api::body_view) {
        Some((Some(json), _)) => shown(&serde_json::to_string_pretty(&json).unwrap_or_default()),
        Some((None, Some(b64))) => match r.body.as_deref().map(std::str::from_utf8) {
            Some(Ok(text)) => shown(text),
            _ => html! { p.muted { "Not text; base64:" } (shown(&b64)) },
        },
        _ => html! { p.muted { "No body." } },
    }
}

/// Every round's attempts, oldest first (a replay starts a new round), and the next one when it is
/// due.
fn attempts(r: &Receipt, now: Timestamp) -> Markup {
    let under_way = matches!(r.status, ReceiptStatus::Accepted | ReceiptStatus::Processing);
    let this_round = r.attempts.iter().filter(|a| a.round == r.round).count();
    html! {
        @if this_round == 0 && under_way {
            p.empty { "No attempt finished yet in this round: the first delivery is queued or under way." }
        }
        @if r.attempts.is_empty() {
            @if !under_way {
                p.empty { "No attempts yet." }
            }
        } @else {
            ol.timeline { @for a in &r.attempts { (attempt(a, r.round > 1, now)) } }
        }
        @if let Some(at) = r.next_attempt_at {
            p data-testid="next-attempt" {
                strong { "Attempt " (r.attempts.last().map_or(1, |a| a.n + 1)) } " is due " (time(at, now))
            }
        }
    }
}

/// One attempt; `rounds`: the receipt was replayed, so each attempt says its round.
fn attempt(a: &AttemptRecord, rounds: bool, now: Timestamp) -> Markup {
    let outcome = match (a.status_code, &a.error) {
        (Some(code), _) if (200..300).contains(&code) => pill("s-completed", "✔", &format!("HTTP {code}")),
        (Some(code), _) => pill("s-dead", "✖", &format!("HTTP {code}")),
        (None, Some(e)) => html! { (pill("s-dead", "✖", "error")) " " (e) },
        (None, None) => html! { "no answer" },
    };
    html! {
        li data-testid="attempt" data-round=(a.round) {
            div {
                @if rounds { span.muted { "Round " (a.round) " · " } }
                strong { "Attempt " (a.n) } " · " (time(a.started_at, now)) " · " (a.duration_ms) " ms"
            }
            div { (outcome) }
            @if let Some(response) = a.response.as_deref().filter(|t| !t.is_empty()) {
                pre.code.small { (response) }
            }
        }
    }
}

fn result_webhook(r: &Receipt) -> Markup {
    match &r.result {
        None => html! {
            p.muted { "None for this round (the source has no result webhook, or the receipt has not ended)." }
        },
        Some(res) => html! {
            p {
                (res.status.as_str()) " after " (res.attempts) " attempt(s)"
                @if let Some(code) = res.last_status_code { ", last answer HTTP " (code) }
                @if let Some(e) = &res.last_error { ", last error: " (e) }
            }
        },
    }
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
