//! Claims and operations: looked up by key or id, and deleted; a prefix's claims listed a page at
//! a time, and deleted together once counted and confirmed (as bulk replay counts first): the
//! button under a listing only counts, and only the confirmation that shows the count deletes.

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Form, extract::rejection::QueryRejection};
use idem_core::request::{Forget, RequestState};
use idem_core::{ClaimId, Namespace, Parts};
use maud::{Markup, html};
use serde::Deserialize;

use super::html::{Tab, notice, pill, time};
use super::{at, filled, now, render};
use crate::ui::Ui;
use crate::web::ApiError;

#[derive(Debug, Default, Deserialize)]
pub struct LookupForm {
    /// `claim` (default) or `operation`.
    kind: Option<String>,
    ns: Option<String>,
    /// One key, or several parts one per line.
    key: Option<String>,
    /// 64 hex digits, instead of a key.
    id: Option<String>,
    /// Set: list the live claims whose parts begin with the key's parts.
    prefix: Option<String>,
    /// A listing's cursor: the encoded parts of the last claim of the previous page (base64url).
    after: Option<String>,
    /// Set (with `prefix`) by the delete button under a listing: count the prefix's claims and
    /// ask before deleting them.
    count: Option<String>,
}

/// Claims listed per page.
const PAGE: usize = 50;
/// Claims counted before a prefix delete; past this many the confirmation says "at least".
const COUNT_CAP: usize = 10_000;
/// Claims read per step while counting: the API's largest listing page.
const COUNT_STEP: usize = 1_000;

fn lookup_form(form: &LookupForm) -> Markup {
    let kind = filled(&form.kind).unwrap_or("claim");
    html! {
        form.filters method="get" action="/ui/lookup" data-ui {
            fieldset.inline {
                legend { "Look up" }
                label { input type="radio" name="kind" value="claim" checked[kind == "claim"]; " a claim" }
                label { input type="radio" name="kind" value="operation" checked[kind == "operation"]; " an operation" }
            }
            label {
                "Namespace "
                input name="ns" value=(filled(&form.ns).unwrap_or("")) required data-testid="lookup-ns";
            }
            label.grow {
                "Key, or parts one per line "
                textarea name="key" rows="2" data-testid="lookup-key" { (form.key.as_deref().unwrap_or("")) }
            }
            label {
                "or id "
                input name="id" value=(filled(&form.id).unwrap_or("")) placeholder="64 hex digits" class="mono";
            }
            label {
                input type="checkbox" name="prefix" value="1" checked[form.prefix.is_some()];
                " list every claim under these parts (a prefix)"
            }
            button type="submit" data-testid="lookup-submit" { "Look up" }
        }
    }
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

pub async fn lookup(state: Ui, query_: Result<Query<LookupForm>, QueryRejection>) -> Response {
    let Query(form) = query_.unwrap_or_default();
    let asked = filled(&form.key).is_some() || filled(&form.id).is_some();
    let found = if asked {
        Some(lookup_result(&state, &form).await.unwrap_or_else(|e| notice("error", &e.to_string())))
    } else {
        None
    };
    let content = html! {
        h1 { "Claims and operations" }
        p {
            "Find one record by its namespace and key (or parts, or id), see it, and delete it; or list every \
             claim whose parts begin with some parts (a prefix), and delete them all once counted."
        }
        (lookup_form(&form))
        @if let Some(found) = found { (found) }
    };
    render(&state, "Claims and operations", Tab::Lookup, content)
}

async fn lookup_result(state: &Ui, form: &LookupForm) -> Result<Markup, ApiError> {
    let (ns, parts, id) = lookup_target(form)?;
    state.caller.require_namespace(ns.as_str())?;
    let target = Target { ns: &ns, id: &id, may_delete: state.acts_on_namespace(ns.as_str()) };
    if filled(&form.kind) == Some("operation") {
        return operation_result(state, &target).await;
    }
    if form.prefix.is_some() {
        let Some(parts) = parts else {
            return Err(idem_core::Invalid::new("key", "a prefix listing needs parts, not an id").into());
        };
        if form.count.is_some() {
            let counted = count_prefix(state, &ns, &parts).await?;
            return Ok(prefix_confirm(state, &target, &parts, counted));
        }
        return prefix_result(state, form, &target, &parts).await;
    }
    claim_result(state, &target).await
}

/// A page of the claims under a prefix, with a link to the next, and (for who may) a button that
/// deletes them all.
async fn prefix_result(state: &Ui, form: &LookupForm, t: &Target<'_>, prefix: &Parts) -> Result<Markup, ApiError> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let after = filled(&form.after)
        .map(|a| b64.decode(a).map_err(|_| idem_core::Invalid::new("after", "is not a cursor from this page")))
        .transpose()?;
    let mut found = state.stores.claims.list(t.ns, prefix, after.as_deref(), PAGE + 1).await?;
    let more = found.len() > PAGE;
    found.truncate(PAGE);
    let now = now(state);
    let shown = prefix.as_slice().join(" / ");
    let next = more.then(|| found.last().map(|r| b64.encode(r.parts.encode()))).flatten().map(|cursor| {
        let mut query = vec![("kind", "claim"), ("ns", t.ns.as_str()), ("prefix", "1"), ("after", cursor.as_str())];
        let key = form.key.clone().unwrap_or_default();
        query.push(("key", key.as_str()));
        format!("/ui/lookup?{}", serde_urlencoded::to_string(&query).unwrap_or_default())
    });
    Ok(html! {
        div.card data-testid="lookup-result" {
            @if found.is_empty() {
                p.empty { "No live claim in " (t.ns.as_str()) " has parts beginning with " (shown) "." }
            } @else {
                p { (found.len()) @if more { "+" } " live claims in " (t.ns.as_str()) " under " strong { (shown) }
                    @if after.is_some() { " (a later page)" } ":" }
                table.list {
                    thead { tr { th { "Parts" } th { "Claimed" } th { "Expires" } th { "Data" } } }
                    tbody {
                        @for record in &found {
                            tr data-testid="claim-row" data-claim-id=(record.id) {
                                td { (record.parts.as_slice().join(" / ")) }
                                td { (time(record.created_at, now)) }
                                td { @if let Some(at) = record.expires_at { (time(at, now)) } @else { "never" } }
                                td.mono { @if let Some(data) = &record.data { (excerpt(data.get())) } }
                            }
                        }
                    }
                }
                @if let Some(next) = next { p { a href=(next) data-testid="claims-next" { "Next page →" } } }
                @if t.may_delete {
                    form method="get" action="/ui/lookup" data-ui {
                        input type="hidden" name="kind" value="claim";
                        input type="hidden" name="ns" value=(t.ns.as_str());
                        input type="hidden" name="key" value=(prefix.as_slice().join("\n"));
                        input type="hidden" name="prefix" value="1";
                        input type="hidden" name="count" value="1";
                        button.danger type="submit" data-testid="prefix-delete" {
                            "Delete every claim under " (shown) "…"
                        }
                    }
                }
            }
        }
    })
}

/// How many live claims a prefix delete would delete: exact up to [`COUNT_CAP`], else "at least".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counted {
    n: usize,
    at_least: bool,
}

impl Counted {
    /// From the claims read, at most one past the cap.
    fn of(read: usize) -> Self {
        if read > COUNT_CAP { Counted { n: COUNT_CAP, at_least: true } } else { Counted { n: read, at_least: false } }
    }

    /// "60", "1,250", "at least 10,000".
    fn words(self) -> String {
        let n = grouped(self.n);
        if self.at_least { format!("at least {n}") } else { n }
    }
}

/// The live claims under `prefix`, counted by reading the listing a step at a time (there is no
/// count in the store): bounded work however many there are, at most `COUNT_CAP + 1` read.
async fn count_prefix(state: &Ui, ns: &Namespace, prefix: &Parts) -> Result<Counted, ApiError> {
    let mut read = 0;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let want = (COUNT_CAP + 1 - read).min(COUNT_STEP);
        let page = state.stores.claims.list(ns, prefix, after.as_deref(), want).await?;
        read += page.len();
        if page.len() < want || read > COUNT_CAP {
            return Ok(Counted::of(read));
        }
        after = page.last().map(|r| r.parts.encode());
    }
}

/// The count, the prefix and the namespace, and (for who may) the button that deletes them and the
/// way back that deletes nothing.
fn prefix_confirm(state: &Ui, t: &Target<'_>, prefix: &Parts, counted: Counted) -> Markup {
    let (ns, shown, key) = (t.ns.as_str(), prefix.as_slice().join(" / "), prefix.as_slice().join("\n"));
    let back = [("kind", "claim"), ("ns", ns), ("prefix", "1"), ("key", key.as_str())];
    let back = format!("/ui/lookup?{}", serde_urlencoded::to_string(&back[..]).unwrap_or_default());
    if counted.n == 0 {
        return html! {
            p.empty data-testid="prefix-matching" data-count="0" {
                "No live claim in " (ns) " has parts beginning with " (shown) ": nothing to delete."
            }
        };
    }
    let words = counted.words();
    html! {
        div.card.confirm {
            p data-testid="prefix-matching" data-count=(counted.n) data-at-least=[counted.at_least.then_some("1")] {
                strong { (words) } " live claim(s) in " (ns) " under " strong { (shown) } " would be deleted"
                @if counted.at_least { " (counting stops at " (grouped(COUNT_CAP)) "; the delete does not)" }
                ". Their keys can then be claimed again; this cannot be undone."
            }
            @if t.may_delete {
                form method="post" action="/ui/lookup/delete" data-ui {
                    input type="hidden" name="kind" value="prefix";
                    input type="hidden" name="ns" value=(ns);
                    input type="hidden" name="key" value=(key);
                    button.danger type="submit" data-testid="prefix-confirm" {
                        @if counted.at_least { "Delete every claim under " (shown) " (" (words) ")" }
                        @else { "Delete " (words) " claim(s)" }
                    }
                    " "
                    a.button.secondary href=(back) data-testid="prefix-cancel" { "Cancel" }
                }
            } @else {
                p.muted {
                    "Token " (state.caller.name()) " may count them but not delete them: that needs a token with \
                     can = \"admin\"."
                }
            }
        }
    }
}

/// A count with thousands separated: "10,000".
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A claim's data on one line, cut at 120 characters.
fn excerpt(text: &str) -> String {
    let line: String = text.chars().filter(|c| *c != '\n').take(121).collect();
    if line.chars().count() > 120 { format!("{}…", line.chars().take(120).collect::<String>()) } else { line }
}

/// The record a lookup found, and whether this caller may delete it.
struct Target<'a> {
    ns: &'a Namespace,
    id: &'a ClaimId,
    may_delete: bool,
}

impl Target<'_> {
    /// The delete button for a claim or an operation, when this caller may delete it.
    fn delete(&self, what: &str) -> Markup {
        html! {
            @if self.may_delete {
                form method="post" action="/ui/lookup/delete" data-ui {
                    input type="hidden" name="kind" value=(what);
                    input type="hidden" name="ns" value=(self.ns.as_str());
                    input type="hidden" name="id" value=(self.id);
                    button.danger type="submit" data-testid="lookup-delete" { "Delete this " (what) }
                }
            }
        }
    }
}

async fn operation_result(state: &Ui, t: &Target<'_>) -> Result<Markup, ApiError> {
    let now = now(state);
    let (ns, id) = (t.ns.as_str(), t.id);
    let key = idem_core::operation::store_id(t.ns, t.id);
    Ok(match state.stores.requests.peek_request(&key).await? {
        None => html! {
            p.empty data-testid="lookup-result" {
                "No operation " code { (id) } " in " (ns) ": it was never begun, was released, or expired."
            }
        },
        Some(RequestState::Held { lease_until, .. }) => html! {
            div.card data-testid="lookup-result" {
                p {
                    (ns) " — " strong { "in progress" } ": someone holds it; the lease ends "
                    (time(lease_until, now)) "."
                }
                p.mono { (id) }
            }
        },
        Some(RequestState::Completed { result, expires_at, .. }) => {
            let outcome = idem_core::operation::Outcome::decode(&result).map_err(|_| ApiError::Internal)?;
            let shown = outcome.result.as_deref().map_or_else(|| "(no result)".to_owned(), pretty);
            html! {
                div.card data-testid="lookup-result" {
                    p {
                        (pill("s-completed", "✔", "completed")) " " (time(outcome.completed_at, now))
                        ", kept until " (time(expires_at, now))
                    }
                    p.mono { (id) }
                    pre.code { (shown) }
                    (t.delete("operation"))
                }
            }
        }
    })
}

async fn claim_result(state: &Ui, t: &Target<'_>) -> Result<Markup, ApiError> {
    let now = now(state);
    let (ns, id) = (t.ns.as_str(), t.id);
    let Some(record) = state.stores.claims.get(t.ns, t.id).await? else {
        return Ok(html! { p.empty data-testid="lookup-result" { "No live claim " code { (id) } " in " (ns) "." } });
    };
    Ok(html! {
        div.card data-testid="lookup-result" {
            p { strong { (record.parts.as_slice().join(" / ")) } " in " (ns) }
            dl.facts {
                dt { "Id" } dd.mono { (id) }
                dt { "Claimed" } dd { (time(record.created_at, now)) }
                dt { "Expires" } dd { @if let Some(at) = record.expires_at { (time(at, now)) } @else { "never" } }
            }
            @if let Some(data) = &record.data { pre.code { (pretty(data.get())) } }
            (t.delete("claim"))
        }
    })
}

/// JSON indented for reading; anything else as it is.
fn pretty(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .map_or(text.to_owned(), |v| serde_json::to_string_pretty(&v).unwrap_or_default())
}

pub async fn lookup_delete(state: Ui, Form(form): Form<LookupForm>) -> Response {
    let outcome = async {
        let (ns, parts, id) = lookup_target(&form)?;
        state.caller.require_namespace(ns.as_str())?;
        if filled(&form.kind) == Some("prefix") {
            let Some(parts) = parts else {
                return Err(idem_core::Invalid::new("key", "deleting a prefix needs parts, not an id").into());
            };
            let mut deleted = 0;
            loop {
                let gone = state.stores.claims.delete_prefix(&ns, &parts, 1000).await?;
                deleted += gone;
                if gone < 1000 {
                    break;
                }
            }
            idem_metrics::claims::deleted(ns.as_str(), deleted as u64);
            let token = state.caller.name();
            tracing::info!(token, namespace = ns.as_str(), deleted, "claims deleted by prefix from the dashboard");
            let shown = parts.as_slice().join(" / ");
            return Ok(notice("ok", &format!("Deleted {deleted} claims under {shown}: their keys can be claimed again.")));
        }
        if filled(&form.kind) == Some("operation") {
            let key = idem_core::operation::store_id(&ns, &id);
            Ok::<_, ApiError>(match state.stores.requests.forget_request(&key).await? {
                Forget::Forgotten => {
                    let token = state.caller.name();
                    tracing::info!(token, namespace = ns.as_str(), operation = %id, "operation deleted from the dashboard");
                    notice("ok", &format!("Deleted operation {id}: the key is free again."))
                }
                Forget::Held => {
                    notice("error", "Someone holds this operation now; it cannot be deleted while in progress.")
                }
                Forget::Absent => notice("error", "That operation was already gone."),
            })
        } else if state.stores.claims.delete(&ns, &id).await? {
            idem_metrics::claims::deleted(ns.as_str(), 1);
            Ok(notice("ok", &format!("Deleted claim {id}: the key can be claimed again.")))
        } else {
            Ok(notice("error", "That claim was already gone."))
        }
    }
    .await;
    let flash = outcome.unwrap_or_else(|e| notice("error", &e.to_string()));
    let content = html! {
        h1 { "Claims and operations" }
        (flash)
        (lookup_form(&LookupForm { id: None, key: None, after: None, count: None, ..form }))
    };
    let mut response = render(&state, "Claims and operations", Tab::Lookup, content);
    *response.status_mut() = StatusCode::OK;
    at(response, "/ui/lookup")
}

#[cfg(test)]
mod tests {
    use super::{COUNT_CAP, Counted, grouped};

    #[test]
    fn counts_read_in_words_and_stop_at_the_cap() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(Counted::of(60).words(), "60");
        assert_eq!(Counted::of(COUNT_CAP), Counted { n: COUNT_CAP, at_least: false });
        assert_eq!(Counted::of(COUNT_CAP + 1).words(), "at least 10,000");
    }
}
