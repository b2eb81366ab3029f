//! Blocking reads: a session read with If-None-Match and wait_ms, a log read with wait_ms and
//! an event read with after and wait_ms are answered when something changes, not before.

mod common;

use std::time::Duration;

use common::{hello_in_the_log, scheduled_session, Manager};
use reqwest::StatusCode;
use serde_json::Value;

/// Longer than any answer here needs, shorter than a wait that was never ended by a change
/// (30 s): a read that is not woken fails the test instead of passing late.
const REQUEST_LIMIT: Duration = Duration::from_secs(20);

/// GET `path` (with If-None-Match `etag`), limited to [`REQUEST_LIMIT`].
fn read(m: &Manager, path: &str, etag: Option<&str>) -> reqwest::RequestBuilder {
    let mut request = m
        .client
        .get(format!("{}{path}", m.base))
        .bearer_auth(&m.admin)
        .timeout(REQUEST_LIMIT);
    if let Some(etag) = etag {
        request = request.header("if-none-match", etag);
    }
    request
}

/// The agent `a1` reports `session` as `state`.
async fn report(m: &Manager, session: &str, state: &str) {
    let body = format!(r#"{{"sessions": [{{"id": "{session}", "state": "{state}"}}]}}"#);
    let r = m.post("/api/v1/agents/a1/sync", &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

on_both!(
    a_session_read_waits_for_a_change_and_says_304_when_none_came,
    |m: Manager| async move {
        let id = scheduled_session(&m).await;
        let path = format!("/api/v1/sessions/{id}");
        let first = read(&m, &path, None).send().await.unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers()["etag"].to_str().unwrap().to_string();
        let body: Value = first.json().await.unwrap();
        assert_eq!(body["state"], "scheduled");

        // Unchanged: 304 with the same tag, at once or after a short wait.
        for query in ["", "?wait_ms=300"] {
            let r = read(&m, &format!("{path}{query}"), Some(&etag))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::NOT_MODIFIED, "{query}");
            assert_eq!(r.headers()["etag"], etag.as_str());
        }

        // A read waiting for a change is answered by the agent's report that it runs.
        let waiting = tokio::spawn(read(&m, &format!("{path}?wait_ms=30000"), Some(&etag)).send());
        report(&m, &id, "running").await;
        let r = waiting.await.unwrap().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let changed = r.headers()["etag"].to_str().unwrap().to_string();
        assert_ne!(changed, etag);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["state"], "running");

        // And by its end.
        let waiting =
            tokio::spawn(read(&m, &format!("{path}?wait_ms=30000"), Some(&changed)).send());
        report(&m, &id, "succeeded").await;
        let body: Value = waiting.await.unwrap().unwrap().json().await.unwrap();
        assert_eq!(body["state"], "succeeded");
    }
);

on_both!(
    a_log_read_waits_for_bytes_and_ends_with_the_session,
    |m: Manager| async move {
        let id = scheduled_session(&m).await;
        report(&m, &id, "running").await;
        let logs = format!("/api/v1/sessions/{id}/logs/stdout");
        let waiting =
            tokio::spawn(read(&m, &format!("{logs}?offset=0&wait_ms=30000"), None).send());
        hello_in_the_log(&m, &id).await;
        let r = waiting.await.unwrap().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.unwrap(), "hello\n");

        // Past the end of a log that will grow no more: empty once the session has ended.
        let waiting =
            tokio::spawn(read(&m, &format!("{logs}?offset=6&wait_ms=30000"), None).send());
        report(&m, &id, "succeeded").await;
        let r = waiting.await.unwrap().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.unwrap(), "");
    }
);

on_both!(
    an_event_read_after_the_last_waits_for_the_next,
    |m: Manager| async move {
        let id = scheduled_session(&m).await;
        let newest = m.get("/api/v1/events?limit=1").await.body;
        let last = newest[0]["id"].as_i64().unwrap();
        let waiting = tokio::spawn(
            read(
                &m,
                &format!("/api/v1/events?after={last}&wait_ms=30000"),
                None,
            )
            .send(),
        );
        let r = m.post(&format!("/api/v1/sessions/{id}/cancel"), "").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let events: Value = waiting.await.unwrap().unwrap().json().await.unwrap();
        let kinds: Vec<&str> = events
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert!(kinds.contains(&"cancelled"), "{events}");
    }
);

/// A wait longer than the manager holds a request is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_beyond_30_s_is_refused_naming_wait_ms() {
    let m = Manager::start(None).await;
    let id = scheduled_session(&m).await;
    for path in [
        format!("/api/v1/sessions/{id}?wait_ms=30001"),
        format!("/api/v1/sessions/{id}/logs/stdout?wait_ms=30001"),
        "/api/v1/events?after=1&wait_ms=30001".to_string(),
    ] {
        let r = m.get(&path).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{path}: {}", r.body);
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("wait_ms"),
            "{path}: {}",
            r.body
        );
    }
}
