//! `GET /metrics` as Prometheus reads it: behind a token, what exists (sessions, agents, slots)
//! and what happened (placements, passes, requests), and text that `promtool check metrics`
//! accepts.

mod common;

use common::{scheduled_session, Manager};
use reqwest::{Method, StatusCode};

/// The value of the sample `name` (with its labels as written), if the text has it.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

on_both!(
    metrics_show_sessions_agents_slots_and_what_passes_did,
    |m: Manager| async move {
        scheduled_session(&m).await;
        let r = m.call(Method::GET, "/metrics", None, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "a token is needed");
        let bob = m.user_token("bob").await;
        let r = m.call(Method::GET, "/metrics", Some(&bob), None).await;
        assert_eq!(r.status, StatusCode::OK, "any user may scrape");
        let text = r.body.as_str().unwrap().to_string();

        let expect = [
            (r#"corral_sessions{group="g",state="scheduled"}"#, 1.0),
            (r#"corral_agents{group="g",state="alive"}"#, 1.0),
            (r#"corral_slots_capacity{group="g",slot="cpu"}"#, 4.0),
            (r#"corral_slots_allocated{group="g",slot="cpu"}"#, 1.0),
            (r#"corral_slots_free{group="g",slot="cpu"}"#, 3.0),
            (r#"corral_placements_total{group="g"}"#, 1.0),
        ];
        for (name, value) in expect {
            assert_eq!(sample(&text, name), Some(value), "{name} in:\n{text}");
        }
        let passes = sample(
            &text,
            r#"corral_pass_duration_seconds_count{group="g",outcome="applied"}"#,
        );
        assert!(passes.is_some_and(|n| n >= 1.0), "{text}");
        let submits = sample(
            &text,
            r#"corral_http_request_duration_seconds_count{method="POST",route="/api/v1/sessions",status="201"}"#,
        );
        assert_eq!(submits, Some(1.0), "{text}");
        // No id of a session or an agent is a label.
        assert!(!text.contains("a1"), "{text}");

        if let Some(check) = promtool_check(&text) {
            assert!(check.0, "promtool check metrics:\n{}\n{text}", check.1);
        }
    }
);

/// `promtool check metrics` on `text`: whether it passed and what it said; `None` where
/// promtool is not installed (skipped, saying so; under CI=true, a failure).
fn promtool_check(text: &str) -> Option<(bool, String)> {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        corral_testkit::require("promtool (apt-get install prometheus)", false);
        return None;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), said))
}
