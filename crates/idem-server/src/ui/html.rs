//! The few pieces every page is built from: the page frame, status badges, times shown both
//! relative and absolute, notices and select options. Pages are [`maud`] templates: every value
//! spliced into one is escaped unless it is itself [`Markup`], so text from the store, a form or
//! a config can never open markup, and no page escapes anything by hand.

use idem_core::Timestamp;
use idem_core::event::ReceiptStatus;
use maud::{DOCTYPE, Markup, html};

/// Encodes a query-string value.
pub fn query_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `?a=1&b=2` from the pairs that have a value (empty when none has).
pub fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let set: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.filter(|v| !v.is_empty()).map(|v| format!("{k}={}", query_value(v))))
        .collect();
    if set.is_empty() { String::new() } else { format!("?{}", set.join("&")) }
}

/// Which part of the dashboard a page belongs to (its tab is highlighted).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Overview,
    Receipts,
    Replay,
    Lookup,
    None,
}

/// A whole page: the frame (navigation; the token's name and sign-out when there is a token)
/// around `content`.
pub fn page(title: &str, tab: Tab, signed_in: Option<&str>, content: Markup) -> Markup {
    const TABS: [(Tab, &str, &str); 4] = [
        (Tab::Overview, "/ui", "Overview"),
        (Tab::Receipts, "/ui/receipts", "Receipts"),
        (Tab::Replay, "/ui/replay", "Bulk replay"),
        (Tab::Lookup, "/ui/lookup", "Claims & operations"),
    ];
    let body = html! {
        header.top {
            a.brand href="/ui" { "idem" }
            nav {
                @for (t, href, label) in TABS {
                    a href=(href) aria-current=[(t == tab).then_some("page")] { (label) }
                }
            }
            @if let Some(who) = signed_in {
                span.muted data-testid="signed-in-as" { (who) }
                button.link type="button" data-sign-out { "Forget token" }
            }
        }
        main { (content) }
    };
    frame(title, body, false)
}

/// The token prompt: all that is served without a token when tokens are configured. The input
/// has no `name`, so the token can never be submitted as a form field (and so never lands in a
/// URL); the script keeps it in this browser's storage and sends it as a Bearer token.
pub fn prompt(rejected: bool) -> Markup {
    let body = html! {
        main.narrow {
            h1 { span.brand { "idem" } " dashboard" }
            p {
                "This idem requires an API token (from " code { "[auth]" } " in its config). It is kept in \
                 this browser and sent as a Bearer token with each request; it never appears in a URL."
            }
            @if rejected {
                p.error role="alert" { "That token was not accepted. Check " code { "[auth]" } " in idem's config." }
            }
            form #token-form .card autocomplete="off" {
                label for="token" { "API token" }
                input #token type="password" data-testid="token-input" autocomplete="off" required;
                button type="submit" data-testid="token-submit" { "Open the dashboard" }
            }
            noscript { p.error { "The dashboard needs JavaScript to send the token." } }
        }
    };
    frame("Sign in", body, true)
}

fn frame(title: &str, body: Markup, needs_token: bool) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · idem" }
                link rel="stylesheet" href="/ui/assets/ui.css";
                script src="/ui/assets/ui.js" defer {}
            }
            body { #app data-needs-token=[needs_token.then_some("1")] { (body) } }
        }
    }
}

/// A receipt's status as a coloured badge that also carries an icon and the word.
pub fn badge(status: ReceiptStatus) -> Markup {
    let icon = match status {
        ReceiptStatus::Accepted => "○",
        ReceiptStatus::Processing => "◐",
        ReceiptStatus::Retrying => "↻",
        ReceiptStatus::Completed => "✔",
        ReceiptStatus::Dead => "✖",
        ReceiptStatus::Discarded => "⊘",
    };
    pill(&format!("s-{}", status.as_str()), icon, status.as_str())
}

/// A badge with any status class, icon and word: `pill("s-completed", "✔", "ready")`.
pub fn pill(class: &str, icon: &str, word: &str) -> Markup {
    html! { span class={ "badge " (class) } { span aria-hidden="true" { (icon) } " " (word) } }
}

/// A time shown relative to now, with the absolute UTC time beside it and in its tooltip.
pub fn time(at: Timestamp, now: Timestamp) -> Markup {
    let iso = at.to_rfc3339();
    let absolute = iso.get(..19).map_or(iso.clone(), |t| t.replace('T', " ")) + " UTC";
    html! { time datetime=(iso) title=(absolute) { (relative(at, now)) } " " span.abs { (absolute) } }
}

/// "just now", "5 s ago", "3 min ago", "in 2 h", …
pub fn relative(at: Timestamp, now: Timestamp) -> String {
    let delta = now.millis() - at.millis();
    let (secs, past) = ((delta.abs() / 1000) as u64, delta >= 0);
    let amount = match secs {
        0..=1 => return "just now".into(),
        2..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min", secs / 60),
        3600..=86_399 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86_400),
    };
    if past { format!("{amount} ago") } else { format!("in {amount}") }
}

/// A duration in words for ages: "4 s", "12 min".
pub fn age(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min", secs / 60),
        3600..=86_399 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// A notice at the top of a page.
pub fn notice(kind: &str, text: &str) -> Markup {
    html! { p class={ "notice " (kind) } role="status" data-testid="notice" { (text) } }
}

/// `<option>`s for `choices`, with `selected` marked; the first is "any".
pub fn options(any: &str, choices: &[&str], selected: Option<&str>) -> Markup {
    html! {
        option value="" { (any) }
        @for c in choices {
            option value=(c) selected[Some(*c) == selected] { (c) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_everything_that_could_open_markup() {
        let shown = notice("error", r#"<script>"a" & 'b'</script>"#).into_string();
        assert!(shown.contains("&lt;script&gt;&quot;a&quot; &amp; 'b'&lt;/script&gt;"), "{shown}");
        let picked = options("any", &[r#""><script>"#], Some(r#""><script>"#)).into_string();
        assert!(picked.contains(r#"<option value="&quot;&gt;&lt;script&gt;" selected>"#), "{picked}");
        assert_eq!(query(&[("source", Some("a b&c")), ("status", None), ("x", Some(""))]), "?source=a%20b%26c");
    }

    #[test]
    fn times_read_relative_both_ways() {
        let now = Timestamp(10_000_000);
        assert_eq!(relative(now, now), "just now");
        assert_eq!(relative(Timestamp(now.0 - 5_000), now), "5 s ago");
        assert_eq!(relative(Timestamp(now.0 - 180_000), now), "3 min ago");
        assert_eq!(relative(Timestamp(now.0 + 7_200_000), now), "in 2 h");
        assert!(time(Timestamp(0), now).into_string().contains("1970-01-01 00:00:00 UTC"));
    }
}
