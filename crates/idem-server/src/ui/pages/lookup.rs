//! Claims and operations: looked up by key or id, and deleted.

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Form, extract::rejection::QueryRejection};
use idem_core::request::{Forget, RequestState};
use idem_core::{ClaimId, Namespace, Parts};
use serde::Deserialize;

use super::html::{Tab, esc, notice, time};
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

pub async fn lookup(state: Ui, query_: Result<Query<LookupForm>, QueryRejection>) -> Response {
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

async fn lookup_result(state: &Ui, form: &LookupForm) -> Result<String, ApiError> {
    let (ns, parts, id) = lookup_target(form)?;
    state.caller.require_namespace(ns.as_str())?;
    let now = now(state);
    let may_delete = state.acts_on_namespace(ns.as_str());
    let delete = |what: &str| {
        if !may_delete {
            return String::new();
        }
        format!(
            r#"<form method="post" action="/ui/lookup/delete" data-ui><input type="hidden" name="kind" value="{what}">
<input type="hidden" name="ns" value="{}"><input type="hidden" name="id" value="{id}">
<button type="submit" class="danger" data-testid="lookup-delete">Delete this {what}</button></form>"#,
            esc(ns.as_str())
        )
    };
    if filled(&form.kind) == Some("operation") {
        let key = idem_core::operation::store_id(&ns, &id);
        return Ok(match state.stores.requests.peek_request(&key).await? {
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
        let any = state.stores.claims.prefix_exists(&ns, &parts).await?;
        return Ok(format!(
            r#"<p class="card" data-testid="lookup-result">{} live claim in {} has parts beginning with {}.</p>"#,
            if any { "✔ At least one" } else { "✖ No" },
            esc(ns.as_str()),
            esc(&parts.as_slice().join(" / "))
        ));
    }
    Ok(match state.stores.claims.get(&ns, &id).await? {
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

pub async fn lookup_delete(state: Ui, Form(form): Form<LookupForm>) -> Response {
    let outcome = async {
        let (ns, _, id) = lookup_target(&form)?;
        state.caller.require_namespace(ns.as_str())?;
        if filled(&form.kind) == Some("operation") {
            let key = idem_core::operation::store_id(&ns, &id);
            Ok::<_, ApiError>(match state.stores.requests.forget_request(&key).await? {
                Forget::Forgotten => {
                    let token = state.caller.name();
                    tracing::info!(token, namespace = ns.as_str(), operation = %id, "operation deleted from the dashboard");
                    notice("ok", &format!("Deleted operation {id}: the key is free again."))
                }
                Forget::InFlight => {
                    notice("error", "Someone holds this operation now; it cannot be deleted while in progress.")
                }
                Forget::Absent => notice("error", "That operation was already gone."),
            })
        } else if state.stores.claims.delete(&ns, &id).await? {
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
