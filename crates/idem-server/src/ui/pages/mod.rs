//! The dashboard's pages. Each reads what it shows straight from the store (or, for traffic, from
//! the server's own counters) and asks the same functions the API uses for every action, so the
//! dashboard can do nothing the API would refuse. One file per page (and its actions); the helpers
//! every page uses are here.

mod bulk;
mod lookup;
mod overview;
mod receipts;

pub use bulk::{bulk, bulk_run};
pub use lookup::{lookup, lookup_delete};
pub use overview::overview;
pub use receipts::{discard_one, receipt, receipts, replay_one};

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use idem_core::Timestamp;
use maud::{Markup, html};

use super::Ui;
use super::html::{self, Tab, notice};
use crate::web::{ApiError, AppState};

const PAGE: usize = 50;
const STATUSES: [&str; 6] = idem_core::event::ReceiptStatus::NAMES;

/// A rendered page, or a page that reports what went wrong.
type Page = Result<Response, Response>;

fn render(ui: &Ui, title: &str, tab: Tab, content: Markup) -> Response {
    let page = html::page(title, tab, super::signed_in(&ui.caller).as_deref(), content);
    let mut response = page.into_string().into_response();
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

fn failed(ui: &Ui, tab: Tab, e: ApiError) -> Response {
    let status = e.status_code();
    let content = html! { h1 { (e.problem().title) } (notice("error", &e.to_string())) };
    let mut response = render(ui, "Problem", tab, content);
    *response.status_mut() = status;
    response
}

fn now(state: &AppState) -> Timestamp {
    state.clock.now()
}

/// The configured sources this caller may see.
fn source_names(ui: &Ui) -> Vec<String> {
    ui.config.sources.iter().map(|s| s.name.as_str().to_owned()).filter(|s| ui.caller.sees_source(s)).collect()
}

/// `inner` in the section the script refreshes every `seconds`, under the bar that pauses it.
fn live(seconds: u32, inner: Markup) -> Markup {
    html! {
        div.live-bar {
            button.link type="button" data-pause { "Pause live refresh" }
            span.muted data-updated { "updated every " (seconds) " s" }
        }
        section #live data-refresh=(seconds) { (inner) }
    }
}

/// A form field with something in it.
fn filled(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|v| !v.is_empty())
}
