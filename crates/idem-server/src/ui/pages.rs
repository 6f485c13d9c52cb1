//! The dashboard's pages. Each reads what it shows straight from the store (or, for traffic, from
//! the server's own counters) and asks the same functions the API uses for every action, so the
//! dashboard can do nothing the API would refuse.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Form, extract::rejection::QueryRejection};
use idem_core::event::{Receipt, ReceiptFilter, ReceiptId, ReceiptStatus};
use idem_core::request::{Forget, RequestState};
use idem_core::{ClaimId, Namespace, Parts, Timestamp};
use serde::Deserialize;

use super::html::{self, Tab, age, badge, esc, notice, options, query, time};
use crate::api::receipt::{self as api, BulkReplayRequest};
use crate::api::{ApiError, AppState};
use crate::config::StoreConfig;

const PAGE: usize = 50;
const STATUSES: [&str; 6] = ["accepted", "processing", "retrying", "completed", "dead", "discarded"];

/// A rendered page, or a page that reports what went wrong.
type Page = Result<Response, Response>;

fn render(state: &AppState, title: &str, tab: Tab, content: &str) -> Response {
    let mut response = html::page(title, tab, !state.tokens.is_empty(), content).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

/// After an action: the page to show, and the URL the browser should show for it.
fn at(mut response: Response, location: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert("idem-location", value);
    }
    response
}

fn failed(state: &AppState, tab: Tab, e: ApiError) -> Response {
    let status = e.status_code();
    let content = format!("<h1>{}</h1>{}", esc(e.problem().title), notice("error", &e.to_string()));
    let mut response = render(state, "Problem", tab, &content);
    *response.status_mut() = status;
    response
}

fn now(state: &AppState) -> Timestamp {
    state.clock.now()
}

fn source_names(state: &AppState) -> Vec<String> {
    state.config.sources.iter().map(|s| s.name.as_str().to_owned()).collect()
}

fn live(seconds: u32, inner: &str) -> String {
    format!(
        r#"<div class="live-bar"><button type="button" class="link" data-pause>Pause live refresh</button>
<span class="muted" data-updated>updated every {seconds} s</span></div>
<section id="live" data-refresh="{seconds}">{inner}</section>"#
    )
}

// ---- Overview ---------------------------------------------------------------------------------

/// Requests and errors per second, from the server's own counters, over the time since the last
/// look (at least a second; the live refresh makes that five).
struct Traffic {
    per_second: f64,
    errors_per_second: f64,
    client_errors_per_second: f64,
    total: f64,
}

/// When the counters were last read, their values then (requests, 5xx, 4xx), and the rates
/// worked out at that moment.
type Sample = (Instant, [f64; 3], [f64; 3]);

fn traffic() -> Traffic {
    static LAST: OnceLock<Mutex<Sample>> = OnceLock::new();
    let text = crate::telemetry::metrics_handle().render();
    let mut counts = [0.0; 3];
    for (labels, value) in series(&text, "idem_http_requests_total") {
        let status = labels.get("status").map_or("", String::as_str);
        counts[0] += value;
        if status.starts_with('5') {
            counts[1] += value;
        } else if status.starts_with('4') {
            counts[2] += value;
        }
    }
    let last = LAST.get_or_init(|| Mutex::new((Instant::now(), counts, [0.0; 3])));
    let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
    let elapsed = last.0.elapsed().as_secs_f64();
    if elapsed >= 1.0 {
        let rates = [0, 1, 2].map(|i| (counts[i] - last.1[i]).max(0.0) / elapsed);
        *last = (Instant::now(), counts, rates);
    }
    Traffic {
        per_second: last.2[0],
        errors_per_second: last.2[1],
        client_errors_per_second: last.2[2],
        total: counts[0],
    }
}

/// The samples of one metric in Prometheus text: (labels, value).
fn series(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(rest) => match rest.rsplit_once("} ") {
                Some((labels, value)) => (labels, value),
                None => continue,
            },
            None => match rest.strip_prefix(' ') {
                Some(value) => ("", value),
                None => continue,
            },
        };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let mut map = BTreeMap::new();
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            if let Some((k, v)) = pair.split_once("=\"") {
                map.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
            }
        }
        out.push((map, value));
    }
    out
}

pub async fn overview(State(state): State<AppState>) -> Response {
    let store = state.store.as_ref();
    let (ready, counts, queue, claims) =
        tokio::join!(store.check_ready(), store.count_receipts(), store.queue_stats(), store.count_claims());
    let now = now(&state);
    let t = traffic();
    let kind = match state.config.store {
        StoreConfig::Sqlite {} => "embedded (log + SQLite)",
        StoreConfig::Postgres { .. } => "PostgreSQL",
    };
    let health = match &ready {
        Ok(()) => r#"<span class="badge s-completed"><span aria-hidden="true">✔</span> ready</span>"#.to_owned(),
        Err(e) => format!(
            r#"<span class="badge s-dead"><span aria-hidden="true">✖</span> not ready</span><p class="muted">{}</p>"#,
            esc(&e.to_string())
        ),
    };
    let counts = counts.unwrap_or_default();
    let dead: u64 = counts.iter().filter(|c| c.1 == ReceiptStatus::Dead).map(|c| c.2).sum();
    let (due, oldest) = match queue {
        Ok(q) => (
            q.due.to_string(),
            q.oldest_due_at.map_or("nothing waiting".to_owned(), |at| {
                format!("oldest waiting {}", age(((now.millis() - at.millis()).max(0) / 1000) as u64))
            }),
        ),
        Err(_) => ("?".into(), "could not read the queue".into()),
    };
    let dead_card = if dead > 0 {
        format!(
            r#"<a class="card stat alert" href="/ui/receipts?status=dead" data-testid="dead-letters"><span class="label">Dead letters</span><span class="value">{dead}</span><span class="muted">✖ need a replay or a discard</span></a>"#
        )
    } else {
        r#"<div class="card stat" data-testid="dead-letters"><span class="label">Dead letters</span><span class="value">0</span><span class="muted">✔ none</span></div>"#.to_owned()
    };
    let mut inner = format!(
        r#"<div class="grid">
<div class="card stat"><span class="label">Store</span><span class="value small">{kind}</span>{health}</div>
<div class="card stat"><span class="label">Requests per second</span><span class="value">{:.1}</span><span class="muted">{:.0} since start</span></div>
<div class="card stat"><span class="label">Errors per second</span><span class="value">{:.1}</span><span class="muted">5xx; 4xx (refused input): {:.1}/s</span></div>
{dead_card}
<div class="card stat"><span class="label">Jobs due</span><span class="value">{due}</span><span class="muted">{oldest}</span></div>
</div>"#,
        t.per_second, t.total, t.errors_per_second, t.client_errors_per_second
    );
    inner.push_str(&events_table(&state, &counts));
    inner.push_str(&namespaces_table(&claims.unwrap_or_default()));
    render(&state, "Overview", Tab::Overview, &format!("<h1>Overview</h1>{}", live(5, &inner)))
}

fn events_table(state: &AppState, counts: &[(String, ReceiptStatus, u64)]) -> String {
    let mut by_source: BTreeMap<String, BTreeMap<&str, u64>> =
        source_names(state).into_iter().map(|s| (s, BTreeMap::new())).collect();
    for (source, status, n) in counts {
        by_source.entry(source.clone()).or_default().insert(status.as_str(), *n);
    }
    if by_source.is_empty() {
        return r#"<h2>Events</h2><p class="empty">No event sources yet. Add a <code>[[sources]]</code> table to the
config (name, handler_url, event_id, signing_secret) and send events to
<code>POST /v1/sources/{name}/events</code>.</p>"#
            .to_owned();
    }
    let mut out = String::from(r#"<h2>Events by source</h2><div class="scroll"><table><thead><tr><th>Source</th>"#);
    for s in STATUSES {
        let _ = write!(out, "<th>{s}</th>");
    }
    out.push_str("</tr></thead><tbody>");
    for (source, row) in &by_source {
        let _ = write!(
            out,
            r#"<tr><th scope="row"><a href="/ui/receipts{}">{}</a></th>"#,
            query(&[("source", Some(source))]),
            esc(source)
        );
        for s in STATUSES {
            let n = row.get(s).copied().unwrap_or(0);
            let href = format!("/ui/receipts{}", query(&[("source", Some(source)), ("status", Some(s))]));
            let class = if s == "dead" && n > 0 { r#" class="hot""# } else { "" };
            let _ = write!(out, r#"<td{class}><a href="{href}">{n}</a></td>"#);
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

fn namespaces_table(stored: &[(String, u64)]) -> String {
    let text = crate::telemetry::metrics_handle().render();
    let mut rows: BTreeMap<String, [f64; 3]> =
        stored.iter().map(|(ns, n)| (ns.clone(), [*n as f64, 0.0, 0.0])).collect();
    for (labels, value) in series(&text, "idem_claims_total") {
        if let (Some(ns), Some("claimed")) = (labels.get("namespace"), labels.get("outcome").map(String::as_str)) {
            rows.entry(ns.clone()).or_default()[1] += value;
        }
    }
    for (labels, value) in series(&text, "idem_operations_total") {
        if let (Some(ns), Some("started")) = (labels.get("namespace"), labels.get("outcome").map(String::as_str)) {
            rows.entry(ns.clone()).or_default()[2] += value;
        }
    }
    if rows.is_empty() {
        return r#"<h2>Claims and operations</h2><p class="empty">No claims yet. Make one with
<code>POST /v1/claims/{namespace}</code> <code>{"key": "…"}</code>, or begin an operation with
<code>POST /v1/operations/{namespace}/begin</code>.</p>"#
            .to_owned();
    }
    let mut out = String::from(
        r#"<h2>Claims and operations by namespace</h2><div class="scroll"><table><thead><tr><th>Namespace</th>
<th>claims stored</th><th>claims made since start</th><th>operations started since start</th><th></th></tr></thead><tbody>"#,
    );
    for (ns, [stored, claimed, started]) in &rows {
        let _ = write!(
            out,
            r#"<tr><th scope="row">{}</th><td>{stored}</td><td>{claimed}</td><td>{started}</td><td><a href="/ui/lookup{}">look up</a></td></tr>"#,
            esc(ns),
            query(&[("ns", Some(ns))])
        );
    }
    out.push_str("</tbody></table></div>");
    out
}

// ---- Receipts ---------------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
pub struct ReceiptQuery {
    source: Option<String>,
    status: Option<String>,
    /// An event id, or a receipt id (rcpt_…) to open that receipt.
    q: Option<String>,
    cursor: Option<String>,
}

fn filled(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

pub async fn receipts(State(state): State<AppState>, query_: Result<Query<ReceiptQuery>, QueryRejection>) -> Response {
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
    let filter = ReceiptFilter {
        source: filled(&q.source).map(str::to_owned),
        status,
        event_id: filled(&q.q).map(str::to_owned),
        limit: PAGE,
        before,
        from: None,
    };
    let list = match state.store.list_receipts(&filter).await {
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
        options("any source", &source_refs, filled(&q.source)),
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
            let _ = write!(
                table,
                r#"<tr data-testid="receipt-row" data-receipt-id="{id}"><td>{}</td><td><a href="/ui/receipts/{id}">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td class="mono"><a href="/ui/receipts/{id}">{id}</a></td></tr>"#,
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

pub async fn receipt(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    match ReceiptId::parse(&id) {
        Ok(id) => receipt_page(&state, &id, None).await.unwrap_or_else(|e| e),
        Err(e) => failed(&state, Tab::Receipts, e.into()),
    }
}

async fn receipt_page(state: &AppState, id: &ReceiptId, flash: Option<String>) -> Page {
    let receipt = state
        .store
        .get_receipt(id)
        .await
        .map_err(|e| failed(state, Tab::Receipts, e.into()))?
        .ok_or_else(|| failed(state, Tab::Receipts, ApiError::NotFound(format!("no receipt {id}"))))?;
    let content = format!("{}{}", flash.unwrap_or_default(), receipt_view(state, &receipt));
    Ok(render(state, &format!("Receipt {}", receipt.event_id), Tab::Receipts, &content))
}

fn receipt_view(state: &AppState, r: &Receipt) -> String {
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
    let actions = format!(
        r#"<div class="actions">{}{}</div>"#,
        action(
            "replay",
            "Replay from attempt 1",
            replayable,
            "Still being delivered: it can be replayed once it ends."
        ),
        action("discard", "Discard (handled by hand)", discardable, "Only dead receipts can be discarded.")
    );
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

pub async fn replay_one(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    act(&state, &id, "replay").await
}

pub async fn discard_one(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    act(&state, &id, "discard").await
}

async fn act(state: &AppState, id: &str, what: &str) -> Response {
    let id = match ReceiptId::parse(id) {
        Ok(id) => id,
        Err(e) => return failed(state, Tab::Receipts, e.into()),
    };
    let done = if what == "replay" { api::replay_one(state, &id).await } else { api::discard_one(state, &id).await };
    let flash = match done {
        Ok(()) if what == "replay" => notice("ok", "Replayed: delivery starts again from attempt 1."),
        Ok(()) => notice("ok", "Discarded: it no longer counts as a dead letter, and can still be replayed."),
        Err(e @ ApiError::Conflict(_)) => notice("error", &e.to_string()),
        Err(e) => return failed(state, Tab::Receipts, e),
    };
    let page = receipt_page(state, &id, Some(flash)).await.unwrap_or_else(|e| e);
    at(page, &format!("/ui/receipts/{id}"))
}

// ---- Bulk replay ------------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
pub struct BulkForm {
    source: Option<String>,
    status: Option<String>,
    event_id: Option<String>,
    created_after: Option<String>,
    created_before: Option<String>,
    /// Set by the "Count" button: show how many match.
    count: Option<String>,
}

impl BulkForm {
    fn request(&self) -> BulkReplayRequest {
        BulkReplayRequest {
            source: filled(&self.source).map(str::to_owned),
            status: filled(&self.status).map(str::to_owned),
            event_id: filled(&self.event_id).map(str::to_owned),
            created_before: filled(&self.created_before).map(moment),
            created_after: filled(&self.created_after).map(moment),
            dry_run: false,
        }
    }

    fn fields(&self) -> [(&'static str, Option<&str>); 5] {
        [
            ("source", filled(&self.source)),
            ("status", filled(&self.status)),
            ("event_id", filled(&self.event_id)),
            ("created_after", filled(&self.created_after)),
            ("created_before", filled(&self.created_before)),
        ]
    }
}

/// A browser's `datetime-local` value (`2026-11-23T02:10`) read as UTC; RFC 3339 as it is.
fn moment(text: &str) -> String {
    match text.len() {
        16 => format!("{text}:00Z"),
        19 => format!("{text}Z"),
        _ => text.to_owned(),
    }
}

fn bulk_form(state: &AppState, form: &BulkForm) -> String {
    let sources = source_names(state);
    let source_refs: Vec<&str> = sources.iter().map(String::as_str).collect();
    let status = filled(&form.status).unwrap_or("dead");
    let status_options: String = ["dead", "completed", "discarded"]
        .iter()
        .map(|s| format!(r#"<option value="{s}"{}>{s}</option>"#, if *s == status { " selected" } else { "" }))
        .collect();
    format!(
        r#"<form class="filters" method="get" action="/ui/replay" data-ui>
<input type="hidden" name="count" value="1">
<label>Source <select name="source" data-testid="bulk-source">{}</select></label>
<label>Status <select name="status" data-testid="bulk-status">{status_options}</select></label>
<label>Event id <input name="event_id" value="{}" placeholder="any"></label>
<label>Created after (UTC) <input name="created_after" type="datetime-local" step="1" value="{}"></label>
<label>Created before (UTC) <input name="created_before" type="datetime-local" step="1" value="{}"></label>
<button type="submit" data-testid="bulk-count">Count matching receipts</button>
</form>"#,
        options("any source", &source_refs, filled(&form.source)),
        esc(filled(&form.event_id).unwrap_or("")),
        esc(filled(&form.created_after).unwrap_or("")),
        esc(filled(&form.created_before).unwrap_or("")),
    )
}

const BULK_INTRO: &str = r#"<h1>Bulk replay</h1><p>Deliver every receipt that matches a filter again, from attempt 1.
Count them first; the replay then runs in steps of 500 receipts, one transaction each, while
intake goes on. Repeating it is safe: it finds only what still matches.</p>"#;

pub async fn bulk(State(state): State<AppState>, query_: Result<Query<BulkForm>, QueryRejection>) -> Response {
    let Query(form) = query_.unwrap_or_default();
    let mut content = format!("{BULK_INTRO}{}", bulk_form(&state, &form));
    if form.count.is_some() {
        let request = BulkReplayRequest { dry_run: true, ..form.request() };
        let filter = match request.filter() {
            Ok(f) => f,
            Err(e) => return failed(&state, Tab::Replay, e.into()),
        };
        let n = match state.store.count_matching(&filter).await {
            Ok(n) => n,
            Err(e) => return failed(&state, Tab::Replay, e.into()),
        };
        if n == 0 {
            content.push_str(r#"<p class="empty" data-testid="bulk-matching" data-count="0">No receipts match: nothing to replay.</p>"#);
        } else {
            let mut hidden = String::new();
            for (k, v) in form.fields() {
                if let Some(v) = v {
                    let _ = write!(hidden, r#"<input type="hidden" name="{k}" value="{}">"#, esc(v));
                }
            }
            let _ = write!(
                content,
                r#"<div class="card confirm"><p data-testid="bulk-matching" data-count="{n}"><strong>{n}</strong> receipt(s) match this filter.</p>
<form method="post" action="/ui/replay" data-ui>{hidden}<button type="submit" data-testid="bulk-confirm">Replay {n} receipt(s)</button></form></div>"#
            );
        }
    }
    render(&state, "Bulk replay", Tab::Replay, &content)
}

pub async fn bulk_run(State(state): State<AppState>, Form(form): Form<BulkForm>) -> Response {
    let filter = match form.request().filter() {
        Ok(f) => f,
        Err(e) => return failed(&state, Tab::Replay, e.into()),
    };
    let queued = match api::replay_all(&state, filter).await {
        Ok(n) => n,
        Err(e) => return failed(&state, Tab::Replay, e),
    };
    let list = format!("/ui/receipts{}", query(&[("source", filled(&form.source)), ("q", filled(&form.event_id))]));
    let content = format!(
        r#"{BULK_INTRO}<p class="notice ok" role="status" data-testid="bulk-result" data-count="{queued}">Queued {queued} receipt(s) for delivery again. <a href="{list}">Follow them</a>.</p>{}"#,
        bulk_form(&state, &BulkForm { count: None, ..form })
    );
    at(render(&state, "Bulk replay", Tab::Replay, &content), "/ui/replay")
}

// ---- Claims and operations ---------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
pub struct LookupForm {
    /// `claim` (default) or `operation`.
    kind: Option<String>,
    ns: Option<String>,
    /// One key, or several parts one per line.
    key: Option<String>,
    /// 64 hex digits, instead of a key.
    id: Option<String>,
    /// Set: ask whether any live claim's parts begin with the key's parts.
    prefix: Option<String>,
}

fn lookup_form(form: &LookupForm) -> String {
    let kind = filled(&form.kind).unwrap_or("claim");
    let checked = |k: &str| if k == kind { " checked" } else { "" };
    format!(
        r#"<form class="filters" method="get" action="/ui/lookup" data-ui>
<fieldset class="inline"><legend>Look up</legend>
<label><input type="radio" name="kind" value="claim"{}> a claim</label>
<label><input type="radio" name="kind" value="operation"{}> an operation</label></fieldset>
<label>Namespace <input name="ns" value="{}" required data-testid="lookup-ns"></label>
<label class="grow">Key, or parts one per line <textarea name="key" rows="2" data-testid="lookup-key">{}</textarea></label>
<label>or id <input name="id" value="{}" placeholder="64 hex digits" class="mono"></label>
<label><input type="checkbox" name="prefix" value="1"{}> parts are a prefix (claims)</label>
<button type="submit" data-testid="lookup-submit">Look up</button>
</form>"#,
        checked("claim"),
        checked("operation"),
        esc(filled(&form.ns).unwrap_or("")),
        esc(form.key.as_deref().unwrap_or("")),
        esc(filled(&form.id).unwrap_or("")),
        if form.prefix.is_some() { " checked" } else { "" },
    )
}

/// The namespace and id a lookup names, or what is wrong with it.
fn lookup_target(form: &LookupForm) -> Result<(Namespace, Option<Parts>, ClaimId), ApiError> {
    let ns = Namespace::new(filled(&form.ns).unwrap_or(""))?;
    if let Some(id) = filled(&form.id) {
        return Ok((ns, None, ClaimId::parse(id)?));
    }
    let lines: Vec<String> =
        form.key.as_deref().unwrap_or("").lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect();
    let parts = Parts::new(lines).map_err(|e| e.within("key"))?;
    let id = parts.id();
    Ok((ns, Some(parts), id))
}

pub async fn lookup(State(state): State<AppState>, query_: Result<Query<LookupForm>, QueryRejection>) -> Response {
    let Query(form) = query_.unwrap_or_default();
    let mut content = format!(
        r#"<h1>Claims and operations</h1><p>Find one record by its namespace and key (or parts, or id), see it, and delete it.</p>{}"#,
        lookup_form(&form)
    );
    if filled(&form.key).is_some() || filled(&form.id).is_some() {
        match lookup_result(&state, &form).await {
            Ok(found) => content.push_str(&found),
            Err(e) => content.push_str(&notice("error", &e.to_string())),
        }
    }
    render(&state, "Claims and operations", Tab::Lookup, &content)
}

async fn lookup_result(state: &AppState, form: &LookupForm) -> Result<String, ApiError> {
    let (ns, parts, id) = lookup_target(form)?;
    let now = now(state);
    let delete = |what: &str| {
        format!(
            r#"<form method="post" action="/ui/lookup/delete" data-ui><input type="hidden" name="kind" value="{what}">
<input type="hidden" name="ns" value="{}"><input type="hidden" name="id" value="{id}">
<button type="submit" class="danger" data-testid="lookup-delete">Delete this {what}</button></form>"#,
            esc(ns.as_str())
        )
    };
    if filled(&form.kind) == Some("operation") {
        let key = idem_core::operation::store_id(&ns, &id);
        return Ok(match state.store.peek_request(&key).await? {
            None => format!(
                r#"<p class="empty" data-testid="lookup-result">No operation <code>{id}</code> in {}: it was never begun, was released, or expired.</p>"#,
                esc(ns.as_str())
            ),
            Some(RequestState::InFlight { lease_until, .. }) => format!(
                r#"<div class="card" data-testid="lookup-result"><p>{} — <strong>in progress</strong>: someone holds it; the lease ends {}.</p><p class="mono">{id}</p></div>"#,
                esc(ns.as_str()),
                time(lease_until, now)
            ),
            Some(RequestState::Completed { result, expires_at, .. }) => {
                let outcome = idem_core::operation::Outcome::decode(&result).map_err(|_| ApiError::Internal)?;
                let shown = outcome
                    .result
                    .as_deref()
                    .map(|r| {
                        serde_json::from_str::<serde_json::Value>(r)
                            .map_or(r.to_owned(), |v| serde_json::to_string_pretty(&v).unwrap_or_default())
                    })
                    .unwrap_or_else(|| "(no result)".to_owned());
                format!(
                    r#"<div class="card" data-testid="lookup-result"><p><span class="badge s-completed"><span aria-hidden="true">✔</span> completed</span> {}, kept until {}</p>
<p class="mono">{id}</p><pre class="code">{}</pre>{}</div>"#,
                    time(outcome.completed_at, now),
                    time(expires_at, now),
                    esc(&shown),
                    delete("operation")
                )
            }
        });
    }
    if form.prefix.is_some() {
        let Some(parts) = parts else {
            return Err(idem_core::Invalid::new("key", "a prefix lookup needs parts, not an id").into());
        };
        let any = state.store.prefix_exists(&ns, &parts).await?;
        return Ok(format!(
            r#"<p class="card" data-testid="lookup-result">{} live claim in {} has parts beginning with {}.</p>"#,
            if any { "✔ At least one" } else { "✖ No" },
            esc(ns.as_str()),
            esc(&parts.as_slice().join(" / "))
        ));
    }
    Ok(match state.store.get(&ns, &id).await? {
        None => format!(
            r#"<p class="empty" data-testid="lookup-result">No live claim <code>{id}</code> in {}.</p>"#,
            esc(ns.as_str())
        ),
        Some(record) => {
            let data = record.data.as_ref().map(|d| {
                serde_json::from_str::<serde_json::Value>(d.get())
                    .map_or(d.get().to_owned(), |v| serde_json::to_string_pretty(&v).unwrap_or_default())
            });
            format!(
                r#"<div class="card" data-testid="lookup-result"><p><strong>{}</strong> in {}</p>
<dl class="facts"><dt>Id</dt><dd class="mono">{id}</dd><dt>Claimed</dt><dd>{}</dd><dt>Expires</dt><dd>{}</dd></dl>
{}{}</div>"#,
                esc(&record.parts.as_slice().join(" / ")),
                esc(ns.as_str()),
                time(record.created_at, now),
                record.expires_at.map_or("never".to_owned(), |at| time(at, now)),
                data.map(|d| format!(r#"<pre class="code">{}</pre>"#, esc(&d))).unwrap_or_default(),
                delete("claim")
            )
        }
    })
}

pub async fn lookup_delete(State(state): State<AppState>, Form(form): Form<LookupForm>) -> Response {
    let outcome = async {
        let (ns, _, id) = lookup_target(&form)?;
        if filled(&form.kind) == Some("operation") {
            let key = idem_core::operation::store_id(&ns, &id);
            Ok::<_, ApiError>(match state.store.forget_request(&key).await? {
                Forget::Forgotten => notice("ok", &format!("Deleted operation {id}: the key is free again.")),
                Forget::InFlight => {
                    notice("error", "Someone holds this operation now; it cannot be deleted while in progress.")
                }
                Forget::Absent => notice("error", "That operation was already gone."),
            })
        } else if state.store.delete(&ns, &id).await? {
            metrics::counter!("idem_claims_deleted_total", "namespace" => ns.as_str().to_owned()).increment(1);
            Ok(notice("ok", &format!("Deleted claim {id}: the key can be claimed again.")))
        } else {
            Ok(notice("error", "That claim was already gone."))
        }
    }
    .await;
    let flash = outcome.unwrap_or_else(|e| notice("error", &e.to_string()));
    let content =
        format!("<h1>Claims and operations</h1>{flash}{}", lookup_form(&LookupForm { id: None, key: None, ..form }));
    let mut response = render(&state, "Claims and operations", Tab::Lookup, &content);
    *response.status_mut() = StatusCode::OK;
    at(response, "/ui/lookup")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_prometheus_series() {
        let text = "# HELP x\nidem_http_requests_total{method=\"GET\",route=\"/v1\",status=\"200\"} 5\n\
                    idem_http_requests_total{method=\"GET\",route=\"/v1\",status=\"503\"} 2\nidem_http_requests_total_other 9\n";
        let found = series(text, "idem_http_requests_total");
        assert_eq!(found.len(), 2);
        assert_eq!(found[1].0.get("status").map(String::as_str), Some("503"));
        assert!((found[0].1 - 5.0).abs() < f64::EPSILON);
    }

    #[test]
    fn browser_times_are_read_as_utc() {
        assert_eq!(moment("2026-11-23T02:10"), "2026-11-23T02:10:00Z");
        assert_eq!(moment("2026-11-23T02:10:05"), "2026-11-23T02:10:05Z");
        assert_eq!(moment("2026-11-23T02:10:05+01:00"), "2026-11-23T02:10:05+01:00");
    }
}
