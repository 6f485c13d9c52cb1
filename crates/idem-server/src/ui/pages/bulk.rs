//! Bulk replay: the filter, the count of what matches, then the replay once confirmed.

use axum::extract::Query;
use axum::response::Response;
use axum::{Form, extract::rejection::QueryRejection};
use maud::{Markup, html};
use serde::Deserialize;

use super::html::{Tab, options, query};
use super::{at, failed, filled, render, source_names};
use crate::actions::{self as api, BulkReplayRequest};
use crate::ui::Ui;
use crate::web::ApiError;

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

fn bulk_form(state: &Ui, form: &BulkForm) -> Markup {
    let sources = source_names(state);
    let source_refs: Vec<&str> = sources.iter().map(String::as_str).collect();
    let status = filled(&form.status).unwrap_or("dead");
    let value = |v: &Option<String>| filled(v).unwrap_or("").to_owned();
    html! {
        form.filters method="get" action="/ui/replay" data-ui {
            input type="hidden" name="count" value="1";
            label { "Source " select name="source" data-testid="bulk-source" {
                (options("any source", &source_refs, filled(&form.source)))
            } }
            label { "Status " select name="status" data-testid="bulk-status" {
                @for s in ["dead", "completed", "discarded"] { option value=(s) selected[s == status] { (s) } }
            } }
            label { "Event id " input name="event_id" value=(value(&form.event_id)) placeholder="any"; }
            label {
                "Created after (UTC) "
                input name="created_after" type="datetime-local" step="1" value=(value(&form.created_after));
            }
            label {
                "Created before (UTC) "
                input name="created_before" type="datetime-local" step="1" value=(value(&form.created_before));
            }
            button type="submit" data-testid="bulk-count" { "Count matching receipts" }
        }
    }
}

fn intro() -> Markup {
    html! {
        h1 { "Bulk replay" }
        p {
            "Deliver every receipt that matches a filter again, from attempt 1. Count them first; the replay then \
             runs in steps of 500 receipts, one transaction each, while intake goes on. Repeating it is safe: it \
             finds only what still matches."
        }
    }
}

pub async fn bulk(state: Ui, query_: Result<Query<BulkForm>, QueryRejection>) -> Response {
    let Query(form) = query_.unwrap_or_default();
    let counted = match form.count {
        Some(_) => match count(&state, &form).await {
            Ok(n) => Some(n),
            Err(e) => return failed(&state, Tab::Replay, e),
        },
        None => None,
    };
    let content = html! {
        (intro())
        (bulk_form(&state, &form))
        @if let Some(n) = counted { (confirm(&state, &form, n)) }
    };
    render(&state, "Bulk replay", Tab::Replay, content)
}

/// How many receipts the form's filter matches.
async fn count(state: &Ui, form: &BulkForm) -> Result<u64, ApiError> {
    let request = BulkReplayRequest { dry_run: true, ..form.request() };
    api::check_source_scope(&state.caller, request.source.as_deref())?;
    let filter = request.filter()?;
    Ok(state.stores.events.count_matching(&filter).await?)
}

/// The count, and the button that replays them when this caller may.
fn confirm(state: &Ui, form: &BulkForm, n: u64) -> Markup {
    if n == 0 {
        return html! {
            p.empty data-testid="bulk-matching" data-count="0" { "No receipts match: nothing to replay." }
        };
    }
    html! {
        div.card.confirm {
            p data-testid="bulk-matching" data-count=(n) { strong { (n) } " receipt(s) match this filter." }
            @if state.caller.can(crate::config::Can::Admin) {
                form method="post" action="/ui/replay" data-ui {
                    @for (k, v) in form.fields() {
                        @if let Some(v) = v { input type="hidden" name=(k) value=(v); }
                    }
                    button type="submit" data-testid="bulk-confirm" { "Replay " (n) " receipt(s)" }
                }
            } @else {
                p.muted {
                    "Token " (state.caller.name()) " may count them but not replay them: that needs a token with \
                     can = \"admin\"."
                }
            }
        }
    }
}

pub async fn bulk_run(state: Ui, Form(form): Form<BulkForm>) -> Response {
    let request = form.request();
    let filter = match request.filter() {
        Ok(f) => f,
        Err(e) => return failed(&state, Tab::Replay, e.into()),
    };
    if let Err(e) = api::check_source_scope(&state.caller, request.source.as_deref()) {
        return failed(&state, Tab::Replay, e);
    }
    let queued = match api::replay_all(&state, filter).await {
        Ok(n) => n,
        Err(e) => return failed(&state, Tab::Replay, e),
    };
    tracing::info!(token = state.caller.name(), filter = ?request, queued, "bulk replay from the dashboard");
    let list = format!("/ui/receipts{}", query(&[("source", filled(&form.source)), ("q", filled(&form.event_id))]));
    let content = html! {
        (intro())
        p.notice.ok role="status" data-testid="bulk-result" data-count=(queued) {
            "Queued " (queued) " receipt(s) for delivery again. " a href=(list) { "Follow them" } "."
        }
        (bulk_form(&state, &BulkForm { count: None, ..form }))
    };
    at(render(&state, "Bulk replay", Tab::Replay, content), "/ui/replay")
}

#[cfg(test)]
mod tests {
    #[test]
    fn browser_times_are_read_as_utc() {
        assert_eq!(super::moment("2026-11-23T02:10"), "2026-11-23T02:10:00Z");
        assert_eq!(super::moment("2026-11-23T02:10:05"), "2026-11-23T02:10:05Z");
        assert_eq!(super::moment("2026-11-23T02:10:05+01:00"), "2026-11-23T02:10:05+01:00");
    }
}
