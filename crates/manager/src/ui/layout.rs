//! The frame every page shares, and the small pieces pages are made of: usage bars per slot,
//! times, states.

use corral_core::{Slots, Timestamp};
use maud::{html, Markup, DOCTYPE};

use crate::auth::Caller;

/// A whole page: the head, the bar with who is logged in, and `body`.
pub fn page(title: &str, viewer: Option<&Caller>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Corral" }
                // No favicon request: an empty one.
                link rel="icon" href="data:,";
                link rel="stylesheet" href="/ui/static/style.css";
                script src="/ui/static/app.js" defer {}
            }
            body {
                header {
                    a.brand href="/ui" { "Corral" }
                    @if let Some(v) = viewer {
                        span.who #who {
                            (v.user) " (" (if v.is_admin() { "admin" } else { "user" }) ")"
                        }
                        form.logout method="post" action="/ui/logout" {
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// One bar: `used` of `total`, labelled with both in people's form.
pub fn bar(label: &str, used: u64, total: u64, text: &str) -> Markup {
    let percent = used
        .saturating_mul(100)
        .checked_div(total)
        .unwrap_or(0)
        .min(100);
    // Widths in steps of 5 %, each a class of the style sheet (no inline style under the CSP).
    let step = (percent / 5) * 5;
    html! {
        div.usage title=(format!("{label}: {text} ({percent}%)")) {
            span.slot { (label) }
            span.track { span class=(format!("fill w{step}")) {} }
            span.amount { (text) }
        }
    }
}

/// A bar per slot of `capacity`: how much of it `allocated` takes.
pub fn slot_bars(allocated: &Slots, capacity: &Slots) -> Markup {
    html! {
        div.bars {
            @for (name, total) in capacity.iter() {
                @let used = allocated.get(name.as_str());
                (bar(name.as_str(), used.milli(), total.milli(),
                     &format!("{} / {}", used.display_for(name), total.display_for(name))))
            }
        }
    }
}

/// A time as `2026-12-04 05:18:47` (UTC).
pub fn time(at: Timestamp) -> String {
    match jiff::Timestamp::from_millisecond(at.0) {
        Ok(t) => t.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => at.0.to_string(),
    }
}

/// A state word with a class for its colour.
pub fn state(word: &str) -> Markup {
    html! { span class=(format!("state state-{word}")) { (word) } }
}

/// A link to a session page.
pub fn session_link(id: &str) -> Markup {
    html! { a.session-link href=(format!("/ui/sessions/{id}")) { (id) } }
}

/// A value's word as the API spells it (`pending`, `demand`).
pub fn word(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_string(),
    }
}
