//! A group's history: nodes by template and sessions by state sampled over a window, from the
//! events and history rows the manager writes, with the scaling events in the window.

mod common;

use common::Manager;
use reqwest::{Method, StatusCode};
use serde_json::Value;

fn ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn series(h: &Value, name: &str) -> Vec<u64> {
    h[name]
        .as_array()
        .unwrap_or_else(|| panic!("{name} in {h}"))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

on_both!(
    history_counts_nodes_by_template_and_sessions_by_state,
    |m: Manager| async move {
        let before = ms_now() - 1;
        let r = m
            .post(
                "/api/v1/groups",
                r#"{"name": "g", "templates": [{"name": "small", "slots": "cpu=4"}]}"#,
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        for body in [
            r#"{"id": "a1", "group": "g", "capacity": "cpu=4", "template": "small"}"#,
            r#"{"id": "a2", "group": "g", "capacity": "cpu=1"}"#,
        ] {
            let r = m.post("/api/v1/agents", body).await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        }
        // Two sessions of cpu=3: one fits a1, the other waits for it.
        let mut ids = vec![];
        for _ in 0..2 {
            let r = m
                .post(
                    "/api/v1/sessions",
                    r#"{"group": "g", "command": ["true"], "request": "cpu=3"}"#,
                )
                .await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
            ids.push(r.body["id"].as_str().unwrap().to_string());
        }
        m.wait_session(&ids[0], |s| s["state"] == "scheduled").await;
        m.wait_session(&ids[1], |s| s["wait_reason"].is_string())
            .await;
        // a2 goes: the nodes without a template fall back to none.
        let r = m
            .call(Method::DELETE, "/api/v1/agents/a2", Some(&m.admin), None)
            .await;
        assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);

        let h = m
            .get(&format!(
                "/api/v1/groups/g/history?since={}&step=1s",
                before - 5000
            ))
            .await;
        assert_eq!(h.status, StatusCode::OK, "{}", h.body);
        let h = h.body;
        assert_eq!(h["step_ms"], 1000);
        let times = h["times"].as_array().unwrap();
        assert_eq!(times.last().unwrap(), &h["until"], "the last sample is now");
        // The first sample is before anything happened (the test takes well under 4 s); the
        // last is now.
        assert!(times.len() >= 5, "{h}");
        assert_eq!(series(&h, "pending").first(), Some(&0));
        assert_eq!(series(&h, "pending").last(), Some(&1));
        assert_eq!(series(&h, "running").last(), Some(&1));
        assert_eq!(series(&h["nodes"], "small").last(), Some(&1));
        // a2 came and went between samples, or its series ends at 0.
        if h["nodes"].get("-").is_some() {
            assert_eq!(series(&h["nodes"], "-").last(), Some(&0));
        }
        let kinds: Vec<&str> = h["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["registered", "registered", "removed"],
            "{}",
            h["events"]
        );

        // A window that ends before it all is empty; nodes of no template had none then.
        let h = m
            .get(&format!(
                "/api/v1/groups/g/history?since={}&until={before}",
                before - 60_000
            ))
            .await
            .body;
        assert!(series(&h, "pending").iter().all(|v| *v == 0), "{h}");
        assert_eq!(h["nodes"], serde_json::json!({}));
        assert_eq!(h["events"], serde_json::json!([]));

        // Users read it as admins do.
        let user = m.user_token("ann").await;
        let r = m
            .call(
                Method::GET,
                "/api/v1/groups/g/history?since=1h",
                Some(&user),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(series(&r.body, "pending").last(), Some(&1));
    }
);

on_both!(
    a_window_that_makes_no_sense_is_refused_naming_its_field,
    |m: Manager| async move {
        let r = m.get("/api/v1/groups/nope/history").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
        let r = m
            .post("/api/v1/groups", r#"{"name": "g", "templates": []}"#)
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        for (query, field) in [
            ("since=yesterday", "since"),
            ("since=1h&until=2h", "since"),
            ("since=30d&step=1s", "step"),
            ("step=-5", "step"),
        ] {
            let r = m.get(&format!("/api/v1/groups/g/history?{query}")).await;
            assert_eq!(r.status, StatusCode::BAD_REQUEST, "{query}: {}", r.body);
            assert_eq!(
                r.body["error"]["details"]["field"], field,
                "{query}: {}",
                r.body
            );
        }
        let r = m.get("/api/v1/groups/g/history?sinse=1h").await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    }
);
