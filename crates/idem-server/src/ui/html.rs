//! The few pieces every page is built from: escaping, the page frame, status badges, times shown
//! both relative and absolute. Every value that did not come from this file passes through
//! [`esc`] before it reaches the page.

use std::fmt::Write as _;

use idem_core::Timestamp;
use idem_core::event::ReceiptStatus;

/// Escapes text for HTML content and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

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
pub fn page(title: &str, tab: Tab, signed_in: Option<&str>, content: &str) -> String {
    let mut nav = String::new();
    for (t, href, label) in [
        (Tab::Overview, "/ui", "Overview"),
        (Tab::Receipts, "/ui/receipts", "Receipts"),
        (Tab::Replay, "/ui/replay", "Bulk replay"),
        (Tab::Lookup, "/ui/lookup", "Claims &amp; operations"),
    ] {
        let current = if t == tab { r#" aria-current="page""# } else { "" };
        let _ = write!(nav, r#"<a href="{href}"{current}>{label}</a>"#);
    }
    let sign_out = signed_in.map_or(String::new(), |who| {
        format!(
            r#"<span class="muted" data-testid="signed-in-as">{}</span><button type="button" class="link" data-sign-out>Forget token</button>"#,
            esc(who)
        )
    });
    frame(
        title,
        &format!(
            r#"<header class="top"><a class="brand" href="/ui">idem</a><nav>{nav}</nav>{sign_out}</header>
<main>{content}</main>"#
        ),
        "",
    )
}

/// The token prompt: all that is served without a token when tokens are configured. The input
/// has no `name`, so the token can never be submitted as a form field (and so never lands in a
/// URL); the script keeps it in this browser's storage and sends it as a Bearer token.
pub fn prompt(rejected: bool) -> String {
    let error = if rejected {
        r#"<p class="error" role="alert">That token was not accepted. Check <code>[auth]</code> in idem's config.</p>"#
    } else {
        ""
    };
    frame(
        "Sign in",
        &format!(
            r#"<main class="narrow"><h1><span class="brand">idem</span> dashboard</h1>
<p>This idem requires an API token (from <code>[auth]</code> in its config). It is kept in this browser
and sent as a Bearer token with each request; it never appears in a URL.</p>
{error}
<form id="token-form" class="card" autocomplete="off">
<label for="token">API token</label>
<input id="token" type="password" data-testid="token-input" autocomplete="off" required>
<button type="submit" data-testid="token-submit">Open the dashboard</button>
</form>
<noscript><p class="error">The dashboard needs JavaScript to send the token.</p></noscript></main>"#
        ),
        r#" data-needs-token="1""#,
    )
}

fn frame(title: &str, body: &str, app_attrs: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{} · idem</title><link rel="stylesheet" href="/ui/assets/ui.css"><script src="/ui/assets/ui.js" defer></script></head>
<body><div id="app"{app_attrs}>{body}</div></body></html>"#,
        esc(title)
    )
}

/// A receipt's status as a coloured badge that also carries an icon and the word.
pub fn badge(status: ReceiptStatus) -> String {
    let icon = match status {
        ReceiptStatus::Accepted => "○",
        ReceiptStatus::Processing => "◐",
        ReceiptStatus::Retrying => "↻",
        ReceiptStatus::Completed => "✔",
        ReceiptStatus::Dead => "✖",
        ReceiptStatus::Discarded => "⊘",
    };
    let word = status.as_str();
    format!(r#"<span class="badge s-{word}"><span aria-hidden="true">{icon}</span> {word}</span>"#)
}

/// A time shown relative to now, with the absolute UTC time beside it and in its tooltip.
pub fn time(at: Timestamp, now: Timestamp) -> String {
    let iso = at.to_rfc3339();
    let absolute = iso.get(..19).map_or(iso.clone(), |t| t.replace('T', " ")) + " UTC";
    format!(
        r#"<time datetime="{iso}" title="{absolute}">{}</time> <span class="abs">{absolute}</span>"#,
        relative(at, now)
    )
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
pub fn notice(kind: &str, text: &str) -> String {
    format!(r#"<p class="notice {kind}" role="status" data-testid="notice">{}</p>"#, esc(text))
}

/// `<option>`s for `choices`, with `selected` marked; the first is "any".
pub fn options(any: &str, choices: &[&str], selected: Option<&str>) -> String {
    let mut out = format!(r#"<option value="">{}</option>"#, esc(any));
    for c in choices {
        let sel = if Some(*c) == selected { " selected" } else { "" };
        let _ = write!(out, r#"<option value="{0}"{sel}>{0}</option>"#, esc(c));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_everything_that_could_open_markup() {
        assert_eq!(
            esc(r#"<script>"a" & 'b'</script>"#),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
        assert_eq!(query(&[("source", Some("a b&c")), ("status", None), ("x", Some(""))]), "?source=a%20b%26c");
    }

    #[test]
    fn times_read_relative_both_ways() {
        let now = Timestamp(10_000_000);
        assert_eq!(relative(now, now), "just now");
        assert_eq!(relative(Timestamp(now.0 - 5_000), now), "5 s ago");
        assert_eq!(relative(Timestamp(now.0 - 180_000), now), "3 min ago");
        assert_eq!(relative(Timestamp(now.0 + 7_200_000), now), "in 2 h");
        assert!(time(Timestamp(0), now).contains("1970-01-01 00:00:00 UTC"));
    }
}
