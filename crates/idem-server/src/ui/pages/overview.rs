//! The overview: the store, traffic, dead letters, jobs due, and what each namespace and source holds.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use axum::response::Response;
use idem_core::event::{QueueStats, ReceiptStatus};
use idem_core::{StoreError, Timestamp};
use maud::{Markup, html};

use super::html::{Tab, age, pill, query};
use super::{STATUSES, live, now, render, source_names};
use crate::config::StoreConfig;
use crate::ui::Ui;
use crate::web::tally::{OverviewCounts, StoreCounts};

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
    let now = idem_metrics::http::traffic();
    let counts = [now.requests, now.server_errors, now.client_errors].map(|n| n as f64);
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

pub async fn overview(state: Ui) -> Response {
    let (ready, counted) = tokio::join!(
        state.stores.lifecycle.check_ready(),
        state.overview_counts.get(|| StoreCounts::of(&state.stores))
    );
    let (mut counts, queue, mut claims, counted_ago) = match counted {
        Ok((c, ago)) => (c.receipts, Ok(c.queue), c.claims, ago),
        Err(e) => (Vec::new(), Err(e), Vec::new(), std::time::Duration::ZERO),
    };
    // A token limited to some namespaces or sources is shown theirs only.
    counts.retain(|(source, _, _)| state.caller.sees_source(source));
    claims.retain(|(ns, _)| state.caller.sees_namespace(ns));
    let dead: u64 = counts.iter().filter(|c| c.1 == ReceiptStatus::Dead).map(|c| c.2).sum();
    let inner = html! {
        div.grid {
            (store_card(&state, &ready))
            (traffic_cards(&traffic()))
            (dead_card(dead))
            (jobs_card(&queue, now(&state)))
        }
        @if counted_ago.as_secs() > 0 {
            p.muted data-testid="counted-ago" {
                "Counts as of " (age(counted_ago.as_secs())) " ago: counting this store takes a while, so a count \
                 is reused for " (OverviewCounts::REUSE) "× what it took."
            }
        }
        (events_table(&state, &counts))
        (namespaces_table(&state, &claims))
    };
    render(&state, "Overview", Tab::Overview, html! { h1 { "Overview" } (live(5, inner)) })
}

fn store_card(state: &Ui, ready: &Result<(), StoreError>) -> Markup {
    let kind = match state.config.store {
        StoreConfig::Embedded {} => "embedded (log + SQLite)",
        StoreConfig::Postgres { .. } => "PostgreSQL",
    };
    html! {
        div.card.stat {
            span.label { "Store" }
            span.value.small { (kind) }
            @match ready {
                Ok(()) => (pill("s-completed", "✔", "ready")),
                Err(e) => { (pill("s-dead", "✖", "not ready")) p.muted { (e) } }
            }
        }
    }
}

fn traffic_cards(t: &Traffic) -> Markup {
    html! {
        div.card.stat {
            span.label { "Requests per second" }
            span.value { (format!("{:.1}", t.per_second)) }
            span.muted { (format!("{:.0}", t.total)) " since start" }
        }
        div.card.stat {
            span.label { "Errors per second" }
            span.value { (format!("{:.1}", t.errors_per_second)) }
            span.muted { "5xx; 4xx (refused input): " (format!("{:.1}", t.client_errors_per_second)) "/s" }
        }
    }
}

fn dead_card(dead: u64) -> Markup {
    html! {
        @if dead > 0 {
            a.card.stat.alert href="/ui/receipts?status=dead" data-testid="dead-letters" {
                span.label { "Dead letters" }
                span.value { (dead) }
                span.muted { "✖ need a replay or a discard" }
            }
        } @else {
            div.card.stat data-testid="dead-letters" {
                span.label { "Dead letters" }
                span.value { "0" }
                span.muted { "✔ none" }
            }
        }
    }
}

fn jobs_card(queue: &Result<QueueStats, StoreError>, now: Timestamp) -> Markup {
    let (due, oldest) = match queue {
        Ok(q) => (
            q.due.to_string(),
            q.oldest_due_at.map_or("nothing waiting".to_owned(), |at| {
                format!("oldest waiting {}", age(((now.millis() - at.millis()).max(0) / 1000) as u64))
            }),
        ),
        Err(_) => ("?".into(), "could not read the queue".into()),
    };
    html! { div.card.stat { span.label { "Jobs due" } span.value { (due) } span.muted { (oldest) } } }
}

fn events_table(state: &Ui, counts: &[(String, ReceiptStatus, u64)]) -> Markup {
    let mut by_source: BTreeMap<String, BTreeMap<&str, u64>> =
        source_names(state).into_iter().map(|s| (s, BTreeMap::new())).collect();
    for (source, status, n) in counts {
        by_source.entry(source.clone()).or_default().insert(status.as_str(), *n);
    }
    if by_source.is_empty() {
        return html! {
            h2 { "Events" }
            p.empty {
                "No event sources yet. Add a " code { "[[sources]]" } " table to the config (name, handler_url, \
                 event_id, signing_secret) and send events to " code { "POST /v1/sources/{name}/events" } "."
            }
        };
    }
    html! {
        h2 { "Events by source" }
        div.scroll { table {
            thead { tr { th { "Source" } @for s in STATUSES { th { (s) } } } }
            tbody { @for (source, row) in &by_source { (source_row(source, row)) } }
        } }
    }
}

fn source_row(source: &str, row: &BTreeMap<&str, u64>) -> Markup {
    html! {
        tr {
            th scope="row" { a href={ "/ui/receipts" (query(&[("source", Some(source))])) } { (source) } }
            @for s in STATUSES {
                @let n = row.get(s).copied().unwrap_or(0);
                td class=[(s == "dead" && n > 0).then_some("hot")] {
                    a href={ "/ui/receipts" (query(&[("source", Some(source)), ("status", Some(s))])) } { (n) }
                }
            }
        }
    }
}

/// One row per namespace idem knows without traffic — each with live claims in the store, each
/// configured with a `[namespaces.NAME]` table — and per namespace used since start-up. The store
/// keeps an operation under a hash of its namespace and key, so it cannot say which namespaces hold
/// operations: an operations-only namespace is listed after a restart when it is configured.
fn namespaces_table(state: &Ui, stored: &[(String, u64)]) -> Markup {
    let rows = namespace_counts(state, stored);
    if rows.is_empty() {
        return html! {
            h2 { "Claims and operations" }
            p.empty {
                "No claims yet. Make one with " code { "POST /v1/claims/{namespace}" } " " code { r#"{"key": "…"}"# }
                ", or begin an operation with " code { "POST /v1/operations/{namespace}/begin" } "."
            }
        };
    }
    html! {
        h2 { "Claims and operations by namespace" }
        div.scroll { table {
            thead { tr {
                th { "Namespace" } th { "claims stored" } th { "claims made since start" }
                th { "operations begun since start" } th {}
            } }
            tbody { @for (ns, [stored, claimed, started]) in &rows {
                tr {
                    th scope="row" { (ns) } td { (stored) } td { (claimed) } td { (started) }
                    td { a href={ "/ui/lookup" (query(&[("ns", Some(ns))])) } { "look up" } }
                }
            } }
        } }
        p.muted {
            "Listed: namespaces with live claims, namespaces configured in " code { "[namespaces]" } ", and those \
             used since idem started. Operations are stored under a hash of namespace and key, so a namespace that \
             holds only operations is listed after a restart when it has a " code { "[namespaces.NAME]" } " table."
        }
    }
}

/// Per namespace this caller sees: claims stored, claims made and operations begun since start.
fn namespace_counts(state: &Ui, stored: &[(String, u64)]) -> BTreeMap<String, [u64; 3]> {
    let mut rows: BTreeMap<String, [u64; 3]> = state.config.namespaces.keys().map(|ns| (ns.clone(), [0; 3])).collect();
    for (ns, n) in stored {
        rows.entry(ns.clone()).or_default()[0] = *n;
    }
    for (ns, seen) in idem_metrics::claims::activity() {
        let row = rows.entry(ns).or_default();
        (row[1], row[2]) = (seen.claimed, seen.started);
    }
    rows.retain(|ns, _| state.caller.sees_namespace(ns));
    rows
}
